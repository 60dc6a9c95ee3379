package log

// ConvState describes one conversation as a member sees it: enough for a device to rebase (jump
// to the head without replaying) and to page history.
type ConvState struct {
	Conv     string
	Kind     ConvKind
	Info     LogInfo  // the conversation log's epoch and retained range
	Members  []string // sorted
	ReadMark Position // the asking member's read mark
}

// Conversation returns the state of conv as member uid sees it. It returns ErrNoConversation if
// the conversation does not exist and ErrNotMember if uid is not a member: only members may look
// (G7).
func (s *Shard) Conversation(conv, uid string) (ConvState, error) {
	if !ValidID(conv) || !ValidID(uid) {
		return ConvState{}, invalidf("bad conversation or user id %q/%q", conv, uid)
	}
	snap := s.db.NewSnapshot()
	defer snap.Close()
	m, ok, err := getLogMeta(snap, s.k.conv(conv))
	if err != nil {
		return ConvState{}, err
	}
	if !ok {
		return ConvState{}, ErrNoConversation
	}
	members := m.Members
	if m.Kind == ConvGroup {
		if members, err = readIDs(snap, s.k.memberPrefix(conv)); err != nil {
			return ConvState{}, err
		}
	}
	v, ok, err := getValue(snap, s.k.member(conv, uid))
	if err != nil {
		return ConvState{}, err
	}
	if !ok {
		return ConvState{}, ErrNotMember
	}
	mem, err := decodeMember(v)
	if err != nil {
		return ConvState{}, err
	}
	return ConvState{Conv: conv, Kind: m.Kind, Info: LogInfo{Epoch: m.Epoch, First: m.First, Head: m.Head},
		Members: members, ReadMark: mem.ReadMark}, nil
}

// UserConvs returns up to limit ids of conversations whose entries reached uid's log, in id
// order, after the id after ("" for the beginning). The conversations themselves live on their
// home shards (see Conversation).
func (s *Shard) UserConvs(uid, after string, limit int) ([]string, error) {
	if !ValidID(uid) {
		return nil, invalidf("bad user id %q", uid)
	}
	return readIDsAfter(s.db, s.k.userConvPrefix(uid), after, limit)
}
