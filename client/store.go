package client

import (
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/syncd-dev/syncd/proto"
)

// The local store is one Pebble database in a directory, owned by one device of one user
// (PROTOCOL.md §8.1). Every write that matters after an app kill — outbox changes, a batch of
// entries with its cursor, a cursor jump — is committed with pebble.Sync; a batch of entries
// and the cursor that covers it are one atomic Pebble batch, so the cursor never runs ahead of
// (or behind) the entries it stands for.
//
// # Key layout
//
// Numbers are fixed-width (8 bytes) big-endian, so keys sort numerically; ids (conversation,
// user, client_msg_id, msg_id) are followed by a 0x00 terminator, which cannot occur inside
// them (proto.ValidID allows 0x21–0x7e only; a msg_id is digits and dots), so "a" and "ab" never
// share a prefix and a scan of one conversation never reaches another.
//
//	0x01 'v'                          format version               u64
//	0x01 'c'                          sync cursor                  epoch u64, pos u64
//	0x01 'o'                          last outbox seq assigned     u64
//	0x02 seq                          outbox item                  v1 msgpack outboxItem
//	0x03 cmid 0x00                    outbox index by cmid         seq u64
//	0x04 seq                          outbox item still SENDING    empty
//	0x10 seq                          user-log entry (stored as received)  v1 msgpack proto.Entry
//	0x11 msg_id 0x00                  msg_id index (dedup, recall) conv 0x00 conv_seq u64
//	0x12 conv 0x00 conv_seq           message view                 v1 msgpack storedMsg
//	0x13 conv 0x00 user 0x00          read mark of user in conv    conv_seq u64
//	0x14 conv 0x00 user 0x00          member of conv               empty
//	0x15 conv 0x00                    known conversation           empty
//	0x16 msg_id 0x00                  recall seen before its target     empty
//
// Values that are not plain numbers start with a version byte (storeValueVersion) followed by
// msgpack; msgpack maps ignore unknown keys, so later versions may add fields. The whole layout
// is versioned by the format key: openStore refuses a store of another format.

// storeFormatVersion is the key layout version written under the format key.
const storeFormatVersion = 1

// storeValueVersion is the first byte of every msgpack value.
const storeValueVersion = 1

// Errors of the store.
var (
	// errNotContiguous: a batch does not start right after the stored cursor or has a hole, or
	// (errEpochMismatch) belongs to another epoch. Nothing was stored; the caller restarts the
	// sync from the stored cursor (a gap is refetched, never skipped).
	errNotContiguous = errors.New("client: batch not contiguous with the stored cursor")
	// errEpochMismatch is the errNotContiguous of a batch from an epoch other than the stored one.
	errEpochMismatch = fmt.Errorf("%w: epoch differs from the stored epoch", errNotContiguous)
	// errCursorBackward: a rebase would move the cursor back within the same epoch.
	errCursorBackward = errors.New("client: the cursor never moves back within an epoch")
	// errStoreClosed: the store was used after close.
	errStoreClosed = errors.New("client: store closed")
)

// Status is the state of an outbox item (PROTOCOL.md §8.3). The numbers are stored on disk:
// never renumber them.
type Status uint8

// Outbox statuses.
const (
	StatusSending Status = 1 // queued or in flight; resent after a restart
	StatusSent    Status = 2 // acknowledged by the server (Ack stored)
	StatusFailed  Status = 3 // given up: a non-retryable error or retries exhausted
)

// String returns "sending", "sent", "failed" or "status(N)".
func (s Status) String() string {
	switch s {
	case StatusSending:
		return "sending"
	case StatusSent:
		return "sent"
	case StatusFailed:
		return "failed"
	}
	return "status(" + strconv.Itoa(int(s)) + ")"
}

// valid reports whether s is one of the known statuses.
func (s Status) valid() bool { return s >= StatusSending && s <= StatusFailed }

// outboxItem is one mutation of the app in the durable outbox: written before it is sent,
// resent with the same ClientMsgID and payload until acked or given up. Which payload fields
// are used depends on Kind (Body/Peer for messages, UpTo for receipts, Target for recalls,
// Members for group changes).
type outboxItem struct {
	Seq         uint64         `msgpack:"seq"`          // outbox order, assigned by addOutbox
	ClientMsgID string         `msgpack:"cmid"`         // dedup key at the server; never changes
	Kind        proto.Kind     `msgpack:"kind"`         // which mutation
	Conv        string         `msgpack:"conv"`         // conversation id
	Peer        string         `msgpack:"peer"`         // KindMessage: other user of a direct conversation
	Body        []byte         `msgpack:"body"`         // KindMessage: the body
	UpTo        proto.Position `msgpack:"up_to"`        // KindReceipt: read up to this conv_seq
	Target      proto.MsgID    `msgpack:"target"`       // KindRecall: the message to recall
	Members     []string       `msgpack:"members"`      // group create/add/remove
	Status      Status         `msgpack:"status"`       // sending, sent, failed
	Attempts    int            `msgpack:"attempts"`     // send attempts so far (kept across restarts)
	NextAttempt int64          `msgpack:"next_attempt"` // earliest next attempt, Unix ns
	Ack         *proto.Ack     `msgpack:"ack"`          // the server's answer, set when SENT
	LastError   string         `msgpack:"last_error"`   // the last error, for display and logs
	Created     int64          `msgpack:"created"`      // when the app queued it, Unix ns
}

// Message is a message of a conversation as stored on the device, for display.
type Message struct {
	Conv     string         // conversation id
	ConvSeq  proto.Position // position in the conversation
	MsgID    proto.MsgID    // server-assigned id
	Sender   string         // user who sent it
	Time     int64          // server time of the append, Unix ns
	Body     []byte         // the body (kept after a recall: the app decides what to show)
	Recalled bool           // the sender recalled it
}

// storedMsg is one conversation entry in the message view: a message, or a receipt, recall,
// membership change or unknown kind (kept so the view mirrors the conversation log).
type storedMsg struct {
	Kind     proto.Kind     `msgpack:"kind"`
	MsgID    proto.MsgID    `msgpack:"msg_id"`
	Sender   string         `msgpack:"sender"`
	Time     int64          `msgpack:"time"`
	Body     []byte         `msgpack:"body,omitempty"`
	Recalled bool           `msgpack:"recalled,omitempty"`
	UpTo     proto.Position `msgpack:"up_to,omitempty"`
	Target   proto.MsgID    `msgpack:"target,omitempty"`
	Members  []string       `msgpack:"members,omitempty"`
}

// store is the device's local store: outbox, sync cursor, user-log entries and the message view.
// It is safe for concurrent use; writes are serialized (each is a read-check-write).
type store struct {
	mu sync.RWMutex // read-locked by readers, locked by writers and close
	db *pebble.DB   // nil once closed
}

// openStore opens (creating if needed) the store in dir. A new store gets the current format
// version; a store of another format, or a non-empty database without a format key, is refused.
func openStore(dir string) (*store, error) {
	db, err := pebble.Open(dir, &pebble.Options{Logger: storeLogger{slog.Default()}})
	if err != nil {
		return nil, fmt.Errorf("client: open store %s: %w", dir, err)
	}
	if err := checkStoreFormat(db); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("client: store %s: %w", dir, err)
	}
	return &store{db: db}, nil
}

// checkStoreFormat writes the format version into an empty database and checks it otherwise.
func checkStoreFormat(db *pebble.DB) error {
	v, ok, err := storeGetUint(db, sk.format())
	switch {
	case err != nil:
		return err
	case ok && v != storeFormatVersion:
		return fmt.Errorf("format version %d, this build reads %d", v, storeFormatVersion)
	case ok:
		return nil
	}
	it, err := db.NewIter(nil)
	if err != nil {
		return err
	}
	nonEmpty := it.First()
	if err := errors.Join(it.Error(), it.Close()); err != nil {
		return err
	}
	if nonEmpty {
		return errors.New("database has data but no format version: not a syncd client store")
	}
	return db.Set(sk.format(), storeUint(storeFormatVersion), pebble.Sync)
}

// close closes the database. Later calls of any method return errStoreClosed; closing twice is
// harmless.
func (s *store) close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.db == nil {
		return nil
	}
	err := s.db.Close()
	s.db = nil
	return err
}

// read returns the database for a reader, read-locked; the caller must call s.mu.RUnlock.
func (s *store) read() (*pebble.DB, error) {
	s.mu.RLock()
	if s.db == nil {
		s.mu.RUnlock()
		return nil, errStoreClosed
	}
	return s.db, nil
}

// write returns the database for a writer, locked; the caller must call s.mu.Unlock.
func (s *store) write() (*pebble.DB, error) {
	s.mu.Lock()
	if s.db == nil {
		s.mu.Unlock()
		return nil, errStoreClosed
	}
	return s.db, nil
}

// ---- Outbox ----

// addOutbox stores a new outbox item durably and returns it with Seq assigned (the next outbox
// sequence), ClientMsgID set to a random 16-byte hex id if it was empty, Status StatusSending if
// it was zero and Created set to now if it was zero. A given ClientMsgID must be a valid id not
// used by another item.
func (s *store) addOutbox(it outboxItem) (outboxItem, error) {
	if it.ClientMsgID == "" {
		id, err := randomCMID()
		if err != nil {
			return outboxItem{}, err
		}
		it.ClientMsgID = id
	} else if !proto.ValidID(it.ClientMsgID) {
		return outboxItem{}, fmt.Errorf("client: bad client_msg_id %q", it.ClientMsgID)
	}
	if it.Status == 0 {
		it.Status = StatusSending
	}
	if !it.Status.valid() {
		return outboxItem{}, fmt.Errorf("client: outbox item with %v", it.Status)
	}
	if it.Created == 0 {
		it.Created = time.Now().UnixNano()
	}
	db, err := s.write()
	if err != nil {
		return outboxItem{}, err
	}
	defer s.mu.Unlock()
	if _, ok, err := storeGetUint(db, sk.outboxCMID(it.ClientMsgID)); err != nil {
		return outboxItem{}, err
	} else if ok {
		return outboxItem{}, fmt.Errorf("client: client_msg_id %q already in the outbox", it.ClientMsgID)
	}
	last, _, err := storeGetUint(db, sk.outboxLast())
	if err != nil {
		return outboxItem{}, err
	}
	it.Seq = last + 1
	b := db.NewBatch()
	defer b.Close()
	if err := putOutbox(b, it); err != nil {
		return outboxItem{}, err
	}
	if err := errors.Join(
		b.Set(sk.outboxCMID(it.ClientMsgID), storeUint(it.Seq), nil),
		b.Set(sk.outboxLast(), storeUint(it.Seq), nil),
	); err != nil {
		return outboxItem{}, err
	}
	if err := b.Commit(pebble.Sync); err != nil {
		return outboxItem{}, fmt.Errorf("client: write outbox: %w", err)
	}
	return it, nil
}

// updateOutbox durably replaces the stored item it.Seq with it (status, attempts, ack, …). The
// item must exist and keep its ClientMsgID.
func (s *store) updateOutbox(it outboxItem) error {
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
func putOutbox(b *pebble.Batch, it outboxItem) error {
	v, err := storeEncode(&it)
	if err != nil {
		return err
	}
	var mark error
	if it.Status == StatusSending {
		mark = b.Set(sk.outboxSending(it.Seq), nil, nil)
	} else {
		mark = b.Delete(sk.outboxSending(it.Seq), nil)
	}
	return errors.Join(b.Set(sk.outbox(it.Seq), v, nil), mark)
}

// getOutbox reads item seq.
func getOutbox(r pebble.Reader, seq uint64) (outboxItem, bool, error) {
	v, ok, err := storeGet(r, sk.outbox(seq))
	if err != nil || !ok {
		return outboxItem{}, ok, err
	}
	var it outboxItem
	if err := storeDecode(v, &it); err != nil {
		return outboxItem{}, false, fmt.Errorf("client: outbox item %d: %w", seq, err)
	}
	return it, true, nil
}

// pendingOutbox returns the items with status SENDING in Seq order (the ones to (re)send).
func (s *store) pendingOutbox() ([]outboxItem, error) {
	db, err := s.read()
	if err != nil {
		return nil, err
	}
	defer s.mu.RUnlock()
	var items []outboxItem
	err = storeScan(db, sk.outboxSendingPrefix(), func(k, _ []byte) error {
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

// outboxByCMID returns the item with the given client_msg_id.
func (s *store) outboxByCMID(cmid string) (outboxItem, bool, error) {
	if !proto.ValidID(cmid) {
		return outboxItem{}, false, nil
	}
	db, err := s.read()
	if err != nil {
		return outboxItem{}, false, err
	}
	defer s.mu.RUnlock()
	seq, ok, err := storeGetUint(db, sk.outboxCMID(cmid))
	if err != nil || !ok {
		return outboxItem{}, false, err
	}
	return getOutbox(db, seq)
}

// listOutbox returns every outbox item, whatever its status, in Seq order.
func (s *store) listOutbox() ([]outboxItem, error) {
	db, err := s.read()
	if err != nil {
		return nil, err
	}
	defer s.mu.RUnlock()
	var items []outboxItem
	err = storeScan(db, sk.outboxPrefix(), func(k, v []byte) error {
		var it outboxItem
		if err := storeDecode(v, &it); err != nil {
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

// ---- Sync state ----

// cursor returns the stored sync cursor; (0, 0) for a device that has never synced.
func (s *store) cursor() (proto.Epoch, proto.Position, error) {
	db, err := s.read()
	if err != nil {
		return 0, 0, err
	}
	defer s.mu.RUnlock()
	return getCursor(db)
}

// getCursor reads the cursor from r.
func getCursor(r pebble.Reader) (proto.Epoch, proto.Position, error) {
	v, ok, err := storeGet(r, sk.cursor())
	if err != nil || !ok {
		return 0, 0, err
	}
	if len(v) != 16 {
		return 0, 0, fmt.Errorf("client: cursor value of %d bytes", len(v))
	}
	return proto.Epoch(binary.BigEndian.Uint64(v)), proto.Position(binary.BigEndian.Uint64(v[8:])), nil
}

// setCursor writes the cursor into b.
func setCursor(b *pebble.Batch, epoch proto.Epoch, pos proto.Position) error {
	v := binary.BigEndian.AppendUint64(nil, uint64(epoch))
	return b.Set(sk.cursor(), binary.BigEndian.AppendUint64(v, uint64(pos)), nil)
}

// applyBatch stores a Batch of the user log (PROTOCOL.md §8.4) in one synced Pebble batch:
// every entry under its seq, the message view, read marks, members, and the cursor (epoch, last
// seq). A stored cursor (0, 0) adopts epoch; otherwise epoch must equal the stored epoch
// (errEpochMismatch, which is an errNotContiguous), and the entries must be numbered exactly
// cursor+1, cursor+2, … (errNotContiguous). On any error nothing is written.
//
// Entries are deduplicated by msg_id: an entry whose msg_id is already stored (re-delivered
// after an epoch change, or already loaded from history) is stored under its seq and moves the
// cursor, but changes nothing in the view. applied counts the entries that were new.
func (s *store) applyBatch(epoch proto.Epoch, entries []proto.Entry) (applied int, err error) {
	if epoch == 0 {
		return 0, fmt.Errorf("%w: batch without epoch", errEpochMismatch)
	}
	for i := range entries {
		if err := storeCheckEntryIDs(&entries[i]); err != nil {
			return 0, err
		}
	}
	db, err := s.write()
	if err != nil {
		return 0, err
	}
	defer s.mu.Unlock()
	curEpoch, pos, err := getCursor(db)
	if err != nil {
		return 0, err
	}
	if curEpoch == 0 && pos != 0 {
		return 0, fmt.Errorf("client: stored cursor (0, %d) has no epoch", pos)
	}
	if curEpoch != 0 && epoch != curEpoch {
		return 0, fmt.Errorf("%w: batch epoch %d, stored %d", errEpochMismatch, epoch, curEpoch)
	}
	for i := range entries {
		if want := pos + 1 + proto.Position(i); entries[i].Seq != want {
			return 0, fmt.Errorf("%w: entry %d has seq %d, want %d", errNotContiguous, i, entries[i].Seq, want)
		}
	}
	if len(entries) == 0 {
		return 0, nil
	}
	b := db.NewIndexedBatch() // reads see the batch's own writes (dedup within one batch)
	defer b.Close()
	for i := range entries {
		e := &entries[i]
		v, err := storeEncode(e)
		if err != nil {
			return 0, err
		}
		if err := b.Set(sk.entry(e.Seq), v, nil); err != nil {
			return 0, err
		}
		if e.MsgID != "" {
			_, seen, err := storeGet(b, sk.msgIndex(e.MsgID))
			if err != nil {
				return 0, err
			}
			if seen {
				continue
			}
			if err := b.Set(sk.msgIndex(e.MsgID), sk.msgRef(e.Conv, e.ConvSeq), nil); err != nil {
				return 0, err
			}
		}
		applied++
		if err := applyToView(b, e); err != nil {
			return 0, err
		}
	}
	if err := setCursor(b, epoch, entries[len(entries)-1].Seq); err != nil {
		return 0, err
	}
	if err := b.Commit(pebble.Sync); err != nil {
		return 0, fmt.Errorf("client: write batch: %w", err)
	}
	return applied, nil
}

// applyToView applies one new entry to the message view, read marks and members.
func applyToView(b *pebble.Batch, e *proto.Entry) error {
	if e.Conv == "" {
		return nil // nothing to attach it to (an unknown kind): stored under its seq only
	}
	if err := b.Set(sk.conv(e.Conv), nil, nil); err != nil {
		return err
	}
	m := storedMsg{Kind: e.Kind, MsgID: e.MsgID, Sender: e.Sender, Time: e.Time}
	switch e.Kind {
	case proto.KindMessage:
		m.Body = e.Body
		if e.MsgID != "" {
			// A recall that arrived before its target (possible after a rebase).
			_, early, err := storeGet(b, sk.earlyRecall(e.MsgID))
			if err != nil {
				return err
			}
			if early {
				m.Recalled = true
				if err := b.Delete(sk.earlyRecall(e.MsgID), nil); err != nil {
					return err
				}
			}
		}
	case proto.KindReceipt:
		m.UpTo = e.UpTo
		if e.Sender != "" {
			key := sk.readMark(e.Conv, e.Sender)
			old, _, err := storeGetUint(b, key)
			if err != nil {
				return err
			}
			if uint64(e.UpTo) > old {
				if err := b.Set(key, storeUint(uint64(e.UpTo)), nil); err != nil {
					return err
				}
			}
		}
	case proto.KindRecall:
		m.Target = e.Target
		if e.Target != "" {
			if err := markRecalled(b, e.Target); err != nil {
				return err
			}
		}
	case proto.KindGroupCreate, proto.KindMemberAdd:
		m.Members = e.Members
		add := e.Members
		if e.Kind == proto.KindGroupCreate && e.Sender != "" {
			add = append([]string{e.Sender}, add...) // the creator is always a member
		}
		for _, u := range add {
			if err := b.Set(sk.member(e.Conv, u), nil, nil); err != nil {
				return err
			}
		}
	case proto.KindMemberRemove:
		m.Members = e.Members
		for _, u := range e.Members {
			if err := b.Delete(sk.member(e.Conv, u), nil); err != nil {
				return err
			}
		}
	}
	if e.ConvSeq == 0 {
		return nil // not a conversation entry: nothing to show
	}
	v, err := storeEncode(&m)
	if err != nil {
		return err
	}
	return b.Set(sk.view(e.Conv, e.ConvSeq), v, nil)
}

// markRecalled marks the stored message target recalled, or remembers the recall until the
// message arrives.
func markRecalled(b *pebble.Batch, target proto.MsgID) error {
	ref, ok, err := storeGet(b, sk.msgIndex(target))
	if err != nil {
		return err
	}
	if ok {
		conv, seq, err := sk.parseMsgRef(ref)
		if err != nil {
			return err
		}
		if seq != 0 {
			v, ok, err := storeGet(b, sk.view(conv, seq))
			if err != nil {
				return err
			}
			if ok {
				var m storedMsg
				if err := storeDecode(v, &m); err != nil {
					return fmt.Errorf("client: message %s: %w", target, err)
				}
				if m.Recalled {
					return nil
				}
				m.Recalled = true
				if v, err = storeEncode(&m); err != nil {
					return err
				}
				return b.Set(sk.view(conv, seq), v, nil)
			}
		}
	}
	return b.Set(sk.earlyRecall(target), nil, nil)
}

// storeCheckEntryIDs refuses an entry whose ids contain 0x00, which would break the key layout
// (the server never sends one: ids are printable ASCII).
func storeCheckEntryIDs(e *proto.Entry) error {
	bad := strings.ContainsRune(e.Conv, 0) || strings.ContainsRune(e.Sender, 0) ||
		strings.ContainsRune(string(e.MsgID), 0) || strings.ContainsRune(string(e.Target), 0)
	for _, m := range e.Members {
		bad = bad || strings.ContainsRune(m, 0) || m == ""
	}
	if bad {
		return fmt.Errorf("client: entry seq %d has an id with a 0x00 byte or an empty member", e.Seq)
	}
	return nil
}

// resetForEpoch handles an epoch change (EpochChanged): the user log was re-created, so its
// stored entries and positions mean nothing. It drops the stored user-log entries and sets the
// cursor to (epoch, 0), keeping the message view, read marks, members and the msg_id index:
// history stays, and entries delivered again are deduplicated by msg_id. If the new log starts
// after 1, the next SyncStart from (epoch, 0) is answered TooOld or Rebase (then rebaseTo), or
// the caller may call rebaseTo(epoch, first-1) itself.
func (s *store) resetForEpoch(epoch proto.Epoch) error {
	if epoch == 0 {
		return errors.New("client: reset to epoch 0")
	}
	db, err := s.write()
	if err != nil {
		return err
	}
	defer s.mu.Unlock()
	b := db.NewBatch()
	defer b.Close()
	if err := errors.Join(
		b.DeleteRange(sk.entryPrefix(), storePrefixEnd(sk.entryPrefix()), nil),
		setCursor(b, epoch, 0),
	); err != nil {
		return err
	}
	if err := b.Commit(pebble.Sync); err != nil {
		return fmt.Errorf("client: reset cursor: %w", err)
	}
	return nil
}

// rebaseTo jumps the cursor to (epoch, head) without entries, after TooOld or Rebase; the caller
// loads conversation state and recent history separately. Within the stored epoch the cursor
// never moves back (errCursorBackward); moving to another epoch also drops the stored user-log
// entries, as resetForEpoch does.
func (s *store) rebaseTo(epoch proto.Epoch, head proto.Position) error {
	if epoch == 0 {
		return errors.New("client: rebase to epoch 0")
	}
	db, err := s.write()
	if err != nil {
		return err
	}
	defer s.mu.Unlock()
	curEpoch, pos, err := getCursor(db)
	if err != nil {
		return err
	}
	b := db.NewBatch()
	defer b.Close()
	if epoch == curEpoch {
		if head < pos {
			return fmt.Errorf("%w: rebase to %d, stored %d", errCursorBackward, head, pos)
		}
	} else if err := b.DeleteRange(sk.entryPrefix(), storePrefixEnd(sk.entryPrefix()), nil); err != nil {
		return err
	}
	if err := setCursor(b, epoch, head); err != nil {
		return err
	}
	if err := b.Commit(pebble.Sync); err != nil {
		return fmt.Errorf("client: rebase cursor: %w", err)
	}
	return nil
}

// ---- Queries ----

// messages returns the messages (KindMessage entries) of conv in conv_seq order, recalled ones
// included (Recalled set).
func (s *store) messages(conv string) ([]Message, error) {
	if !storeKeyableID(conv) {
		return nil, nil
	}
	db, err := s.read()
	if err != nil {
		return nil, err
	}
	defer s.mu.RUnlock()
	prefix := sk.viewPrefix(conv)
	var out []Message
	err = storeScan(db, prefix, func(k, v []byte) error {
		var m storedMsg
		if err := storeDecode(v, &m); err != nil {
			return fmt.Errorf("client: message view of %s: %w", conv, err)
		}
		if m.Kind != proto.KindMessage {
			return nil
		}
		out = append(out, Message{
			Conv: conv, ConvSeq: proto.Position(binary.BigEndian.Uint64(k[len(prefix):])),
			MsgID: m.MsgID, Sender: m.Sender, Time: m.Time, Body: m.Body, Recalled: m.Recalled,
		})
		return nil
	})
	return out, err
}

// readMark returns the highest conv_seq user has read in conv (0 if none is known).
func (s *store) readMark(conv, user string) (proto.Position, error) {
	if !storeKeyableID(conv) || !storeKeyableID(user) {
		return 0, nil
	}
	db, err := s.read()
	if err != nil {
		return 0, err
	}
	defer s.mu.RUnlock()
	v, _, err := storeGetUint(db, sk.readMark(conv, user))
	return proto.Position(v), err
}

// members returns the known members of conv, sorted. Direct conversations have no membership
// entries: their members are empty here.
func (s *store) members(conv string) ([]string, error) {
	if !storeKeyableID(conv) {
		return nil, nil
	}
	db, err := s.read()
	if err != nil {
		return nil, err
	}
	defer s.mu.RUnlock()
	prefix := sk.memberPrefix(conv)
	var out []string
	err = storeScan(db, prefix, func(k, _ []byte) error {
		out = append(out, string(k[len(prefix):len(k)-1]))
		return nil
	})
	return out, err
}

// conversations returns the ids of every conversation an entry was stored for, sorted.
func (s *store) conversations() ([]string, error) {
	db, err := s.read()
	if err != nil {
		return nil, err
	}
	defer s.mu.RUnlock()
	prefix := sk.convPrefix()
	var out []string
	err = storeScan(db, prefix, func(k, _ []byte) error {
		out = append(out, string(k[len(prefix):len(k)-1]))
		return nil
	})
	return out, err
}

// ---- Keys and values ----

// Key tags: the first byte of every key (see the layout above).
const (
	tagMeta          = 0x01
	tagOutbox        = 0x02
	tagOutboxCMID    = 0x03
	tagOutboxSending = 0x04
	tagEntry         = 0x10
	tagMsgIndex      = 0x11
	tagView          = 0x12
	tagReadMark      = 0x13
	tagMember        = 0x14
	tagConv          = 0x15
	tagEarlyRecall   = 0x16
)

// storeKeys builds the store's keys; sk is its only value.
type storeKeys struct{}

// sk builds keys: sk.outbox(seq), sk.view(conv, seq), …
var sk storeKeys

// format is the key of the format version.
func (storeKeys) format() []byte { return []byte{tagMeta, 'v'} }

// cursor is the key of the sync cursor.
func (storeKeys) cursor() []byte { return []byte{tagMeta, 'c'} }

// outboxLast is the key of the last outbox seq assigned.
func (storeKeys) outboxLast() []byte { return []byte{tagMeta, 'o'} }

// outbox is the key of outbox item seq.
func (storeKeys) outbox(seq uint64) []byte {
	return binary.BigEndian.AppendUint64([]byte{tagOutbox}, seq)
}

// outboxPrefix prefixes every outbox item.
func (storeKeys) outboxPrefix() []byte { return []byte{tagOutbox} }

// outboxCMID is the key of the outbox index entry of cmid.
func (storeKeys) outboxCMID(cmid string) []byte {
	return storeAppendID([]byte{tagOutboxCMID}, cmid)
}

// outboxSending is the key of the marker of an outbox item still SENDING.
func (storeKeys) outboxSending(seq uint64) []byte {
	return binary.BigEndian.AppendUint64([]byte{tagOutboxSending}, seq)
}

// outboxSendingPrefix prefixes every SENDING marker.
func (storeKeys) outboxSendingPrefix() []byte { return []byte{tagOutboxSending} }

// entry is the key of the user-log entry at seq.
func (storeKeys) entry(seq proto.Position) []byte {
	return binary.BigEndian.AppendUint64([]byte{tagEntry}, uint64(seq))
}

// entryPrefix prefixes every user-log entry.
func (storeKeys) entryPrefix() []byte { return []byte{tagEntry} }

// msgIndex is the key of the msg_id index entry of id.
func (storeKeys) msgIndex(id proto.MsgID) []byte {
	return storeAppendID([]byte{tagMsgIndex}, string(id))
}

// msgRef is the msg_id index value: conv 0x00 conv_seq.
func (storeKeys) msgRef(conv string, seq proto.Position) []byte {
	return binary.BigEndian.AppendUint64(storeAppendID(nil, conv), uint64(seq))
}

// parseMsgRef splits a msgRef value.
func (storeKeys) parseMsgRef(v []byte) (string, proto.Position, error) {
	i := bytes.IndexByte(v, 0)
	if i < 0 || len(v) != i+9 {
		return "", 0, fmt.Errorf("client: bad msg_id index value %x", v)
	}
	return string(v[:i]), proto.Position(binary.BigEndian.Uint64(v[i+1:])), nil
}

// view is the key of the message-view record of (conv, conv_seq).
func (storeKeys) view(conv string, seq proto.Position) []byte {
	return binary.BigEndian.AppendUint64(sk.viewPrefix(conv), uint64(seq))
}

// viewPrefix prefixes the message view of conv.
func (storeKeys) viewPrefix(conv string) []byte { return storeAppendID([]byte{tagView}, conv) }

// readMark is the key of user's read mark in conv.
func (storeKeys) readMark(conv, user string) []byte {
	return storeAppendID(storeAppendID([]byte{tagReadMark}, conv), user)
}

// member is the key marking user a member of conv.
func (storeKeys) member(conv, user string) []byte {
	return storeAppendID(sk.memberPrefix(conv), user)
}

// memberPrefix prefixes the members of conv.
func (storeKeys) memberPrefix(conv string) []byte { return storeAppendID([]byte{tagMember}, conv) }

// conv is the key marking conv known.
func (storeKeys) conv(conv string) []byte { return storeAppendID([]byte{tagConv}, conv) }

// convPrefix prefixes every known conversation.
func (storeKeys) convPrefix() []byte { return []byte{tagConv} }

// earlyRecall is the key of a recall of id seen before id itself.
func (storeKeys) earlyRecall(id proto.MsgID) []byte {
	return storeAppendID([]byte{tagEarlyRecall}, string(id))
}

// storeAppendID appends id and its 0x00 terminator.
func storeAppendID(b []byte, id string) []byte { return append(append(b, id...), 0) }

// storeKeyableID reports whether id can be part of a key (non-empty, no 0x00). Queries for ids
// that cannot be return nothing.
func storeKeyableID(id string) bool { return id != "" && !strings.ContainsRune(id, 0) }

// storePrefixEnd returns the smallest key greater than every key with prefix. The store's
// prefixes never end in 0xff.
func storePrefixEnd(prefix []byte) []byte {
	end := append([]byte(nil), prefix...)
	end[len(end)-1]++
	return end
}

// storeUint encodes a number value.
func storeUint(v uint64) []byte { return binary.BigEndian.AppendUint64(nil, v) }

// storeGet returns a copy of the value at key, or ok=false.
func storeGet(r pebble.Reader, key []byte) ([]byte, bool, error) {
	v, closer, err := r.Get(key)
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("client: store read: %w", err)
	}
	v = append([]byte(nil), v...)
	return v, true, closer.Close()
}

// storeGetUint reads a number value.
func storeGetUint(r pebble.Reader, key []byte) (uint64, bool, error) {
	v, ok, err := storeGet(r, key)
	if err != nil || !ok {
		return 0, ok, err
	}
	if len(v) != 8 {
		return 0, false, fmt.Errorf("client: number value of %d bytes at %x", len(v), key)
	}
	return binary.BigEndian.Uint64(v), true, nil
}

// storeScan calls fn for every key with prefix, in key order. fn must not keep k or v.
func storeScan(r pebble.Reader, prefix []byte, fn func(k, v []byte) error) (err error) {
	it, err := r.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: storePrefixEnd(prefix)})
	if err != nil {
		return fmt.Errorf("client: store scan: %w", err)
	}
	defer func() { err = errors.Join(err, it.Close()) }()
	for ok := it.First(); ok; ok = it.Next() {
		v, err := it.ValueAndErr()
		if err != nil {
			return err
		}
		if err := fn(it.Key(), v); err != nil {
			return err
		}
	}
	return it.Error()
}

// storeEncode encodes a value: the version byte, then msgpack.
func storeEncode(v any) ([]byte, error) {
	b, err := msgpack.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("client: encode %T: %w", v, err)
	}
	return append([]byte{storeValueVersion}, b...), nil
}

// storeDecode decodes a value written by storeEncode, refusing other versions.
func storeDecode(b []byte, v any) error {
	if len(b) == 0 || b[0] != storeValueVersion {
		return fmt.Errorf("unknown value version (%d bytes)", len(b))
	}
	return msgpack.Unmarshal(b[1:], v)
}

// storeLogger sends Pebble's logs to slog: informational messages at debug level.
type storeLogger struct{ l *slog.Logger }

// Infof implements pebble.Logger.
func (p storeLogger) Infof(format string, args ...any) {
	p.l.Debug(fmt.Sprintf(format, args...), "component", "client/pebble")
}

// Errorf implements pebble.Logger.
func (p storeLogger) Errorf(format string, args ...any) {
	p.l.Error(fmt.Sprintf(format, args...), "component", "client/pebble")
}

// Fatalf implements pebble.Logger: Pebble cannot go on (e.g. a corrupt store), so it panics
// rather than exiting the app's process behind its back.
func (p storeLogger) Fatalf(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	p.l.Error(msg, "component", "client/pebble")
	panic("client: pebble: " + msg)
}
