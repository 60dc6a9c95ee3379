package proto

// Mutations. Each carries a request id (matched by its answer) and a client_msg_id (cmid)
// chosen by the client once per logical action and kept across every resend, so the server
// applies it once: the dedup key is (user, cmid, action) and a resend within the dedup window
// (24 h by default) gets the original Ack with Duplicate set. Every mutation is answered by an
// Ack, sent only after the entry is durably committed, or by an Error.

// Send posts a message to a conversation.
type Send struct {
	ID          uint64 `msgpack:"id"`   // request id
	Conv        string `msgpack:"conv"` // conversation id
	ClientMsgID string `msgpack:"cmid"` // client_msg_id
	Body        []byte `msgpack:"body"` // opaque to the server, at most Limits.MaxBody bytes
	// Peer names the other user of a direct conversation. If the conversation does not exist,
	// the server creates it as a direct conversation between the sender and Peer; if it exists,
	// Peer is ignored. A resend must repeat Peer (it is part of the payload).
	Peer string `msgpack:"peer"`
}

// FrameType implements Frame.
func (*Send) FrameType() Type { return TypeSend }

// RequestID implements Request.
func (s *Send) RequestID() uint64 { return s.ID }

// Validate checks the ids (CodeInvalidArgument) and the body size (CodeTooLarge, above MaxBody).
func (s *Send) Validate() error {
	if err := checkMutation(s.ID, s.Conv, s.ClientMsgID); err != nil {
		return err
	}
	if len(s.Body) > MaxBody {
		return Errorf(CodeTooLarge, "body of %d bytes, at most %d", len(s.Body), MaxBody)
	}
	if s.Peer != "" {
		return checkID("peer", s.Peer)
	}
	return nil
}

// Ack answers a mutation once its entry is durably committed (or was already: Duplicate).
type Ack struct {
	ID      uint64   `msgpack:"id"`       // request id
	MsgID   MsgID    `msgpack:"msg_id"`   // the entry's id; empty when NoOp
	Conv    string   `msgpack:"conv"`     // conversation id
	ConvSeq Position `msgpack:"conv_seq"` // the entry's position in the conversation; 0 when NoOp
	Time    int64    `msgpack:"time"`     // server time of the original append, Unix nanoseconds
	Epoch   Epoch    `msgpack:"epoch"`    // the conversation log's epoch
	// Duplicate is set when this request was a resend: nothing was written, and MsgID, ConvSeq
	// and Time are those of the original.
	Duplicate bool `msgpack:"duplicate"`
	// NoOp is set when the request was accepted without writing an entry: a MarkRead at or below
	// the current read mark, a membership change that changes nothing.
	NoOp bool `msgpack:"noop"`
}

// FrameType implements Frame.
func (*Ack) FrameType() Type { return TypeAck }

// RequestID implements Response.
func (a *Ack) RequestID() uint64 { return a.ID }

// MarkRead reports that the user has read a conversation up to a conv_seq. Read marks only move
// forward: a MarkRead at or below the current mark is acked with NoOp.
type MarkRead struct {
	ID          uint64   `msgpack:"id"`    // request id
	Conv        string   `msgpack:"conv"`  // conversation id
	ClientMsgID string   `msgpack:"cmid"`  // client_msg_id
	UpTo        Position `msgpack:"up_to"` // read up to this conv_seq (1 or more, at most the head)
}

// FrameType implements Frame.
func (*MarkRead) FrameType() Type { return TypeMarkRead }

// RequestID implements Request.
func (m *MarkRead) RequestID() uint64 { return m.ID }

// Validate checks the ids and that UpTo is at least 1 (CodeInvalidArgument).
func (m *MarkRead) Validate() error {
	if err := checkMutation(m.ID, m.Conv, m.ClientMsgID); err != nil {
		return err
	}
	if m.UpTo == 0 {
		return invalid("up_to 0: conversation positions start at 1")
	}
	return nil
}

// Recall withdraws one of the sender's own messages, within the server's recall window.
type Recall struct {
	ID          uint64 `msgpack:"id"`     // request id
	Conv        string `msgpack:"conv"`   // conversation id
	ClientMsgID string `msgpack:"cmid"`   // client_msg_id
	Target      MsgID  `msgpack:"target"` // the message to recall
}

// FrameType implements Frame.
func (*Recall) FrameType() Type { return TypeRecall }

// RequestID implements Request.
func (r *Recall) RequestID() uint64 { return r.ID }

// Validate checks the ids, including Target's canonical form (CodeInvalidArgument).
func (r *Recall) Validate() error { return checkTargeted(r.ID, r.Conv, r.ClientMsgID, r.Target) }

// Edit (revision 7) replaces the body of one of the sender's own messages. Every member gets
// the edit as an entry (KindEdit); a message that was recalled cannot be edited.
type Edit struct {
	ID          uint64 `msgpack:"id"`     // request id
	Conv        string `msgpack:"conv"`   // conversation id
	ClientMsgID string `msgpack:"cmid"`   // client_msg_id
	Target      MsgID  `msgpack:"target"` // the message to edit
	Body        []byte `msgpack:"body"`   // the new body, at most Limits.MaxBody bytes
}

// FrameType implements Frame.
func (*Edit) FrameType() Type { return TypeEdit }

// RequestID implements Request.
func (r *Edit) RequestID() uint64 { return r.ID }

// Validate checks the ids, Target's canonical form (CodeInvalidArgument) and the body size
// (CodeTooLarge).
func (r *Edit) Validate() error {
	if err := checkTargeted(r.ID, r.Conv, r.ClientMsgID, r.Target); err != nil {
		return err
	}
	if len(r.Body) > MaxBody {
		return Errorf(CodeTooLarge, "body of %d bytes, at most %d", len(r.Body), MaxBody)
	}
	return nil
}

// React (revision 7) puts a reaction on a message of the conversation, or takes it off
// (Remove). Any member may react; every member gets the reaction as an entry (KindReaction).
// Putting on a reaction that is on (or taking off one that is off) is accepted and written: the
// last entry of a (message, sender, reaction) is what counts.
type React struct {
	ID          uint64 `msgpack:"id"`       // request id
	Conv        string `msgpack:"conv"`     // conversation id
	ClientMsgID string `msgpack:"cmid"`     // client_msg_id
	Target      MsgID  `msgpack:"target"`   // the message reacted to
	Reaction    string `msgpack:"reaction"` // 1 to MaxReactionLen bytes (ValidReaction)
	Remove      bool   `msgpack:"remove"`   // take the reaction off
}

// FrameType implements Frame.
func (*React) FrameType() Type { return TypeReact }

// RequestID implements Request.
func (r *React) RequestID() uint64 { return r.ID }

// Validate checks the ids, Target's canonical form and the reaction (CodeInvalidArgument).
func (r *React) Validate() error {
	if err := checkTargeted(r.ID, r.Conv, r.ClientMsgID, r.Target); err != nil {
		return err
	}
	if !ValidReaction(r.Reaction) {
		return invalid("bad reaction %s: 1 to %d bytes of printable UTF-8, no spaces", quote(r.Reaction), MaxReactionLen)
	}
	return nil
}

// checkTargeted checks a mutation that names an earlier message (Recall, Edit, React).
func checkTargeted(id uint64, conv, cmid string, target MsgID) error {
	if err := checkMutation(id, conv, cmid); err != nil {
		return err
	}
	if !target.Valid() {
		return invalid("bad target msg_id %s: want shard.index.sub", quote(string(target)))
	}
	return nil
}

// CreateGroup creates a group conversation with the client-chosen id Conv. The sender is always
// a member, whether or not Members names it.
type CreateGroup struct {
	ID          uint64   `msgpack:"id"`      // request id
	Conv        string   `msgpack:"conv"`    // the new conversation's id
	ClientMsgID string   `msgpack:"cmid"`    // client_msg_id
	Members     []string `msgpack:"members"` // initial members besides the sender, at most MaxMembers
}

// FrameType implements Frame.
func (*CreateGroup) FrameType() Type { return TypeCreateGroup }

// RequestID implements Request.
func (g *CreateGroup) RequestID() uint64 { return g.ID }

// Validate checks the ids (CodeInvalidArgument) and the member count (CodeTooLarge).
func (g *CreateGroup) Validate() error {
	if err := checkMutation(g.ID, g.Conv, g.ClientMsgID); err != nil {
		return err
	}
	return checkMembers(g.Members, 0)
}

// AddMembers adds users to a group. Users already in it are ignored (all of them: NoOp).
type AddMembers struct {
	ID          uint64   `msgpack:"id"`      // request id
	Conv        string   `msgpack:"conv"`    // group id
	ClientMsgID string   `msgpack:"cmid"`    // client_msg_id
	Members     []string `msgpack:"members"` // users to add: 1 to MaxMembers
}

// FrameType implements Frame.
func (*AddMembers) FrameType() Type { return TypeAddMembers }

// RequestID implements Request.
func (a *AddMembers) RequestID() uint64 { return a.ID }

// Validate checks the ids, that Members is not empty (CodeInvalidArgument) and its size
// (CodeTooLarge).
func (a *AddMembers) Validate() error {
	if err := checkMutation(a.ID, a.Conv, a.ClientMsgID); err != nil {
		return err
	}
	return checkMembers(a.Members, 1)
}

// RemoveMembers removes users from a group (a user may remove itself: leave). Users not in it
// are ignored (all of them: NoOp). Removed users receive the entry that removes them.
type RemoveMembers struct {
	ID          uint64   `msgpack:"id"`      // request id
	Conv        string   `msgpack:"conv"`    // group id
	ClientMsgID string   `msgpack:"cmid"`    // client_msg_id
	Members     []string `msgpack:"members"` // users to remove: 1 to MaxMembers
}

// FrameType implements Frame.
func (*RemoveMembers) FrameType() Type { return TypeRemoveMembers }

// RequestID implements Request.
func (r *RemoveMembers) RequestID() uint64 { return r.ID }

// Validate checks the ids, that Members is not empty (CodeInvalidArgument) and its size
// (CodeTooLarge).
func (r *RemoveMembers) Validate() error {
	if err := checkMutation(r.ID, r.Conv, r.ClientMsgID); err != nil {
		return err
	}
	return checkMembers(r.Members, 1)
}

// SetRole gives Members the role Role in a group; only the owner may (CodeNotPermitted).
// Giving RoleOwner names exactly one member, and the sender becomes an admin. Members not in the
// group, and members who already have the role, are ignored (all of them: NoOp).
type SetRole struct {
	ID          uint64   `msgpack:"id"`      // request id
	Conv        string   `msgpack:"conv"`    // group id
	ClientMsgID string   `msgpack:"cmid"`    // client_msg_id
	Members     []string `msgpack:"members"` // users whose role changes: 1 to MaxMembers, never the sender
	Role        Role     `msgpack:"role"`    // the role to give them
}

// FrameType implements Frame.
func (*SetRole) FrameType() Type { return TypeSetRole }

// RequestID implements Request.
func (r *SetRole) RequestID() uint64 { return r.ID }

// Validate checks the ids, that Members is not empty and Role is known (CodeInvalidArgument),
// and the member count (CodeTooLarge).
func (r *SetRole) Validate() error {
	if err := checkMutation(r.ID, r.Conv, r.ClientMsgID); err != nil {
		return err
	}
	if !r.Role.Valid() {
		return invalid("unknown role %d", r.Role)
	}
	return checkMembers(r.Members, 1)
}
