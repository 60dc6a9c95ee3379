package store

import (
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/syncd-dev/syncd/proto"
)

// Status is the state of an outbox item (PROTOCOL.md §8.3), and of a sent message beyond it:
// sending → sent → delivered → read. The numbers are stored on disk: never renumber them.
type Status uint8

// Statuses. An outbox item is stored with one of the first three; StatusDelivered and
// StatusRead are never stored in an item: they are derived from the peer marks (marks.go), so
// that one mark entry moves every message it covers without rewriting them.
const (
	StatusSending   Status = 1 // queued or in flight; resent after a restart
	StatusSent      Status = 2 // acknowledged by the server (Ack stored)
	StatusFailed    Status = 3 // given up: a non-retryable error or retries exhausted
	StatusDelivered Status = 4 // sent, and stored by a device of another member
	StatusRead      Status = 5 // sent, and read by another member
)

// String returns "sending", "sent", "failed", "delivered", "read" or "status(N)".
func (s Status) String() string {
	switch s {
	case StatusSending:
		return "sending"
	case StatusSent:
		return "sent"
	case StatusFailed:
		return "failed"
	case StatusDelivered:
		return "delivered"
	case StatusRead:
		return "read"
	}
	return "status(" + strconv.Itoa(int(s)) + ")"
}

// valid reports whether s is a status an outbox item may be stored with (not delivered or
// read: see the constants).
func (s Status) valid() bool { return s >= StatusSending && s <= StatusFailed }

// OutboxItem is one mutation of the app in the durable outbox: written before it is sent,
// resent with the same ClientMsgID and payload until acked or given up. Which payload fields
// are used depends on Kind (Body/Peer for messages, UpTo for receipts, Target for recalls,
// Target and Body for edits, Target, Reaction and Remove for reactions, Members for group
// changes).
type OutboxItem struct {
	Seq         uint64         `msgpack:"seq"`                // outbox order, assigned by AddOutbox
	ClientMsgID string         `msgpack:"cmid"`               // dedup key at the server; never changes
	Kind        proto.Kind     `msgpack:"kind"`               // which mutation
	Conv        string         `msgpack:"conv"`               // conversation id
	Peer        string         `msgpack:"peer"`               // KindMessage: other user of a direct conversation
	Body        []byte         `msgpack:"body"`               // KindMessage: the body; KindEdit: the new body
	UpTo        proto.Position `msgpack:"up_to"`              // KindReceipt: read up to this conv_seq
	Target      proto.MsgID    `msgpack:"target"`             // KindRecall, KindEdit, KindReaction: the message acted on
	Reaction    string         `msgpack:"reaction,omitempty"` // KindReaction: the reaction
	Remove      bool           `msgpack:"remove,omitempty"`   // KindReaction: take it off
	Members     []string       `msgpack:"members"`            // group create/add/remove/role change
	Role        proto.Role     `msgpack:"role"`               // KindRoleChange: the role to give
	Status      Status         `msgpack:"status"`             // sending, sent, failed
	Attempts    int            `msgpack:"attempts"`           // send attempts so far (kept across restarts)
	NextAttempt int64          `msgpack:"next_attempt"`       // earliest next attempt, Unix ns
	Ack         *proto.Ack     `msgpack:"ack"`                // the server's answer, set when SENT
	LastError   string         `msgpack:"last_error"`         // the last error, for display and logs
	Created     int64          `msgpack:"created"`            // when the app queued it, Unix ns
}

// AddOutbox stores a new outbox item durably and returns it with Seq assigned (the next outbox
// sequence), ClientMsgID set to a random 16-byte hex id if it was empty, Status StatusSending if
// it was zero and Created set to now if it was zero. A given ClientMsgID must be a valid id not
// used by another item.
func (s *Store) AddOutbox(it OutboxItem) (OutboxItem, error) {
	if it.ClientMsgID == "" {
		id, err := randomCMID()
		if err != nil {
			return OutboxItem{}, err
		}
		it.ClientMsgID = id
	} else if !proto.ValidID(it.ClientMsgID) {
		return OutboxItem{}, fmt.Errorf("client: bad client_msg_id %q", it.ClientMsgID)
	}
	if it.Status == 0 {
		it.Status = StatusSending
	}
	if !it.Status.valid() {
		return OutboxItem{}, fmt.Errorf("client: outbox item with %v", it.Status)
	}
	if it.Created == 0 {
		it.Created = time.Now().UnixNano()
	}
	db, err := s.write()
	if err != nil {
		return OutboxItem{}, err
	}
	defer s.mu.Unlock()
	if _, ok, err := getUint(db, sk.outboxCMID(it.ClientMsgID)); err != nil {
		return OutboxItem{}, err
	} else if ok {
		return OutboxItem{}, fmt.Errorf("client: client_msg_id %q already in the outbox", it.ClientMsgID)
	}
	last, _, err := getUint(db, sk.outboxLast())
	if err != nil {
		return OutboxItem{}, err
	}
	it.Seq = last + 1
	b := db.NewBatch()
	defer b.Close()
	if err := putOutbox(b, it); err != nil {
		return OutboxItem{}, err
	}
	if err := errors.Join(
		b.Set(sk.outboxCMID(it.ClientMsgID), uintValue(it.Seq), nil),
		b.Set(sk.outboxLast(), uintValue(it.Seq), nil),
	); err != nil {
		return OutboxItem{}, err
	}
	if err := b.Commit(pebble.Sync); err != nil {
		return OutboxItem{}, fmt.Errorf("client: write outbox: %w", err)
	}
	return it, nil
}

// UpdateOutbox durably replaces the stored item it.Seq with it (status, attempts, ack, …). The
// item must exist and keep its ClientMsgID.
func (s *Store) UpdateOutbox(it OutboxItem) error {
	if !it.Status.valid() {
		return fmt.Errorf("client: outbox item with %v", it.Status)
	}
	db, err := s.write()
	if err != nil {
		return err
	}
	defer s.mu.Unlock()
	old, ok, err := getOutbox(db, it.Seq)
	switch {
	case err != nil:
		return err
	case !ok:
		return fmt.Errorf("client: no outbox item %d", it.Seq)
	case old.ClientMsgID != it.ClientMsgID:
		return fmt.Errorf("client: outbox item %d has client_msg_id %q, not %q", it.Seq, old.ClientMsgID, it.ClientMsgID)
	}
	b := db.NewBatch()
	defer b.Close()
	if err := putOutbox(b, it); err != nil {
		return err
	}
	if err := b.Commit(pebble.Sync); err != nil {
		return fmt.Errorf("client: write outbox: %w", err)
	}
	return nil
}

// putOutbox writes it and its SENDING marker (set or cleared by status) into b.
func putOutbox(b *pebble.Batch, it OutboxItem) error {
	v, err := encode(&it)
	if err != nil {
		return err
	}
	var mark, own error
	if it.Status == StatusSending {
		mark = b.Set(sk.outboxSending(it.Seq), nil, nil)
	} else {
		mark = b.Delete(sk.outboxSending(it.Seq), nil)
	}
	if a := it.Ack; it.Status == StatusSent && it.Kind == proto.KindMessage && a != nil && a.ConvSeq > 0 && keyableID(a.Conv) {
		// The message's place in its conversation, so its later status steps (marks.go) can
		// name the client_msg_id the app knows it by.
		own = b.Set(sk.ownMsg(a.Conv, a.ConvSeq), []byte(it.ClientMsgID), nil)
	}
	return errors.Join(b.Set(sk.outbox(it.Seq), v, nil), mark, own)
}

// getOutbox reads item seq.
func getOutbox(r pebble.Reader, seq uint64) (OutboxItem, bool, error) {
	v, ok, err := getValue(r, sk.outbox(seq))
	if err != nil || !ok {
		return OutboxItem{}, ok, err
	}
	var it OutboxItem
	if err := decode(v, &it); err != nil {
		return OutboxItem{}, false, fmt.Errorf("client: outbox item %d: %w", seq, err)
	}
	return it, true, nil
}

// PendingOutbox returns the items with status SENDING in Seq order (the ones to (re)send).
func (s *Store) PendingOutbox() ([]OutboxItem, error) {
	db, err := s.read()
	if err != nil {
		return nil, err
	}
	defer s.mu.RUnlock()
	var items []OutboxItem
	err = scan(db, sk.outboxSendingPrefix(), func(k, _ []byte) error {
		seq := binary.BigEndian.Uint64(k[1:])
		it, ok, err := getOutbox(db, seq)
		if err != nil {
			return err
		}
		if !ok {
			return fmt.Errorf("client: outbox marker %d without item", seq)
		}
		items = append(items, it)
		return nil
	})
	return items, err
}

// OutboxByCMID returns the item with the given client_msg_id.
func (s *Store) OutboxByCMID(cmid string) (OutboxItem, bool, error) {
	if !proto.ValidID(cmid) {
		return OutboxItem{}, false, nil
	}
	db, err := s.read()
	if err != nil {
		return OutboxItem{}, false, err
	}
	defer s.mu.RUnlock()
	seq, ok, err := getUint(db, sk.outboxCMID(cmid))
	if err != nil || !ok {
		return OutboxItem{}, false, err
	}
	return getOutbox(db, seq)
}

// ListOutbox returns every outbox item, whatever its status, in Seq order.
func (s *Store) ListOutbox() ([]OutboxItem, error) {
	db, err := s.read()
	if err != nil {
		return nil, err
	}
	defer s.mu.RUnlock()
	var items []OutboxItem
	err = scan(db, sk.outboxPrefix(), func(k, v []byte) error {
		var it OutboxItem
		if err := decode(v, &it); err != nil {
			return fmt.Errorf("client: outbox item %d: %w", binary.BigEndian.Uint64(k[1:]), err)
		}
		items = append(items, it)
		return nil
	})
	return items, err
}

// randomCMID returns a fresh client_msg_id: 16 random bytes in hex.
func randomCMID() (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("client: random client_msg_id: %w", err)
	}
	return hex.EncodeToString(b[:]), nil
}
