package log

import "math"

// CursorUpdate is a request to store a device's cursor ([Tx.SetCursor]).
type CursorUpdate struct {
	UID    string
	Device string
	Cursor Cursor
	// Seen asks the state machine to record the command's time as the device's last sighting
	// (a v2 cursor record, which retention reads). Without it the record is v1, byte for byte
	// what a build before sightings writes: a leader sets it only once every node reads v2.
	Seen bool
}

// MarshalBinary encodes the request: v1, or v2 (a trailing flags byte, bit 0: Seen) when Seen
// is set, which a build before sightings refuses.
func (c *CursorUpdate) MarshalBinary() ([]byte, error) {
	e := encoder{b: make([]byte, 0, 33+len(c.UID)+len(c.Device))}
	v := byte(requestV1)
	if c.Seen {
		v = requestV2
	}
	e.u8(v)
	e.str(c.UID)
	e.str(c.Device)
	e.uvarint(uint64(c.Cursor.Epoch))
	e.uvarint(uint64(c.Cursor.Pos))
	if c.Seen {
		e.u8(1)
	}
	return e.b, nil
}

// UnmarshalBinary decodes a request encoded by MarshalBinary. Errors wrap ErrCorrupt.
func (c *CursorUpdate) UnmarshalBinary(b []byte) error {
	d := decoder{b: b}
	v := d.version("cursor update", requestV2)
	*c = CursorUpdate{UID: d.str(), Device: d.str(), Cursor: Cursor{Epoch: Epoch(d.uvarint()), Pos: Position(d.uvarint())}}
	if v >= requestV2 {
		c.Seen = d.u8()&1 != 0
	}
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

// MarshalBinary encodes the request: version 1 while Retention.MinAge and InactiveAfter are zero
// (the bounds alone, byte for byte what came before them), version 2 with both after UpTo.
func (r *Trim) MarshalBinary() ([]byte, error) {
	e := encoder{b: make([]byte, 0, 48+len(r.ID))}
	v2 := r.Retention.MinAge != 0 || r.Retention.InactiveAfter != 0
	if v2 {
		e.u8(requestV2)
	} else {
		e.u8(requestV1)
	}
	e.u8(uint8(r.Target))
	e.str(r.ID)
	e.uvarint(r.Retention.MaxCount)
	e.varint(r.Retention.MaxAge)
	e.uvarint(r.UpTo)
	if v2 {
		e.varint(r.Retention.MinAge)
		e.varint(r.Retention.InactiveAfter)
	}
	return e.b, nil
}

// UnmarshalBinary decodes a request encoded by MarshalBinary, of either version (a version 1
// request has no MinAge: its trim applies the bounds alone, as it did when it was proposed).
// Errors wrap ErrCorrupt.
func (r *Trim) UnmarshalBinary(b []byte) error {
	d := decoder{b: b}
	v := d.version("trim", requestV2)
	*r = Trim{Target: TrimTarget(d.u8()), ID: d.str(),
		Retention: Retention{MaxCount: d.uvarint(), MaxAge: d.varint()}, UpTo: d.uvarint()}
	if v >= requestV2 {
		r.Retention.MinAge, r.Retention.InactiveAfter = d.varint(), d.varint()
	}
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

// MarshalBinary encodes the request: v1 without a code and a next try, v2 (v1 followed by them)
// with.
func (r *DeadLetterAdd) MarshalBinary() ([]byte, error) {
	v2 := r.Code != 0 || r.NextTry != 0
	e := encoder{b: make([]byte, 0, 48+len(r.Reason))}
	if v2 {
		e.u8(requestV2)
	} else {
		e.u8(requestV1)
	}
	e.uvarint(uint64(r.Dest))
	e.uvarint(r.Pos)
	e.strs(r.Users)
	e.str(r.Reason)
	if v2 {
		e.u8(r.Code)
		e.varint(r.NextTry)
	}
	return e.b, nil
}

// UnmarshalBinary decodes a request encoded by MarshalBinary. Errors wrap ErrCorrupt.
func (r *DeadLetterAdd) UnmarshalBinary(b []byte) error {
	d := decoder{b: b}
	v := d.version("dead letter", requestV2)
	*r = DeadLetterAdd{Dest: ShardID(d.uvarint()), Pos: d.uvarint(), Users: d.strs(), Reason: d.str()}
	if v >= requestV2 {
		r.Code, r.NextTry = d.u8(), d.varint()
	}
	return d.done("dead letter")
}

// MarshalBinary encodes the request: v1 for a held dead letter, v2 (v1 and a flags byte, 1 =
// archived) for an archived one.
func (r *DeadLetterDrop) MarshalBinary() ([]byte, error) {
	e := encoder{b: make([]byte, 0, 16)}
	if r.Archived {
		e.u8(requestV2)
	} else {
		e.u8(requestV1)
	}
	e.uvarint(uint64(r.Dest))
	e.uvarint(r.Pos)
	if r.Archived {
		e.u8(1)
	}
	return e.b, nil
}

// UnmarshalBinary decodes a request encoded by MarshalBinary. Errors wrap ErrCorrupt.
func (r *DeadLetterDrop) UnmarshalBinary(b []byte) error {
	d := decoder{b: b}
	v := d.version("dead letter drop", requestV2)
	*r = DeadLetterDrop{Dest: ShardID(d.uvarint()), Pos: d.uvarint()}
	if v >= requestV2 {
		if flags := d.u8(); flags != 1 && d.err == nil {
			d.err = corruptf("dead letter drop: flags %#x", flags)
		}
		r.Archived = true
	}
	return d.done("dead letter drop")
}

// MarshalBinary encodes the request (v1).
func (r *DeadLetterAttempt) MarshalBinary() ([]byte, error) {
	e := encoder{b: make([]byte, 0, 48+len(r.Reason))}
	e.u8(requestV1)
	e.uvarint(uint64(r.Dest))
	e.uvarint(r.Pos)
	e.uvarint(uint64(r.Attempt))
	e.u8(r.Code)
	e.str(r.Reason)
	e.varint(r.NextTry)
	return e.b, nil
}

// UnmarshalBinary decodes a request encoded by MarshalBinary. Errors wrap ErrCorrupt.
func (r *DeadLetterAttempt) UnmarshalBinary(b []byte) error {
	d := decoder{b: b}
	d.version("dead letter attempt", requestV1)
	dest, pos, attempt := d.uvarint(), d.uvarint(), d.uvarint()
	if attempt > math.MaxUint32 {
		d.fail("dead letter attempt number")
	}
	*r = DeadLetterAttempt{Dest: ShardID(dest), Pos: pos, Attempt: uint32(attempt), Code: d.u8(), Reason: d.str(), NextTry: d.varint()}
	return d.done("dead letter attempt")
}

// MarshalBinary encodes the request (v1).
func (r *DeadLetterArchive) MarshalBinary() ([]byte, error) {
	e := encoder{b: make([]byte, 0, 16)}
	e.u8(requestV1)
	e.uvarint(uint64(r.Dest))
	e.uvarint(r.Pos)
	return e.b, nil
}

// UnmarshalBinary decodes a request encoded by MarshalBinary. Errors wrap ErrCorrupt.
func (r *DeadLetterArchive) UnmarshalBinary(b []byte) error {
	d := decoder{b: b}
	d.version("dead letter archive", requestV1)
	*r = DeadLetterArchive{Dest: ShardID(d.uvarint()), Pos: d.uvarint()}
	return d.done("dead letter archive")
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
