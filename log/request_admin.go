package log

// CursorUpdate is a request to store a device's cursor ([Tx.SetCursor]).
type CursorUpdate struct {
	UID    string
	Device string
	Cursor Cursor
}

// MarshalBinary encodes the request.
func (c *CursorUpdate) MarshalBinary() ([]byte, error) {
	e := encoder{b: make([]byte, 0, 32+len(c.UID)+len(c.Device))}
	e.u8(requestV1)
	e.str(c.UID)
	e.str(c.Device)
	e.uvarint(uint64(c.Cursor.Epoch))
	e.uvarint(uint64(c.Cursor.Pos))
	return e.b, nil
}

// UnmarshalBinary decodes a request encoded by MarshalBinary. Errors wrap ErrCorrupt.
func (c *CursorUpdate) UnmarshalBinary(b []byte) error {
	d := decoder{b: b}
	d.version("cursor update", requestV1)
	*c = CursorUpdate{UID: d.str(), Device: d.str(), Cursor: Cursor{Epoch: Epoch(d.uvarint()), Pos: Position(d.uvarint())}}
	return d.done("cursor update")
}

// TrimTarget says which kind of log a [Trim] applies to.
type TrimTarget uint8

// Trim targets. Values are persisted in Raft commands.
const (
	TrimUserLog   TrimTarget = 1 // ID is a user id ([Tx.TrimUser])
	TrimConvLog   TrimTarget = 2 // ID is a conversation id ([Tx.TrimConv])
	TrimOutboxLog TrimTarget = 3 // the shard's outbox up to UpTo ([Tx.TrimOutbox]); ID unused
	ResetUserLog  TrimTarget = 4 // ID is a user id: drop the whole log, new epoch ([Tx.ResetUser])
)

// Trim is a retention request for one log.
type Trim struct {
	Target    TrimTarget
	ID        string
	Retention Retention
	UpTo      uint64 // TrimOutboxLog: trim outbox positions up to and including UpTo
}

// MarshalBinary encodes the request.
func (r *Trim) MarshalBinary() ([]byte, error) {
	e := encoder{b: make([]byte, 0, 32+len(r.ID))}
	e.u8(requestV1)
	e.u8(uint8(r.Target))
	e.str(r.ID)
	e.uvarint(r.Retention.MaxCount)
	e.varint(r.Retention.MaxAge)
	e.uvarint(r.UpTo)
	return e.b, nil
}

// UnmarshalBinary decodes a request encoded by MarshalBinary. Errors wrap ErrCorrupt.
func (r *Trim) UnmarshalBinary(b []byte) error {
	d := decoder{b: b}
	d.version("trim", requestV1)
	*r = Trim{Target: TrimTarget(d.u8()), ID: d.str(),
		Retention: Retention{MaxCount: d.uvarint(), MaxAge: d.varint()}, UpTo: d.uvarint()}
	return d.done("trim")
}

// Trim runs the trim request and returns the log's first retained position afterwards (for the outbox,
// the first retained outbox position).
func (t *Tx) Trim(st Stamp, r *Trim) (uint64, error) {
	switch r.Target {
	case TrimUserLog:
		p, err := t.TrimUser(st, r.ID, r.Retention)
		return uint64(p), err
	case TrimConvLog:
		p, err := t.TrimConv(st, r.ID, r.Retention)
		return uint64(p), err
	case ResetUserLog:
		_, err := t.ResetUser(st, r.ID)
		return 1, err
	case TrimOutboxLog:
		if err := t.TrimOutbox(r.UpTo); err != nil {
			return 0, err
		}
		info, err := t.outboxInfo()
		return info.First, err
	}
	return 0, invalidf("unknown trim target %d", r.Target)
}

// MarshalBinary encodes the request.
func (r *DeadLetterAdd) MarshalBinary() ([]byte, error) {
	e := encoder{b: make([]byte, 0, 32+len(r.Reason))}
	e.u8(requestV1)
	e.uvarint(uint64(r.Dest))
	e.uvarint(r.Pos)
	e.strs(r.Users)
	e.str(r.Reason)
	return e.b, nil
}

// UnmarshalBinary decodes a request encoded by MarshalBinary. Errors wrap ErrCorrupt.
func (r *DeadLetterAdd) UnmarshalBinary(b []byte) error {
	d := decoder{b: b}
	d.version("dead letter", requestV1)
	*r = DeadLetterAdd{Dest: ShardID(d.uvarint()), Pos: d.uvarint(), Users: d.strs(), Reason: d.str()}
	return d.done("dead letter")
}

// MarshalBinary encodes the request.
func (r *DeadLetterDrop) MarshalBinary() ([]byte, error) {
	e := encoder{b: make([]byte, 0, 16)}
	e.u8(requestV1)
	e.uvarint(uint64(r.Dest))
	e.uvarint(r.Pos)
	return e.b, nil
}

// UnmarshalBinary decodes a request encoded by MarshalBinary. Errors wrap ErrCorrupt.
func (r *DeadLetterDrop) UnmarshalBinary(b []byte) error {
	d := decoder{b: b}
	d.version("dead letter drop", requestV1)
	*r = DeadLetterDrop{Dest: ShardID(d.uvarint()), Pos: d.uvarint()}
	return d.done("dead letter drop")
}

// MarshalBinary encodes the request.
func (r *Redelivery) MarshalBinary() ([]byte, error) {
	e := encoder{b: make([]byte, 0, 64+len(r.Item.Entry.Body))}
	e.u8(requestV1)
	e.uvarint(uint64(r.Source))
	e.uvarint(r.Item.Pos)
	e.strs(r.Item.Users)
	e.bytes(encodeEntry(&r.Item.Entry))
	return e.b, nil
}

// UnmarshalBinary decodes a request encoded by MarshalBinary. Errors wrap ErrCorrupt.
func (r *Redelivery) UnmarshalBinary(b []byte) error {
	d := decoder{b: b}
	d.version("redelivery", requestV1)
	*r = Redelivery{Source: ShardID(d.uvarint()), Item: Delivery{Pos: d.uvarint(), Users: d.strs()}}
	raw := d.bytes()
	if err := d.done("redelivery"); err != nil {
		return err
	}
	e, err := decodeEntry(raw, 0)
	r.Item.Entry = e
	return err
}
