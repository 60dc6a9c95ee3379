package log

// Encodings of stored values. Each starts with a format version byte so that a later release can
// read what an earlier one wrote; decoders reject versions they do not know with ErrCorrupt.

const (
	valueV1 = 1
	// valueV2 adds fields at the end of a v1 value: a member's role, an entry's role and member
	// count, a group's member count. Writers use v1 while those fields are zero, so values
	// without them keep their bytes.
	valueV2 = 2
	// valueV3 adds a user log's group count to a log meta, after the v2 member count, and an
	// entry's flags (entrySource) after its v2 fields.
	valueV3 = 3
	// valueV4 writes a log meta's group count signed: a split user's sub-log counts the groups
	// whose entries it receives, and a group joined before the split but left after it counts
	// -1 in its sub-log, against the +1 in the user's own log (split.go).
	valueV4 = 4
	// valueV5 adds a conversation meta's flags (logMetaCounted) after the v4 fields, and a
	// member's delivered mark and join position after its v2 role.
	valueV5 = 5
	// valueV6 adds a log meta's restore fence (Renewed, Kept) after the v5 flags byte, which a
	// v6 value always has; written only by a restore (RenewEpochs).
	valueV6 = 6
)

// entryV4 is the version byte of an entry with a reaction, a fold or a body hash (entry
// versions reuse the value numbers up to 3): the v3 layout with its flags byte always written,
// then the reaction, the folded position and the body hash.
const entryV4 = 4

// memberV3 is the version byte of a member value with a delivered mark and a join position
// (member versions count apart from log metas': a member had v1 and v2 only).
const memberV3 = 3

// logMeta describes one log (a conversation log or a user log).
type logMeta struct {
	Kind  ConvKind // conversations only; zero for user logs
	Epoch Epoch
	First Position // first retained position; Head+1 when everything is trimmed
	Head  Position // last position appended; 0 for an empty log
	// Members holds the two members of a direct conversation, so a send needs no member scan.
	// Group members live under their own keys (tagMember); read marks do for both kinds.
	Members []string
	// MemberCount is a group's number of members; zero in values written before it was kept
	// (then count the member keys).
	MemberCount int
	// Groups is, for a user log, how many groups the user is a member of, kept from the
	// membership entries delivered to the log (Config.MaxGroupsPerUser is checked against it).
	// Memberships delivered before it was kept are not counted. A split user's count is the
	// sum over its sub-logs, whose own may be negative (valueV4).
	Groups int
	// Counted is set on a group whose delivered, read and join histograms are kept (table
	// 0x14, marks.go): every group created since they exist, and an older one from its first
	// mark update on (valueV5).
	Counted bool
	// Large is set on a group served by read diffusion (LargeGroupThreshold): its entries are
	// not copied into members' logs; they follow the conversation log (valueV5 flag).
	Large bool
	// Renewed is the epoch the log had before a restore gave it this one, and Kept the head
	// the restore kept (valueV6; zero in a log never restored): a cursor (Renewed, p) with
	// p ≤ Kept names the same history as (Epoch, p), so its device continues (LogInfo.Continues).
	Renewed Epoch
	Kept    Position
}

// Flags of a v5 log meta.
const (
	logMetaCounted = 1 << 0
	logMetaLarge   = 1 << 1
)

func (m logMeta) encode() []byte {
	e := encoder{b: make([]byte, 0, 32)}
	v := versionFor(m.MemberCount != 0)
	switch {
	case m.Renewed != 0:
		v = valueV6
	case m.Counted || m.Large:
		v = valueV5
	case m.Groups > 0:
		v = valueV3
	case m.Groups < 0:
		v = valueV4
	}
	e.u8(v)
	e.u8(uint8(m.Kind))
	e.uvarint(uint64(m.Epoch))
	e.uvarint(uint64(m.First))
	e.uvarint(uint64(m.Head))
	e.strs(m.Members)
	if v >= valueV2 {
		e.uvarint(uint64(m.MemberCount))
	}
	switch v {
	case valueV3:
		e.uvarint(uint64(m.Groups))
	case valueV4, valueV5, valueV6:
		e.varint(int64(m.Groups))
	}
	if v >= valueV5 { // written in v5 only with a flag
		var flags uint8
		if m.Counted {
			flags |= logMetaCounted
		}
		if m.Large {
			flags |= logMetaLarge
		}
		e.u8(flags)
	}
	if v == valueV6 {
		e.uvarint(uint64(m.Renewed))
		e.uvarint(uint64(m.Kept))
	}
	return e.b
}

// versionFor is the format version of a value whose v2 fields are all zero unless v2 is set.
func versionFor(v2 bool) uint8 {
	if v2 {
		return valueV2
	}
	return valueV1
}

func decodeLogMeta(b []byte) (logMeta, error) {
	d := decoder{b: b}
	v := d.version("log meta", valueV6)
	m := logMeta{
		Kind:  ConvKind(d.u8()),
		Epoch: Epoch(d.uvarint()),
		First: Position(d.uvarint()),
		Head:  Position(d.uvarint()),
	}
	m.Members = d.strs()
	if v >= valueV2 {
		m.MemberCount = int(d.uvarint())
	}
	switch v {
	case valueV3:
		m.Groups = int(d.uvarint())
	case valueV4, valueV5, valueV6:
		m.Groups = int(d.varint())
	}
	if v >= valueV5 {
		flags := d.u8()
		if flags&^(logMetaCounted|logMetaLarge) != 0 && d.err == nil {
			d.err = corruptf("log meta: unknown flags %#x", flags)
		}
		m.Counted, m.Large = flags&logMetaCounted != 0, flags&logMetaLarge != 0
	}
	if v == valueV6 {
		m.Renewed, m.Kept = Epoch(d.uvarint()), Position(d.uvarint())
		if m.Renewed == 0 && d.err == nil { // v6 is written only for a fence, and epoch 0 is never a log's
			d.err = corruptf("log meta: a restore fence without the epoch it renewed")
		}
	}
	return m, d.done("log meta")
}

// member is one member of a conversation.
type member struct {
	ReadMark Position // highest conv_seq this member has reported read
	Role     Role     // in a group; RoleMember in a direct conversation
	// DeliveredMark is the highest conv_seq one of this member's devices has stored, as the
	// delivery reporter proposed it; a receipt raises it to the read mark too (memberV3).
	DeliveredMark Position
	// Joined is the conv_seq of the entry that added the member to a group (its creation or a
	// member add): its marks count from there. Zero in direct conversations and in members
	// stored before it was kept (memberV3).
	Joined Position
}

// delivered is the member's delivered mark, at least its read mark: a record written before
// receipts raised the delivered mark too may have it lower.
func (m member) delivered() Position { return max(m.DeliveredMark, m.ReadMark) }

// effective returns the member's delivered mark, read mark and join position as the
// histograms count them (marks.go): a mark below the join position counts as the join
// position, since a member sees nothing of the conversation from before it joined.
func (m member) effective() [countKinds]Position {
	return [countKinds]Position{max(m.delivered(), m.Joined), max(m.ReadMark, m.Joined), m.Joined}
}

// encode writes v1 (a read mark), v2 (and a role above member) or v3 (and the delivered mark
// and join position, when either is set), so values without the later fields keep their bytes.
func (m member) encode() []byte {
	e := encoder{b: make([]byte, 0, 24)}
	v3 := m.DeliveredMark != 0 || m.Joined != 0
	if v3 {
		e.u8(memberV3)
	} else {
		e.u8(versionFor(m.Role > RoleMember))
	}
	e.uvarint(uint64(m.ReadMark))
	if v3 || m.Role > RoleMember {
		e.u8(uint8(max(m.Role, RoleMember))) // a zero Role reads back as RoleMember, as in v1
	}
	if v3 {
		e.uvarint(uint64(m.DeliveredMark))
		e.uvarint(uint64(m.Joined))
	}
	return e.b
}

func decodeMember(b []byte) (member, error) {
	d := decoder{b: b}
	v := d.version("member", memberV3)
	m := member{ReadMark: Position(d.uvarint()), Role: RoleMember}
	if v >= valueV2 {
		if m.Role = Role(d.u8()); !m.Role.Valid() && d.err == nil {
			d.err = corruptf("member: unknown role %d", m.Role)
		}
	}
	if v >= memberV3 {
		m.DeliveredMark, m.Joined = Position(d.uvarint()), Position(d.uvarint())
	}
	return m, d.done("member")
}

// encodeEntry encodes everything but Seq, which is part of the key.
func encodeEntry(x *Entry) []byte {
	e := encoder{b: make([]byte, 0, entryLen(x))}
	e.entry(x)
	return e.b
}

// entryLen is the exact length of x's encoding, so that buffers holding entries are allocated
// once: entries are encoded several times per send (the conversation log, the outbox, the
// delivery batch, every recipient's log), and growing the buffer was a good part of the
// allocations of the write path.
func entryLen(x *Entry) int {
	n := 2 + 16 + strLen(x.Conv) + uvarintLen(uint64(x.ConvSeq)) + strLen(x.Sender) + varintLen(x.Time) +
		uvarintLen(uint64(len(x.Body))) + len(x.Body) + uvarintLen(uint64(x.ReadUpTo)) + 16 + strsLen(x.Members)
	v := x.version()
	if v >= valueV2 {
		n += 1 + uvarintLen(uint64(x.MemberCount))
	}
	if v >= valueV3 {
		n++
	}
	if v >= entryV4 {
		n += strLen(x.Reaction) + uvarintLen(uint64(x.Folded)) + uvarintLen(uint64(len(x.BodyHash))) + len(x.BodyHash)
	}
	return n
}

// Flags of a v3 or v4 entry.
const (
	entrySource = 1 << 0
	entryRemove = 1 << 1 // v4 only
)

// version returns the version x is written in: the lowest that holds its fields, so entries
// without the later ones keep their bytes.
func (x *Entry) version() uint8 {
	switch {
	case x.Reaction != "" || x.Remove || x.Folded != 0 || len(x.BodyHash) > 0:
		return entryV4
	case x.Source:
		return valueV3
	}
	return versionFor(x.Role != 0 || x.MemberCount != 0)
}

// entry appends the encoding of x (see encodeEntry). A v3 entry is a v2 one and a flags byte,
// written only when a flag is set; a v4 entry is a v3 one with its flags byte, the reaction,
// the folded position and the body hash.
func (e *encoder) entry(x *Entry) {
	v := x.version()
	e.u8(v)
	e.u8(uint8(x.Kind))
	e.msgID(x.MsgID)
	e.str(x.Conv)
	e.uvarint(uint64(x.ConvSeq))
	e.str(x.Sender)
	e.varint(x.Time)
	e.bytes(x.Body)
	e.uvarint(uint64(x.ReadUpTo))
	e.msgID(x.Target)
	e.strs(x.Members)
	if v >= valueV2 {
		e.u8(uint8(x.Role))
		e.uvarint(uint64(x.MemberCount))
	}
	if v >= valueV3 {
		var flags uint8
		if x.Source {
			flags |= entrySource
		}
		if x.Remove {
			flags |= entryRemove
		}
		e.u8(flags)
	}
	if v >= entryV4 {
		e.str(x.Reaction)
		e.uvarint(uint64(x.Folded))
		e.bytes(x.BodyHash)
	}
}

func decodeEntry(b []byte, seq Position) (Entry, error) {
	d := decoder{b: b}
	v := d.version("entry", entryV4)
	x := Entry{
		Seq:      seq,
		Kind:     Kind(d.u8()),
		MsgID:    d.msgID(),
		Conv:     d.str(),
		ConvSeq:  Position(d.uvarint()),
		Sender:   d.str(),
		Time:     d.varint(),
		Body:     d.bytes(),
		ReadUpTo: Position(d.uvarint()),
		Target:   d.msgID(),
		Members:  d.strs(),
	}
	d.entryTail(v, &x)
	return x, d.done("entry")
}

// entryTail decodes the fields of an entry of version v after its members: the v2 role and
// member count, the v3 flags, the v4 reaction, fold and body hash (shared by decodeEntry and
// decodeEntryInto).
func (d *decoder) entryTail(v uint8, x *Entry) {
	if v >= valueV2 {
		x.Role, x.MemberCount = Role(d.u8()), int(d.uvarint())
	}
	if v >= valueV3 {
		known := uint8(entrySource)
		if v >= entryV4 {
			known |= entryRemove
		}
		flags := d.u8()
		if flags&^known != 0 && d.err == nil {
			d.err = corruptf("entry: unknown flags %#x", flags)
		}
		x.Source, x.Remove = flags&entrySource != 0, flags&entryRemove != 0
	}
	if v >= entryV4 {
		x.Reaction = d.str()
		x.Folded = Position(d.uvarint())
		if x.BodyHash = d.bytes(); len(x.BodyHash) == 0 {
			x.BodyHash = nil
		}
	}
}

// msgRef locates a message by msg_id, for recalls and traces. Dedup is the suffix of the dedup
// record the send wrote (dedupSuffix): a conversation's dedup records are found through its
// messages when the conversation moves to another shard (convmove.go), without a scan of the
// shard's whole dedup table or a second key per send. Values written before v2 have none.
type msgRef struct {
	Conv     string
	ConvSeq  Position
	Recalled bool
	Dedup    []byte
}

func (r msgRef) encode() []byte {
	e := encoder{b: make([]byte, 0, 18+len(r.Conv)+len(r.Dedup))}
	e.u8(versionFor(len(r.Dedup) > 0))
	e.str(r.Conv)
	e.uvarint(uint64(r.ConvSeq))
	if r.Recalled {
		e.u8(1)
	} else {
		e.u8(0)
	}
	if len(r.Dedup) > 0 {
		e.bytes(r.Dedup)
	}
	return e.b
}

func decodeMsgRef(b []byte) (msgRef, error) {
	d := decoder{b: b}
	v := d.version("msg ref", valueV2)
	r := msgRef{Conv: d.str(), ConvSeq: Position(d.uvarint())}
	switch d.u8() {
	case 0:
	case 1:
		r.Recalled = true
	default:
		d.fail("recalled flag")
	}
	if v >= valueV2 {
		if r.Dedup = d.bytes(); len(r.Dedup) == 0 && d.err == nil {
			d.fail("empty dedup key")
		}
	}
	return r, d.done("msg ref")
}

// dedupRecord remembers the outcome of one (sender, client_msg_id, kind) until Expires.
type dedupRecord struct {
	Hash    [16]byte // payload hash; a resend with another hash is a conflict
	Expires int64    // proposer time after which the record no longer counts
	Result  AppendResult
}

func (r dedupRecord) encode() []byte {
	e := encoder{b: make([]byte, 0, 64)}
	e.u8(valueV1)
	e.b = append(e.b, r.Hash[:]...)
	e.varint(r.Expires)
	e.msgID(r.Result.MsgID)
	e.uvarint(uint64(r.Result.ConvSeq))
	e.varint(r.Result.Time)
	e.uvarint(uint64(r.Result.Epoch))
	if r.Result.NoOp {
		e.u8(1)
	} else {
		e.u8(0)
	}
	return e.b
}

func decodeDedupRecord(b []byte) (dedupRecord, error) {
	d := decoder{b: b}
	d.version("dedup record", valueV1)
	var r dedupRecord
	copy(r.Hash[:], d.raw(16, "hash"))
	r.Expires = d.varint()
	r.Result.MsgID = d.msgID()
	r.Result.ConvSeq = Position(d.uvarint())
	r.Result.Time = d.varint()
	r.Result.Epoch = Epoch(d.uvarint())
	r.Result.NoOp = d.u8() == 1
	return r, d.done("dedup record")
}

// outboxRecord is a conversation entry waiting for fan-out, with the users who must receive it.
// It holds its own copy of the entry (the transactional outbox), so fan-out never depends on the
// conversation log still holding the entry: history retention and delivery stay independent.
type outboxRecord struct {
	Recipients []string // sorted, unique
	Entry      Entry    // Seq unused
}

func (r outboxRecord) encode() []byte {
	n := entryLen(&r.Entry)
	e := encoder{b: make([]byte, 0, 1+strsLen(r.Recipients)+uvarintLen(uint64(n))+n)}
	e.u8(valueV1)
	e.strs(r.Recipients)
	e.uvarint(uint64(n))
	e.entry(&r.Entry)
	return e.b
}

func decodeOutboxRecord(b []byte) (outboxRecord, error) {
	d := decoder{b: b}
	d.version("outbox record", valueV1)
	r := outboxRecord{Recipients: d.strs()}
	raw := d.raw(d.uvarint(), "outbox entry")
	if err := d.done("outbox record"); err != nil {
		return outboxRecord{}, err
	}
	e, err := decodeEntry(raw, 0)
	if err != nil {
		return outboxRecord{}, err
	}
	r.Entry = e
	return r, nil
}

func encodeCursor(c Cursor) []byte {
	e := encoder{b: make([]byte, 0, 20)}
	e.u8(valueV1)
	e.uvarint(uint64(c.Epoch))
	e.uvarint(uint64(c.Pos))
	return e.b
}

func decodeCursor(b []byte) (Cursor, error) {
	d := decoder{b: b}
	d.version("cursor", valueV1)
	c := Cursor{Epoch: Epoch(d.uvarint()), Pos: Position(d.uvarint())}
	return c, d.done("cursor")
}

func encodeUint(v uint64) []byte {
	e := encoder{b: make([]byte, 0, 10)}
	e.u8(valueV1)
	e.uvarint(v)
	return e.b
}

func decodeUint(b []byte) (uint64, error) {
	d := decoder{b: b}
	d.version("counter", valueV1)
	v := d.uvarint()
	return v, d.done("counter")
}
