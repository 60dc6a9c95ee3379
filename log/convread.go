package log

import (
	"cmp"
	"errors"
	"slices"

	"github.com/cockroachdb/pebble/v2"
)

// ConvState describes one conversation as a member sees it: enough for a device to rebase (jump
// to the head without replaying) and to page history.
type ConvState struct {
	Conv        string
	Kind        ConvKind
	Info        LogInfo  // the conversation log's epoch and retained range
	Members     []string // sorted; all of them when MemberCount <= MaxInlineMembers, else none
	MemberCount int
	ReadMark    Position // the asking member's read mark
	Role        Role     // the asking member's role
	// DeliveredMark is the asking member's delivered mark: one of its devices has stored the
	// conversation up to it (at least ReadMark).
	DeliveredMark Position
	// PeerDelivered and PeerRead are, in a direct conversation, the other member's marks; zero
	// in a group (ask [Shard.Receipts] for counts).
	PeerDelivered, PeerRead Position
	// Large is set for a large group, which its members' devices read from the conversation
	// log (read diffusion, Append.LargeGroupThreshold).
	Large bool
}

// Conversation returns the state of conv as member uid sees it. It returns ErrNoConversation if
// the conversation does not exist and ErrNotMember if uid is not a member: only members may look
// (G7). A group's members come inline up to MaxInlineMembers; page larger groups with
// [Shard.MembersAfter].
func (s *Shard) Conversation(conv, uid string) (ConvState, error) {
	if !ValidID(conv) || !ValidID(uid) {
		return ConvState{}, invalidf("bad conversation or user id %q/%q", conv, uid)
	}
	snap := s.db.NewSnapshot()
	defer snap.Close()
	m, err := s.convMeta(snap, conv)
	if err != nil {
		return ConvState{}, err
	}
	mem, err := memberOf(snap, s.k, conv, uid)
	if err != nil {
		return ConvState{}, err
	}
	st := ConvState{Conv: conv, Kind: m.Kind, Info: LogInfo{Epoch: m.Epoch, First: m.First, Head: m.Head},
		Members: m.Members, MemberCount: len(m.Members), ReadMark: mem.ReadMark, Role: mem.Role,
		DeliveredMark: mem.delivered(), Large: m.Large}
	if m.Kind == ConvDirect {
		for _, peer := range m.Members {
			if peer == uid {
				continue
			}
			p, err := memberOf(snap, s.k, conv, peer)
			if err != nil && !errors.Is(err, ErrNotMember) {
				return ConvState{}, err
			}
			st.PeerDelivered, st.PeerRead = p.delivered(), p.ReadMark
		}
	}
	if m.Kind == ConvGroup {
		// One more than fits inline tells whether they all do; a group written before member
		// counts were kept is counted once here.
		limit := MaxInlineMembers + 1
		if m.MemberCount == 0 {
			limit = -1
		}
		if st.Members, err = readIDsAfter(snap, s.k.memberPrefix(conv), "", limit); err != nil {
			return ConvState{}, err
		}
		st.MemberCount = cmp.Or(m.MemberCount, len(st.Members))
		if st.MemberCount > MaxInlineMembers {
			st.Members = nil
		}
	}
	return st, nil
}

// Member is one member of a group and its role.
type Member struct {
	User string
	Role Role
}

// MembersAfter returns up to limit members of conv, in id order after the id after ("" for the
// beginning), as member uid asks: ErrNotMember if uid is not one (G7), ErrNoConversation if conv
// does not exist. more reports whether members follow.
func (s *Shard) MembersAfter(conv, uid, after string, limit int) (page []Member, more bool, err error) {
	if !ValidID(conv) || !ValidID(uid) || (after != "" && !ValidID(after)) || limit <= 0 {
		return nil, false, invalidf("bad members query %q/%q after %q, limit %d", conv, uid, after, limit)
	}
	snap := s.db.NewSnapshot()
	defer snap.Close()
	m, err := s.convMeta(snap, conv)
	if err != nil {
		return nil, false, err
	}
	if _, err := memberOf(snap, s.k, conv, uid); err != nil {
		return nil, false, err
	}
	ids := m.Members // a direct conversation's two
	if m.Kind == ConvGroup {
		if ids, err = readIDsAfter(snap, s.k.memberPrefix(conv), after, limit+1); err != nil {
			return nil, false, err
		}
	} else {
		ids = slices.DeleteFunc(slices.Clone(ids), func(id string) bool { return id <= after })
	}
	if more = len(ids) > limit; more {
		ids = ids[:limit]
	}
	for _, id := range ids {
		mem, err := memberOf(snap, s.k, conv, id)
		if err != nil {
			return nil, false, err
		}
		page = append(page, Member{User: id, Role: mem.Role})
	}
	return page, more, nil
}

// memberOf reads uid's member record of conv: ErrNotMember if there is none.
func memberOf(r pebble.Reader, k keys, conv, uid string) (member, error) {
	v, ok, err := getValue(r, k.member(conv, uid))
	if err != nil {
		return member{}, err
	}
	if !ok {
		return member{}, ErrNotMember
	}
	return decodeMember(v)
}

// UserConvs returns up to limit ids of conversations whose entries reached uid's log, in id
// order, after the id after ("" for the beginning). The conversations themselves live on their
// home shards (see Conversation).
func (s *Shard) UserConvs(uid, after string, limit int) ([]string, error) {
	if !ValidLog(uid) {
		return nil, invalidf("bad user id %q", uid)
	}
	return readIDsAfter(s.db, s.k.userConvPrefix(uid), after, limit)
}
