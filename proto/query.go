package proto

// Queries, on request streams. They read without changing anything; their results are what a
// client needs to rebase after TooOld or Rebase and to page a conversation's history.

// ConvList pages through the user's conversations in ascending order of id.
type ConvList struct {
	ID    uint64 `msgpack:"id"`    // request id
	After string `msgpack:"after"` // list conversations with ids above this one; "" = from the start
	Limit uint32 `msgpack:"limit"` // most conversations to return: 0 = Limits.MaxBatch; larger values are lowered to it
}

// FrameType implements Frame.
func (*ConvList) FrameType() Type { return TypeConvList }

// RequestID implements Request.
func (c *ConvList) RequestID() uint64 { return c.ID }

// Validate checks the request id and After, when set (CodeInvalidArgument).
func (c *ConvList) Validate() error {
	if err := checkRequestID(c.ID); err != nil {
		return err
	}
	if c.After != "" {
		return checkID("after", c.After)
	}
	return nil
}

// ConvListResult answers ConvList. To get the next page, send ConvList with After set to the
// last conversation's id.
type ConvListResult struct {
	ID    uint64     `msgpack:"id"`    // request id
	Convs []ConvInfo `msgpack:"convs"` // ascending by id
	More  bool       `msgpack:"more"`  // more conversations follow the last one
}

// FrameType implements Frame.
func (*ConvListResult) FrameType() Type { return TypeConvListResult }

// RequestID implements Response.
func (c *ConvListResult) RequestID() uint64 { return c.ID }

// ConvState asks for one conversation's state. The user must be a member (CodeNotMember);
// an unknown conversation gets CodeNoConversation.
type ConvState struct {
	ID   uint64 `msgpack:"id"`   // request id
	Conv string `msgpack:"conv"` // conversation id
}

// FrameType implements Frame.
func (*ConvState) FrameType() Type { return TypeConvState }

// RequestID implements Request.
func (c *ConvState) RequestID() uint64 { return c.ID }

// Validate checks the request id and conversation id (CodeInvalidArgument).
func (c *ConvState) Validate() error {
	if err := checkRequestID(c.ID); err != nil {
		return err
	}
	return checkID("conversation id", c.Conv)
}

// ConvStateResult answers ConvState.
type ConvStateResult struct {
	ID   uint64   `msgpack:"id"`   // request id
	Conv ConvInfo `msgpack:"conv"` // the conversation
}

// FrameType implements Frame.
func (*ConvStateResult) FrameType() Type { return TypeConvStateResult }

// RequestID implements Response.
func (c *ConvStateResult) RequestID() uint64 { return c.ID }

// History pages a conversation log backwards ("load earlier messages"). The user must be a
// member (CodeNotMember).
type History struct {
	ID   uint64 `msgpack:"id"`   // request id
	Conv string `msgpack:"conv"` // conversation id
	// Before: return entries with conv_seq below it; 0 = from the head (the latest page).
	Before Position `msgpack:"before"`
	// Limit: most entries to return: 0 = Limits.MaxBatch; larger values are lowered to it.
	Limit uint32 `msgpack:"limit"`
}

// FrameType implements Frame.
func (*History) FrameType() Type { return TypeHistory }

// RequestID implements Request.
func (h *History) RequestID() uint64 { return h.ID }

// Validate checks the request id and conversation id (CodeInvalidArgument).
func (h *History) Validate() error {
	if err := checkRequestID(h.ID); err != nil {
		return err
	}
	return checkID("conversation id", h.Conv)
}

// HistoryResult answers History: the retained entries just below Before, in ascending conv_seq
// (Entry.Seq is the conv_seq), contiguous and ending at Before-1 (or at Head when Before was 0
// or above Head). It may hold fewer than Limit entries when the page would exceed the frame
// limit. Entries is empty when nothing is retained below Before (Before <= First): the client
// has reached the start of what the server keeps. The next page is Before = the first entry's
// Seq.
type HistoryResult struct {
	ID      uint64   `msgpack:"id"`      // request id
	Entries []Entry  `msgpack:"entries"` // ascending, contiguous
	Epoch   Epoch    `msgpack:"epoch"`   // the conversation log's epoch
	First   Position `msgpack:"first"`   // first retained conv_seq
	Head    Position `msgpack:"head"`    // last conv_seq
}

// FrameType implements Frame.
func (*HistoryResult) FrameType() Type { return TypeHistoryResult }

// RequestID implements Response.
func (h *HistoryResult) RequestID() uint64 { return h.ID }

// HeadCheck asks for the user log's epoch and head: the client's periodic proof (every few
// minutes) that its sync stream is not silently stalled.
type HeadCheck struct {
	ID uint64 `msgpack:"id"` // request id
}

// FrameType implements Frame.
func (*HeadCheck) FrameType() Type { return TypeHeadCheck }

// RequestID implements Request.
func (h *HeadCheck) RequestID() uint64 { return h.ID }

// Validate checks the request id (CodeInvalidArgument).
func (h *HeadCheck) Validate() error { return checkRequestID(h.ID) }

// Head answers HeadCheck: the user log's epoch and retained range [First, Head]. A device whose
// cursor is below First-1 (a new device's cursor 0 included) gets TooOld from SyncStart.
type Head struct {
	ID    uint64   `msgpack:"id"`    // request id
	Epoch Epoch    `msgpack:"epoch"` // the user log's epoch (0 if it does not exist yet)
	Head  Position `msgpack:"head"`  // the user log's last position
	First Position `msgpack:"first"` // first retained position (Head+1 when none is; 1 for a log not created yet)
	// Subs (revision 3), for a user whose stream is split, holds every sub-log's epoch, head
	// and first retained position, Subs[0] being Epoch, Head and First again; absent otherwise.
	Subs []SubHead `msgpack:"subs"`
}

// SubHead is one sub-log's part of a [Head].
type SubHead struct {
	Epoch Epoch    `msgpack:"epoch"`
	Head  Position `msgpack:"head"`
	First Position `msgpack:"first"`
}

// FrameType implements Frame.
func (*Head) FrameType() Type { return TypeHead }

// RequestID implements Response.
func (h *Head) RequestID() uint64 { return h.ID }

// Members pages through a conversation's members in ascending order of id, with their roles.
// The user must be a member (CodeNotMember); an unknown conversation gets CodeNoConversation.
type Members struct {
	ID    uint64 `msgpack:"id"`    // request id
	Conv  string `msgpack:"conv"`  // conversation id
	After string `msgpack:"after"` // members with ids above this one; "" = from the start
	Limit uint32 `msgpack:"limit"` // most members: 0 = MaxPage; larger values are lowered to it
}

// FrameType implements Frame.
func (*Members) FrameType() Type { return TypeMembers }

// RequestID implements Request.
func (m *Members) RequestID() uint64 { return m.ID }

// Validate checks the request id, the conversation id and After, when set (CodeInvalidArgument).
func (m *Members) Validate() error {
	if err := checkRequestID(m.ID); err != nil {
		return err
	}
	if err := checkID("conversation id", m.Conv); err != nil {
		return err
	}
	if m.After != "" {
		return checkID("after", m.After)
	}
	return nil
}

// MembersResult answers Members. To get the next page, send Members with After set to the last
// member's user.
type MembersResult struct {
	ID      uint64   `msgpack:"id"`      // request id
	Members []Member `msgpack:"members"` // ascending by user id
	More    bool     `msgpack:"more"`    // more members follow the last one
}

// FrameType implements Frame.
func (*MembersResult) FrameType() Type { return TypeMembersResult }

// RequestID implements Response.
func (m *MembersResult) RequestID() uint64 { return m.ID }
