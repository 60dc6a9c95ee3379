package store

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/cockroachdb/pebble/v2"

	"github.com/syncd-dev/syncd/proto"
)

// What a rebase (PROTOCOL.md §8.4, TooOld and Rebase) writes besides the cursor: the state of
// each conversation as ConvList reports it, and its recent history as History pages it. Neither
// touches the user-log entries or a cursor: the caller moves the cursor with RebaseTo once the
// state is stored, so an app killed mid-rebase rebases again from the old cursor and nothing is
// skipped. Both are idempotent (the msg_id index deduplicates), so doing it again is harmless.

// User returns the device's user as SetUser last stored it, "" if never.
func (s *Store) User() (string, error) {
	db, err := s.read()
	if err != nil {
		return "", err
	}
	defer s.mu.RUnlock()
	v, _, err := getValue(db, sk.user())
	return string(v), err
}

// SetUser stores the device's user (from a Welcome), durably.
func (s *Store) SetUser(user string) error {
	if !keyableID(user) {
		return fmt.Errorf("client: bad user id %q", user)
	}
	db, err := s.write()
	if err != nil {
		return err
	}
	defer s.mu.Unlock()
	return db.Set(sk.user(), []byte(user), pebble.Sync)
}

// ConvHead returns the highest conv_seq of conv stored in the message view (any kind of entry),
// 0 if none: how far the device's copy of the conversation reaches.
func (s *Store) ConvHead(conv string) (proto.Position, error) {
	if !keyableID(conv) {
		return 0, nil
	}
	db, err := s.read()
	if err != nil {
		return 0, err
	}
	defer s.mu.RUnlock()
	prefix := sk.viewPrefix(conv)
	it, err := db.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: prefixEnd(prefix)})
	if err != nil {
		return 0, fmt.Errorf("client: store scan: %w", err)
	}
	var head proto.Position
	if it.Last() {
		head = proto.Position(binary.BigEndian.Uint64(it.Key()[len(prefix):]))
	}
	if err := it.Error(); err != nil {
		it.Close()
		return 0, err
	}
	return head, it.Close()
}

// ApplyConvInfo stores what a ConvList answer says of one conversation, as seen by user (the
// device's user), in one synced batch: the conversation is known; a group's members are
// replaced by the list, or marked incomplete when the server left the list out (more than
// proto.MaxInlineMembers: Members then returns ErrMembersIncomplete); user's read mark moves up
// to info.ReadMark (never back). A direct conversation's members are not stored, as no
// membership entry names them; its peer marks (marks.go) move up to info.PeerDelivered and
// PeerRead, and so do the other member's own marks when the id names it (not a hashed id).
// Nothing is reported: the rebase's RebaseEvent tells the app to refresh what it shows.
//
// Apply it before the conversation's History (ApplyHistory): the history's membership entries,
// applied in order on top, then bring the members to the history's newer point, so a change
// that reaches the user log after the rebase point, and is deduplicated there, is not lost.
func (s *Store) ApplyConvInfo(user string, info proto.ConvInfo) error {
	if !keyableID(info.Conv) || !keyableID(user) {
		return fmt.Errorf("client: bad conversation %q or user %q", info.Conv, user)
	}
	for _, m := range info.Members {
		if !keyableID(m) {
			return fmt.Errorf("client: conversation %s: bad member id %q", info.Conv, m)
		}
	}
	db, err := s.write()
	if err != nil {
		return err
	}
	defer s.mu.Unlock()
	b := db.NewIndexedBatch() // the marks are read-check-writes (marks.go)
	defer b.Close()
	if err := b.Set(sk.conv(info.Conv), nil, nil); err != nil {
		return err
	}
	if info.Kind == proto.ConvGroup {
		if len(info.Members) == 0 && info.MemberCount > 0 {
			if err := b.Set(sk.membersStale(info.Conv), nil, nil); err != nil {
				return err
			}
		} else {
			prefix := sk.memberPrefix(info.Conv)
			if err := b.DeleteRange(prefix, prefixEnd(prefix), nil); err != nil {
				return err
			}
			for _, m := range info.Members {
				if err := b.Set(sk.member(info.Conv, m), nil, nil); err != nil {
					return err
				}
			}
			if err := b.Delete(sk.membersStale(info.Conv), nil); err != nil {
				return err
			}
		}
	}
	if info.ReadMark > 0 {
		key := sk.readMark(info.Conv, user)
		old, _, err := getUint(db, key)
		if err != nil {
			return err
		}
		if uint64(info.ReadMark) > old {
			if err := b.Set(key, uintValue(uint64(info.ReadMark)), nil); err != nil {
				return err
			}
		}
	}
	mk := &marks{user: user}
	if err := mk.raise(b, info.Conv, user, info.DeliveredMark, false); err != nil {
		return err
	}
	if info.Kind == proto.ConvDirect && info.PeerDelivered+info.PeerRead > 0 {
		if peer := directPeer(info.Conv, user); peer != "" {
			err = errors.Join(mk.raise(b, info.Conv, peer, info.PeerDelivered, false),
				mk.raise(b, info.Conv, peer, info.PeerRead, true))
		} else {
			err = mk.raisePeers(b, info.Conv, info.PeerDelivered, info.PeerRead)
		}
		if err != nil {
			return err
		}
	}
	if err := b.Commit(pebble.Sync); err != nil {
		return fmt.Errorf("client: write conversation %s: %w", info.Conv, err)
	}
	return nil
}

// ApplyHistory stores entries of conversation logs (History pages: Seq is the conv_seq) in the
// message view, in one synced batch, as ApplyBatch does for user-log entries but without storing
// them under a user-log position or moving a cursor. Entries must be in ascending conv_seq order
// per conversation (the order their effects apply in: receipts, recalls, membership changes);
// pass a conversation's pages oldest first. An entry whose msg_id is already stored changes
// nothing; applied counts the new ones. On any error nothing is written.
func (s *Store) ApplyHistory(entries []proto.Entry) (applied int, err error) {
	for i := range entries {
		e := &entries[i]
		if err := checkEntryIDs(e); err != nil {
			return 0, err
		}
		if !keyableID(e.Conv) || e.ConvSeq == 0 {
			return 0, fmt.Errorf("client: history entry %s without conversation or conv_seq", e.MsgID)
		}
	}
	if len(entries) == 0 {
		return 0, nil
	}
	db, err := s.write()
	if err != nil {
		return 0, err
	}
	defer s.mu.Unlock()
	mk, err := newMarks(db, false) // the rebase's RebaseEvent stands for the steps it loads
	if err != nil {
		return 0, err
	}
	b := db.NewIndexedBatch() // reads see the batch's own writes (dedup within one call)
	defer b.Close()
	for i := range entries {
		e := &entries[i]
		if e.MsgID != "" {
			_, seen, err := getValue(b, sk.msgIndex(e.MsgID))
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
		if err := applyToView(b, e, false, mk); err != nil {
			return 0, err
		}
	}
	if err := b.Commit(pebble.Sync); err != nil {
		return 0, fmt.Errorf("client: write history: %w", err)
	}
	return applied, nil
}
