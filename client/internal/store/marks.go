package store

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/cockroachdb/pebble/v2"

	"github.com/syncd-dev/syncd/proto"
)

// Delivery states (PROTOCOL.md, "Delivery states and read counts"). A member's marks in a
// conversation — how far one of its devices has stored it (delivered) and how far it has read
// it — reach the device's user log as KindDelivered and KindReceipt entries; a receipt implies
// delivery up to the same conv_seq. The store keeps, in the same batch as the entries that carry
// them:
//
//   - every member's read mark (0x13, as before) and delivered mark (0x19), each only moving
//     forward;
//   - the conversation's peer marks (0x1a): the highest delivered and read marks of any member
//     other than the device's user. A message of the user's is delivered (read) as soon as one
//     other member's mark covers it — in a group too: exact counts are the server's (Receipts).
//
// Because the peer marks only move forward and are committed with the entries that move them,
// each status step of a message (sent → delivered → read) is reported once, by the batch that
// takes it, and never again after a restart.

// PeerMark is how far one member of a conversation other than the device's user has had it
// delivered (one of its devices stored it) and read, as the device's log has told it. Delivered
// is at least Read.
type PeerMark struct {
	User      string
	Delivered proto.Position
	Read      proto.Position
}

// PeerMove is a member's mark that a batch moved forward: State is StatusDelivered or
// StatusRead, UpTo the new mark.
type PeerMove struct {
	Conv  string
	User  string
	State Status
	UpTo  proto.Position
}

// StatusStep is a status step of one of the device's user's messages that a batch took: Status
// is StatusDelivered or StatusRead. ClientMsgID is the id this device queued the message under,
// "" when another device of the user sent it (or its ack was not stored here).
type StatusStep struct {
	Conv        string
	ConvSeq     proto.Position
	MsgID       proto.MsgID
	ClientMsgID string
	Status      Status
}

// Applied is what ApplySync did: how many entries were new, the peer marks they moved and the
// status steps of the user's messages those moves took, each in the order the batch took them
// (for one message, delivered before read).
type Applied struct {
	Entries int
	Moves   []PeerMove
	Steps   []StatusStep
}

// marks applies the delivery marks of entries to a batch and, when report is set, collects the
// moves and status steps for the caller's events. A rebase's loads (ApplyConvInfo,
// ApplyHistory) move the marks without reporting: the RebaseEvent tells the app to refresh.
type marks struct {
	user   string // the device's user; "" (never welcomed): every sender is another member
	report bool
	moves  []PeerMove
	steps  []StatusStep
}

// newMarks returns a marks for the device's user as stored in r.
func newMarks(r pebble.Reader, report bool) (*marks, error) {
	v, _, err := getValue(r, sk.user())
	if err != nil {
		return nil, err
	}
	return &marks{user: string(v), report: report}, nil
}

// peer reports whether user is another member than the device's user.
func (mk *marks) peer(user string) bool { return user != mk.user }

// raise moves user's marks in conv to at least upTo: the delivered mark always, the read mark
// too for a receipt (read). A mark never moves back.
func (mk *marks) raise(b *pebble.Batch, conv, user string, upTo proto.Position, read bool) error {
	if upTo == 0 || !keyableID(conv) || !keyableID(user) {
		return nil
	}
	for _, m := range []struct {
		key   []byte
		state Status
		moves bool
	}{{sk.delivered(conv, user), StatusDelivered, true}, {sk.readMark(conv, user), StatusRead, read}} {
		if !m.moves {
			continue
		}
		old, _, err := getUint(b, m.key)
		if err != nil {
			return err
		}
		if uint64(upTo) <= old {
			continue
		}
		if err := b.Set(m.key, uintValue(uint64(upTo)), nil); err != nil {
			return err
		}
		if mk.report && mk.peer(user) {
			mk.moves = append(mk.moves, PeerMove{Conv: conv, User: user, State: m.state, UpTo: upTo})
		}
	}
	if !mk.peer(user) {
		return nil // the user's own marks say nothing of its messages' delivery
	}
	var readTo proto.Position
	if read {
		readTo = upTo
	}
	return mk.raisePeers(b, conv, upTo, readTo)
}

// raisePeers moves conv's peer marks to at least (delivered, read) and, when reporting, collects
// the status steps of the user's messages the move covers.
func (mk *marks) raisePeers(b *pebble.Batch, conv string, delivered, read proto.Position) error {
	old, err := getPeerMarks(b, conv, mk.user)
	if err != nil {
		return err
	}
	now := old
	now.Read = max(now.Read, read)
	now.Delivered = max(now.Delivered, delivered, now.Read) // read implies delivered
	if now == old {
		return nil
	}
	v := binary.BigEndian.AppendUint64(uintValue(uint64(now.Delivered)), uint64(now.Read))
	if err := b.Set(sk.peerMarks(conv), v, nil); err != nil {
		return err
	}
	if !mk.report || mk.user == "" {
		return nil // no messages are known to be the user's
	}
	return mk.collectSteps(b, conv, old, now)
}

// collectSteps adds the status steps of the user's messages in conv that the peer marks' move
// from old to now takes: (old.Delivered, now.Delivered] become delivered, (old.Read, now.Read]
// read. It reads the message view between the two, which the batch's own writes are part of (an
// indexed batch), so a message and the mark covering it may come in one batch.
func (mk *marks) collectSteps(b *pebble.Batch, conv string, old, now PeerMark) error {
	// One scan of (lo, hi], the union of the two ranges that moved (the read range starts at or
	// below the delivered one, as read ≤ delivered); a message between them takes no step.
	lo, hi := old.Delivered, now.Delivered
	if now.Read > old.Read {
		lo = old.Read
	}
	if now.Delivered == old.Delivered {
		hi = now.Read
	}
	if hi <= lo {
		return nil
	}
	it, err := b.NewIter(&pebble.IterOptions{LowerBound: sk.view(conv, lo+1), UpperBound: sk.view(conv, hi+1)})
	if err != nil {
		return fmt.Errorf("client: store scan: %w", err)
	}
	prefix := len(sk.viewPrefix(conv))
	for ok := it.First(); ok; ok = it.Next() {
		seq := proto.Position(binary.BigEndian.Uint64(it.Key()[prefix:]))
		v, err := it.ValueAndErr()
		if err != nil {
			return errors.Join(err, it.Close())
		}
		var m storedMsg
		if err := decode(v, &m); err != nil {
			return errors.Join(fmt.Errorf("client: message view of %s: %w", conv, err), it.Close())
		}
		if m.Kind != proto.KindMessage || m.Sender != mk.user {
			continue
		}
		step := StatusStep{Conv: conv, ConvSeq: seq, MsgID: m.MsgID}
		if cmid, ok, err := getValue(b, sk.ownMsg(conv, seq)); err != nil {
			return errors.Join(err, it.Close())
		} else if ok {
			step.ClientMsgID = string(cmid)
		}
		if seq > old.Delivered && seq <= now.Delivered {
			step.Status = StatusDelivered
			mk.steps = append(mk.steps, step)
		}
		if seq > old.Read && seq <= now.Read {
			step.Status = StatusRead
			mk.steps = append(mk.steps, step)
		}
	}
	return errors.Join(it.Error(), it.Close())
}

// getPeerMarks reads conv's peer marks (User empty) for the device's user self. A store written
// before the SDK kept them has none, but may have other members' read marks (0x13): then they
// are the highest of those (read implies delivered), so that an upgrade neither shows read
// messages as sent nor reports their steps as new when the next mark comes.
func getPeerMarks(r pebble.Reader, conv, self string) (PeerMark, error) {
	v, ok, err := getValue(r, sk.peerMarks(conv))
	if err != nil {
		return PeerMark{}, err
	}
	if !ok {
		var p PeerMark
		prefix := sk.readMarkPrefix(conv)
		err := scan(r, prefix, func(k, v []byte) error {
			if string(k[len(prefix):len(k)-1]) != self && len(v) == 8 {
				p.Read = max(p.Read, proto.Position(binary.BigEndian.Uint64(v)))
			}
			return nil
		})
		p.Delivered = p.Read
		return p, err
	}
	if len(v) != 16 {
		return PeerMark{}, fmt.Errorf("client: peer marks of %s: value of %d bytes", conv, len(v))
	}
	return PeerMark{Delivered: proto.Position(binary.BigEndian.Uint64(v)), Read: proto.Position(binary.BigEndian.Uint64(v[8:]))}, nil
}

// statusAt returns the status of the user's sent message at conv_seq seq under peer marks p.
func statusAt(p PeerMark, seq proto.Position) Status {
	switch {
	case seq <= p.Read:
		return StatusRead
	case seq <= p.Delivered:
		return StatusDelivered
	}
	return StatusSent
}

// StatusOf returns the status of the device's user's sent message at conv_seq seq of conv:
// StatusRead once another member's read mark covers it, StatusDelivered once another member's
// delivered mark does, else StatusSent. It does not check that the message is the user's.
func (s *Store) StatusOf(conv string, seq proto.Position) (Status, error) {
	if !keyableID(conv) || seq == 0 {
		return 0, fmt.Errorf("client: no message at conv_seq %d of %q", seq, conv)
	}
	db, err := s.read()
	if err != nil {
		return 0, err
	}
	defer s.mu.RUnlock()
	self, _, err := getValue(db, sk.user())
	if err != nil {
		return 0, err
	}
	p, err := getPeerMarks(db, conv, string(self))
	if err != nil {
		return 0, err
	}
	return statusAt(p, seq), nil
}

// PeerMarks returns the marks of conv's members other than the device's user that the device
// has learned (from KindDelivered and KindReceipt entries, or a rebase), sorted by user, and the
// conversation's peer marks: the highest of them (All.User is empty). All may be ahead of every
// listed member's marks after a rebase of a direct conversation whose id does not name its
// users (a hashed id): the server gave the peer's marks, not its id.
func (s *Store) PeerMarks(conv string) (users []PeerMark, all PeerMark, err error) {
	if !keyableID(conv) {
		return nil, PeerMark{}, nil
	}
	db, err := s.read()
	if err != nil {
		return nil, PeerMark{}, err
	}
	defer s.mu.RUnlock()
	self, _, err := getValue(db, sk.user())
	if err != nil {
		return nil, PeerMark{}, err
	}
	byUser := map[string]*PeerMark{}
	collect := func(prefix []byte, read bool) error {
		return scan(db, prefix, func(k, v []byte) error {
			user := string(k[len(prefix) : len(k)-1])
			if user == string(self) {
				return nil
			}
			if len(v) != 8 {
				return fmt.Errorf("client: mark of %s in %s: value of %d bytes", user, conv, len(v))
			}
			m := byUser[user]
			if m == nil {
				m = &PeerMark{User: user}
				byUser[user] = m
			}
			pos := proto.Position(binary.BigEndian.Uint64(v))
			if read {
				m.Read = pos
			}
			m.Delivered = max(m.Delivered, pos) // read implies delivered (marks stored before this version)
			return nil
		})
	}
	if err := errors.Join(collect(sk.deliveredPrefix(conv), false), collect(sk.readMarkPrefix(conv), true)); err != nil {
		return nil, PeerMark{}, err
	}
	for _, m := range byUser {
		users = append(users, *m)
	}
	slices.SortFunc(users, func(a, b PeerMark) int { return strings.Compare(a.User, b.User) })
	all, err = getPeerMarks(db, conv, string(self))
	return users, all, err
}

// directPeer returns the other user of direct conversation conv when its id names both users
// ("d:lo:hi", PROTOCOL §4) and one of them is user; "" otherwise (a group, a hashed id).
func directPeer(conv, user string) string {
	rest, ok := strings.CutPrefix(conv, "d:")
	if !ok {
		return ""
	}
	parts := strings.Split(rest, ":")
	if len(parts) != 2 {
		return ""
	}
	unescape := strings.NewReplacer("%3A", ":", "%25", "%")
	a, b := unescape.Replace(parts[0]), unescape.Replace(parts[1])
	switch user {
	case a:
		return b
	case b:
		return a
	}
	return ""
}
