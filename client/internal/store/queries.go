package store

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"

	"github.com/cockroachdb/pebble/v2"

	"github.com/syncd-dev/syncd/proto"
)

// Message is a message of a conversation as stored on the device, for display.
type Message struct {
	Conv     string         // conversation id
	ConvSeq  proto.Position // position in the conversation
	MsgID    proto.MsgID    // server-assigned id
	Sender   string         // user who sent it
	Time     int64          // server time of the append, Unix ns
	Body     []byte         // the body, its latest edit's if edited (kept after a recall: the app decides what to show)
	Recalled bool           // the sender recalled it
	// EditedAt is the server time of the latest edit applied (protocol revision 7), 0 if none.
	EditedAt int64
	// Reactions maps each reaction on the message to the users who have it on, sorted
	// (protocol revision 7); nil if none.
	Reactions map[string][]string
	// Status is, for a message of the device's user, how far it got: StatusSent, StatusDelivered
	// or StatusRead (another member's marks cover it); 0 for other members' messages.
	Status Status
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
	// A message's latest edit applied (its conv_seq and time) and its reactions' states.
	EditSeq   proto.Position `msgpack:"edit_seq,omitempty"`
	EditedAt  int64          `msgpack:"edited_at,omitempty"`
	Reactions []reactionMark `msgpack:"reactions,omitempty"`
}

// reactionMark is the state of one (sender, reaction) on a message: its last entry's.
type reactionMark struct {
	Sender   string         `msgpack:"sender"`
	Reaction string         `msgpack:"reaction"`
	Seq      proto.Position `msgpack:"seq"` // conv_seq of the entry that set it
	On       bool           `msgpack:"on,omitempty"`
}

// reactionsOn returns marks as Message.Reactions shows them.
func reactionsOn(marks []reactionMark) map[string][]string {
	var out map[string][]string
	for _, r := range marks {
		if !r.On {
			continue
		}
		if out == nil {
			out = map[string][]string{}
		}
		out[r.Reaction] = append(out[r.Reaction], r.Sender)
	}
	for _, senders := range out {
		slices.Sort(senders)
	}
	return out
}

// Messages returns the messages (KindMessage entries) of conv in conv_seq order, recalled ones
// included (Recalled set).
func (s *Store) Messages(conv string) ([]Message, error) {
	if !keyableID(conv) {
		return nil, nil
	}
	db, err := s.read()
	if err != nil {
		return nil, err
	}
	defer s.mu.RUnlock()
	self, _, err := getValue(db, sk.user())
	if err != nil {
		return nil, err
	}
	peers, err := getPeerMarks(db, conv, string(self))
	if err != nil {
		return nil, err
	}
	prefix := sk.viewPrefix(conv)
	var out []Message
	err = scan(db, prefix, func(k, v []byte) error {
		var m storedMsg
		if err := decode(v, &m); err != nil {
			return fmt.Errorf("client: message view of %s: %w", conv, err)
		}
		if m.Kind != proto.KindMessage {
			return nil
		}
		seq := proto.Position(binary.BigEndian.Uint64(k[len(prefix):]))
		var status Status
		if len(self) > 0 && m.Sender == string(self) {
			status = statusAt(peers, seq)
		}
		out = append(out, Message{
			Conv: conv, ConvSeq: seq, MsgID: m.MsgID, Sender: m.Sender, Time: m.Time, Body: m.Body,
			Recalled: m.Recalled, Status: status, EditedAt: m.EditedAt, Reactions: reactionsOn(m.Reactions),
		})
		return nil
	})
	return out, err
}

// ReadMark returns the highest conv_seq user has read in conv (0 if none is known).
func (s *Store) ReadMark(conv, user string) (proto.Position, error) {
	if !keyableID(conv) || !keyableID(user) {
		return 0, nil
	}
	db, err := s.read()
	if err != nil {
		return 0, err
	}
	defer s.mu.RUnlock()
	v, _, err := getUint(db, sk.readMark(conv, user))
	return proto.Position(v), err
}

// ErrMembersIncomplete is returned by Members for a group whose stored members are incomplete:
// a membership change to more than proto.MaxInlineMembers users reached the log as a count only.
// SetMembers, with the list from the server, makes them complete again.
var ErrMembersIncomplete = errors.New("client: this group's members are not all stored here; fetch them from the server")

// Members returns the known members of conv, sorted. Direct conversations have no membership
// entries: their members are empty here.
func (s *Store) Members(conv string) ([]string, error) {
	if !keyableID(conv) {
		return nil, nil
	}
	db, err := s.read()
	if err != nil {
		return nil, err
	}
	defer s.mu.RUnlock()
	if _, stale, err := getValue(db, sk.membersStale(conv)); err != nil {
		return nil, err
	} else if stale {
		return nil, ErrMembersIncomplete
	}
	prefix := sk.memberPrefix(conv)
	var out []string
	err = scan(db, prefix, func(k, _ []byte) error {
		out = append(out, string(k[len(prefix):len(k)-1]))
		return nil
	})
	return out, err
}

// SetMembers replaces the stored members of conv with members, the whole list as the server
// gave it, and marks them complete.
func (s *Store) SetMembers(conv string, members []string) error {
	if !keyableID(conv) {
		return fmt.Errorf("client: bad conversation id %q", conv)
	}
	db, err := s.write()
	if err != nil {
		return err
	}
	defer s.mu.Unlock()
	b := db.NewBatch()
	defer b.Close()
	prefix := sk.memberPrefix(conv)
	if err := b.DeleteRange(prefix, prefixEnd(prefix), nil); err != nil {
		return err
	}
	for _, u := range members {
		if !keyableID(u) {
			return fmt.Errorf("client: bad member id %q", u)
		}
		if err := b.Set(sk.member(conv, u), nil, nil); err != nil {
			return err
		}
	}
	if err := b.Delete(sk.membersStale(conv), nil); err != nil {
		return err
	}
	return b.Commit(pebble.Sync)
}

// Conversations returns the ids of every conversation an entry was stored for, sorted.
func (s *Store) Conversations() ([]string, error) {
	db, err := s.read()
	if err != nil {
		return nil, err
	}
	defer s.mu.RUnlock()
	prefix := sk.convPrefix()
	var out []string
	err = scan(db, prefix, func(k, _ []byte) error {
		out = append(out, string(k[len(prefix):len(k)-1]))
		return nil
	})
	return out, err
}
