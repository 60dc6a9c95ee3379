package log

import (
	"cmp"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"slices"

	"github.com/cockroachdb/pebble/v2"

	"github.com/syncd-dev/syncd/log/ident"
)

// Append is a request to add an entry to a conversation log: a message, a read receipt, a recall,
// or a group creation or membership change. It is carried inside a Raft command.
type Append struct {
	Conv        string
	Sender      string
	ClientMsgID string // chosen by the client; the dedup key is (Sender, ClientMsgID, Kind)
	Kind        Kind
	Body        []byte   // KindMessage
	ReadUpTo    Position // KindReceipt
	Target      MsgID    // KindRecall
	// Members: for KindGroupCreate the initial members (the sender is always added), for
	// KindMemberAdd/Remove the users concerned, and for a message to a direct conversation
	// that does not exist yet exactly the two users, which creates it.
	Members []string
	Role    Role // KindRoleChange: the role to give Members

	// DedupWindow is how long (ns) the dedup record of this request is kept. Zero means the
	// default. It travels in the command so every replica uses the proposer's setting.
	DedupWindow int64
	// RecallWindow is how long (ns) after sending a message may be recalled (KindRecall only).
	// Zero means the default.
	RecallWindow int64
	// MaxGroupSize is the most members a group may have after a KindGroupCreate or KindMemberAdd.
	// Zero means the default. It travels in the command like the windows.
	MaxGroupSize int64
}

// Defaults for the windows of an [Append].
const (
	DefaultDedupWindow  = int64(24 * 3600 * 1e9) // mobile apps retry after being killed for hours
	DefaultRecallWindow = int64(2 * 60 * 1e9)
	// DefaultMaxGroupSize is the group size limit when the request names none.
	DefaultMaxGroupSize = 10_000
	// MaxMembersPerRequest caps the users one membership request names.
	MaxMembersPerRequest = 1000
	// receiptScanLimit bounds the entries a group receipt inspects to find the senders it
	// concerns; beyond it the receipt goes to every member.
	receiptScanLimit = 512
	// Dedup records are reclaimed dedupGCBatch at a time on every dedupGCEvery-th Raft index:
	// four per index on average, well above the one record each append creates.
	dedupGCEvery = 64
	dedupGCBatch = 256
)

// AppendResult is the outcome of an [Append]. A resend of the same request returns the original
// result with Duplicate set.
type AppendResult struct {
	MsgID     MsgID
	ConvSeq   Position
	Time      int64 // the original command's proposer time
	Epoch     Epoch // the conversation log's epoch
	Duplicate bool  // this request was a resend; nothing was written
	NoOp      bool  // a receipt that did not move the read mark: accepted, no entry written
}

// Append applies req, stamped st. See [Append] for the request and the sentinel errors in
// errors.go for the refusals.
func (t *Tx) Append(st Stamp, req *Append) (AppendResult, error) {
	if err := req.validate(); err != nil {
		return AppendResult{}, err
	}
	k := t.s.k
	suffix := dedupSuffix(req.Sender, req.ClientMsgID, req.Kind)
	hash := req.hash()

	// 1. Dedup: a live record with the same payload is the answer; another payload is a conflict.
	// An expired record is replaced below; remember it to drop its expiry index entry.
	var expired *dedupRecord
	if v, ok, err := getValue(t.b, k.dedup(suffix)); err != nil {
		return AppendResult{}, err
	} else if ok {
		rec, err := decodeDedupRecord(v)
		if err != nil {
			return AppendResult{}, err
		}
		if rec.Expires > st.Time {
			if rec.Hash != hash {
				return AppendResult{}, ErrConflict
			}
			res := rec.Result
			res.Duplicate = true
			return res, nil
		}
		expired = &rec
	}

	// 2. Checks against the conversation, all before the first write: a conversation moving to
	// or from this shard takes no writes (a resend of one it took is answered above).
	if err := t.checkConvNotMoving(req.Conv); err != nil {
		return AppendResult{}, err
	}
	meta, exists, err := t.logMeta(k.conv(req.Conv))
	if err != nil {
		return AppendResult{}, err
	}
	plan := appendPlan{meta: meta}
	if err := t.planAppend(st, req, exists, &plan); err != nil {
		return AppendResult{}, err
	}

	// 3. Writes.
	res := AppendResult{Time: st.Time, Epoch: plan.meta.Epoch}
	if plan.noop {
		res.NoOp = true
	} else {
		res.MsgID = MsgID{Shard: t.s.id, Index: st.Index}
		res.ConvSeq = plan.meta.Head + 1
		plan.meta.Head = res.ConvSeq
		if err := t.writeConvEntry(st, req, &plan, res, suffix); err != nil {
			return AppendResult{}, err
		}
	}
	if err := t.writeDedup(st, req, suffix, hash, res, expired); err != nil {
		return AppendResult{}, err
	}
	if st.Index%dedupGCEvery == 0 {
		return res, t.gcDedup(st)
	}
	return res, nil
}

// appendPlan is what planAppend decided: the conversation meta to write, membership changes,
// the recipients of the outbox record, and whether the request writes an entry at all.
type appendPlan struct {
	meta       logMeta
	add        []string // members to add
	remove     []string // members to remove
	roles      []string // members whose role becomes req.Role (KindRoleChange)
	self       member   // the sender's member record, where the plan rewrites it
	readMark   bool     // update the sender's read mark
	demoteSelf bool     // the sender hands ownership over and becomes an admin
	recall     *msgRef  // the target's ref, to mark recalled
	recipients []string
	noop       bool
}

func (t *Tx) planAppend(st Stamp, req *Append, exists bool, p *appendPlan) error {
	if req.Kind == KindGroupCreate {
		if exists {
			return ErrConversationExists
		}
		if ident.ReservedForDirect(req.Conv) {
			return invalidf("group id %q has the shape of a direct conversation id (d:… or dh:…), which only a direct conversation may have", req.Conv)
		}
		p.meta = logMeta{Kind: ConvGroup, Epoch: newEpoch(st), First: 1}
		p.add = sortedUnique(append([]string{req.Sender}, req.Members...))
		if err := checkGroupSize(req, len(p.add)); err != nil {
			return err
		}
		p.meta.MemberCount = len(p.add)
		p.recipients = p.add
		return nil
	}
	if !exists {
		if len(req.Members) != 2 || req.Kind != KindMessage {
			return ErrNoConversation
		}
		p.meta = logMeta{Kind: ConvDirect, Epoch: newEpoch(st), First: 1}
		p.add = sortedUnique(slices.Clone(req.Members)) // never modify the caller's request
		if len(p.add) != 2 || !slices.Contains(p.add, req.Sender) {
			return invalidf("a direct conversation needs the sender and one other user")
		}
		// The id is bound to the two users: nobody can squat on the conversation of two others.
		if want := ident.DirectConv(p.add[0], p.add[1]); req.Conv != want {
			return invalidf("the direct conversation of %s and %s has the id %q, not %q", p.add[0], p.add[1], want, req.Conv)
		}
		p.meta.Members = p.add
	}
	members := p.meta.Members // a direct conversation keeps its two members in its meta
	if p.meta.Kind == ConvGroup {
		var err error
		if members, err = t.members(req.Conv); err != nil {
			return err
		}
		p.meta.MemberCount = len(members) // kept from here on (values written before lack it)
	}
	if !slices.Contains(members, req.Sender) {
		return ErrNotMember
	}

	switch req.Kind {
	case KindMessage:
		p.recipients = members
	case KindReceipt:
		return t.planReceipt(req, members, p)
	case KindRecall:
		ref, err := t.planRecall(st, req)
		if err != nil {
			return err
		}
		p.recall = &ref
		p.recipients = members
	case KindMemberAdd, KindMemberRemove, KindRoleChange:
		if p.meta.Kind != ConvGroup {
			return ErrNotGroup
		}
		if err := t.planMembership(req, members, p); err != nil || p.noop {
			return err
		}
		p.meta.MemberCount = len(members) + len(p.add) - len(p.remove)
		// Removed members learn of their removal; added members see the add.
		p.recipients = sortedUnique(append(slices.Clone(members), p.add...))
	}
	return nil
}

// planMembership decides a KindMemberAdd, KindMemberRemove or KindRoleChange on a group with
// members, checking the sender's rights (see [Role]): owners and admins add; a member may be
// removed by one ranked above it, or leave (the owner only last, or after handing ownership
// over); only the owner gives roles, and giving ownership away makes the owner an admin.
func (t *Tx) planMembership(req *Append, members []string, p *appendPlan) error {
	self, err := t.member(req.Conv, req.Sender)
	if err != nil {
		return err
	}
	p.self = self
	named := sortedUnique(slices.Clone(req.Members))
	switch req.Kind {
	case KindMemberAdd:
		if self.Role < RoleAdmin {
			return fmt.Errorf("%w: only the group's owner and admins add members", ErrNotPermitted)
		}
		for _, m := range named {
			if !slices.Contains(members, m) {
				p.add = append(p.add, m)
			}
		}
		if err := checkGroupSize(req, len(members)+len(p.add)); err != nil {
			return err
		}
	case KindMemberRemove:
		for _, m := range named {
			if !slices.Contains(members, m) {
				continue
			}
			if m == req.Sender {
				if self.Role == RoleOwner && len(members) > 1 {
					return fmt.Errorf("%w: the owner leaves last, or after giving ownership to another member", ErrNotPermitted)
				}
			} else if them, err := t.member(req.Conv, m); err != nil {
				return err
			} else if them.Role >= self.Role {
				return fmt.Errorf("%w: %s is %s; as %s, the sender removes only members ranked below", ErrNotPermitted, m, them.Role, self.Role)
			}
			p.remove = append(p.remove, m)
		}
	case KindRoleChange:
		if self.Role != RoleOwner {
			return fmt.Errorf("%w: only the group's owner gives roles", ErrNotPermitted)
		}
		if slices.Contains(named, req.Sender) {
			return invalidf("the owner cannot change its own role (give ownership to another member instead)")
		}
		if req.Role == RoleOwner && len(named) != 1 {
			return invalidf("ownership goes to exactly one member, not %d", len(named))
		}
		for _, m := range named {
			if !slices.Contains(members, m) {
				continue
			}
			if them, err := t.member(req.Conv, m); err != nil {
				return err
			} else if them.Role != req.Role {
				p.roles = append(p.roles, m)
			}
		}
		p.demoteSelf = req.Role == RoleOwner && len(p.roles) == 1
	}
	if len(p.add) == 0 && len(p.remove) == 0 && len(p.roles) == 0 {
		p.noop = true // nothing changes; the request is still deduped and acked
	}
	return nil
}

// checkGroupSize refuses a group of n members over req's size limit.
func checkGroupSize(req *Append, n int) error {
	limit := cmp.Or(req.MaxGroupSize, DefaultMaxGroupSize)
	if int64(n) > limit {
		return fmt.Errorf("%w: %d members, at most %d", ErrGroupFull, n, limit)
	}
	return nil
}

func (t *Tx) planReceipt(req *Append, members []string, p *appendPlan) error {
	head := p.meta.Head
	if req.ReadUpTo == 0 || req.ReadUpTo > head {
		return invalidf("receipt reads up to %d, conversation head is %d", req.ReadUpTo, head)
	}
	m, err := t.member(req.Conv, req.Sender)
	if err != nil {
		return err
	}
	p.self = m
	if req.ReadUpTo <= m.ReadMark {
		p.noop = true
		return nil
	}
	p.readMark = true
	if p.meta.Kind == ConvDirect || req.ReadUpTo-m.ReadMark > receiptScanLimit {
		p.recipients = members
		return nil
	}
	// Group: the reader's own devices and the senders whose messages were just read.
	from := max(m.ReadMark+1, p.meta.First)
	concerned := []string{req.Sender}
	if from <= req.ReadUpTo {
		entries, err := scanEntries(t.b, t.s.k.convEntryPrefix(req.Conv), from, req.ReadUpTo, receiptScanLimit, 1<<62)
		if err != nil {
			return err
		}
		for _, e := range entries {
			if e.Kind == KindMessage && slices.Contains(members, e.Sender) {
				concerned = append(concerned, e.Sender)
			}
		}
	}
	p.recipients = sortedUnique(concerned)
	return nil
}

func (t *Tx) planRecall(st Stamp, req *Append) (msgRef, error) {
	v, ok, err := getValue(t.b, t.s.k.msgIndex(req.Target))
	if err != nil {
		return msgRef{}, err
	}
	if !ok {
		return msgRef{}, ErrNoMessage
	}
	ref, err := decodeMsgRef(v)
	if err != nil {
		return msgRef{}, err
	}
	if ref.Conv != req.Conv {
		return msgRef{}, ErrNoMessage
	}
	ev, ok, err := getValue(t.b, t.s.k.convEntry(ref.Conv, ref.ConvSeq))
	if err != nil {
		return msgRef{}, err
	}
	if !ok {
		return msgRef{}, ErrNoMessage // trimmed from the history
	}
	target, err := decodeEntry(ev, ref.ConvSeq)
	if err != nil {
		return msgRef{}, err
	}
	window := req.RecallWindow
	if window == 0 {
		window = DefaultRecallWindow
	}
	switch {
	case target.Kind != KindMessage:
		return msgRef{}, ErrNoMessage
	case target.Sender != req.Sender:
		return msgRef{}, ErrNotSender
	case ref.Recalled:
		return msgRef{}, ErrAlreadyRecalled
	case st.Time-target.Time > window:
		return msgRef{}, ErrRecallWindow
	}
	return ref, nil
}

// writeConvEntry writes the entry res names, with the membership, read mark and recall changes
// of p; dedup is the suffix of the request's dedup record, which the msg_id index keeps.
func (t *Tx) writeConvEntry(st Stamp, req *Append, p *appendPlan, res AppendResult, dedup []byte) error {
	k := t.s.k
	e := Entry{
		Kind: req.Kind, MsgID: res.MsgID, Conv: req.Conv, ConvSeq: res.ConvSeq,
		Sender: req.Sender, Time: st.Time, Body: req.Body, ReadUpTo: req.ReadUpTo, Target: req.Target,
	}
	switch req.Kind {
	case KindGroupCreate, KindMemberAdd:
		e.Members = p.add
	case KindMemberRemove:
		e.Members = p.remove
	case KindRoleChange:
		e.Members, e.Role = p.roles, req.Role
	}
	for _, m := range p.add {
		role := RoleMember
		if req.Kind == KindGroupCreate && m == req.Sender {
			role = RoleOwner // the creator owns the group
		}
		if err := t.set(k.member(req.Conv, m), member{Role: role}.encode()); err != nil {
			return err
		}
	}
	for _, m := range p.roles {
		them, err := t.member(req.Conv, m)
		if err != nil {
			return err
		}
		them.Role = req.Role
		if err := t.set(k.member(req.Conv, m), them.encode()); err != nil {
			return err
		}
	}
	if p.demoteSelf {
		p.self.Role = RoleAdmin
		if err := t.set(k.member(req.Conv, req.Sender), p.self.encode()); err != nil {
			return err
		}
	}
	for _, m := range p.remove {
		if err := t.del(k.member(req.Conv, m)); err != nil {
			return err
		}
	}
	if p.readMark {
		p.self.ReadMark = req.ReadUpTo
		if err := t.set(k.member(req.Conv, req.Sender), p.self.encode()); err != nil {
			return err
		}
	}
	if p.recall != nil {
		r := *p.recall
		r.Recalled = true
		if err := t.set(k.msgIndex(req.Target), r.encode()); err != nil {
			return err
		}
	}
	if err := t.set(k.convEntry(req.Conv, res.ConvSeq), encodeEntry(&e)); err != nil {
		return err
	}
	if err := t.set(k.msgIndex(res.MsgID), msgRef{Conv: req.Conv, ConvSeq: res.ConvSeq, Dedup: dedup}.encode()); err != nil {
		return err
	}
	if err := t.putLogMeta(k.conv(req.Conv), p.meta); err != nil {
		return err
	}
	// The outbox record keeps the whole member list, once; each destination gets only the ids of
	// its own recipients (Entry.CopyFor) and user logs only a count (see MaxInlineMembers).
	return t.appendOutbox(outboxRecord{Recipients: p.recipients, Entry: e})
}

func (t *Tx) writeDedup(st Stamp, req *Append, suffix []byte, hash [16]byte, res AppendResult, expired *dedupRecord) error {
	window := req.DedupWindow
	if window == 0 {
		window = DefaultDedupWindow
	}
	k := t.s.k
	if expired != nil {
		if err := t.del(k.dedupByExp(expired.Expires, suffix)); err != nil {
			return err
		}
	}
	rec := dedupRecord{Hash: hash, Expires: st.Time + window, Result: res}
	if err := t.set(k.dedup(suffix), rec.encode()); err != nil {
		return err
	}
	return t.set(k.dedupByExp(rec.Expires, suffix), nil)
}

// gcDedup deletes up to dedupGCBatch dedup records that expired before st.Time. Lookups ignore
// expired records anyway; this only reclaims space. It runs on appends whose Raft index is a
// multiple of dedupGCEvery: a rule every replica applies identically (unlike, say, "once per
// apply batch", whose boundaries differ between replicas), and no command does unbounded work.
func (t *Tx) gcDedup(st Stamp) error {
	k := t.s.k
	lower := k.dedupByExpPrefix()
	upper := binary.BigEndian.AppendUint64(k.dedupByExpPrefix(), uint64(max(st.Time, 0)))
	it, err := t.b.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: upper})
	if err != nil {
		return fmt.Errorf("log: read: %w", err)
	}
	var expired [][]byte
	for ok := it.First(); ok && len(expired) < dedupGCBatch; ok = it.Next() {
		expired = append(expired, slices.Clone(it.Key()))
	}
	if err := it.Close(); err != nil {
		return fmt.Errorf("log: read: %w", err)
	}
	for _, key := range expired {
		if len(key) <= len(lower)+8 { // a well-formed key carries the dedup key: a damaged store
			return corruptf("dedup expiry key %x is too short", key)
		}
		suffix := key[len(lower)+8:]
		if err := t.del(key); err != nil {
			return err
		}
		if err := t.del(k.dedup(suffix)); err != nil {
			return err
		}
	}
	return nil
}

// members returns the sorted members of group conv.
func (t *Tx) members(conv string) ([]string, error) {
	return readIDs(t.b, t.s.k.memberPrefix(conv))
}

// readIDs returns the ids that follow prefix in keys of the form prefix | id 0x00, in key order.
func readIDs(r pebble.Reader, prefix []byte) ([]string, error) {
	return readIDsAfter(r, prefix, "", -1)
}

// readIDsAfter is readIDs for at most limit ids (all if negative) greater than after.
func readIDsAfter(r pebble.Reader, prefix []byte, after string, limit int) ([]string, error) {
	lower := prefix
	if after != "" {
		lower = append(appendID(append([]byte(nil), prefix...), after), 0) // just past after's key
	}
	it, err := r.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: prefixEnd(prefix)})
	if err != nil {
		return nil, fmt.Errorf("log: read: %w", err)
	}
	var out []string
	for ok := it.First(); ok && (limit < 0 || len(out) < limit); ok = it.Next() {
		key := it.Key()
		if len(key) <= len(prefix)+1 { // a well-formed key names an id: a damaged store
			_ = it.Close()
			return nil, corruptf("key %x names no id", key)
		}
		out = append(out, string(key[len(prefix):len(key)-1]))
	}
	if err := it.Close(); err != nil {
		return nil, fmt.Errorf("log: read: %w", err)
	}
	return out, nil
}

func (t *Tx) member(conv, uid string) (member, error) {
	v, ok, err := getValue(t.b, t.s.k.member(conv, uid))
	if err != nil || !ok {
		return member{}, err
	}
	return decodeMember(v)
}

func (req *Append) validate() error {
	switch {
	case !ValidID(req.Conv):
		return invalidf("bad conversation id %q", req.Conv)
	case !ValidID(req.Sender):
		return invalidf("bad sender id %q", req.Sender)
	case !ValidID(req.ClientMsgID):
		return invalidf("bad client_msg_id %q", req.ClientMsgID)
	case !req.Kind.Valid():
		return invalidf("unknown entry kind %d", req.Kind)
	case len(req.Members) > MaxMembersPerRequest:
		return invalidf("%d members in one request, at most %d", len(req.Members), MaxMembersPerRequest)
	case req.DedupWindow < 0 || req.RecallWindow < 0:
		return invalidf("negative window")
	case req.Kind == KindRecall && req.Target.IsZero():
		return invalidf("recall without a target msg_id")
	case (req.Kind == KindMemberAdd || req.Kind == KindMemberRemove || req.Kind == KindRoleChange) && len(req.Members) == 0:
		return invalidf("%s names no members", req.Kind)
	case req.Kind == KindRoleChange && !req.Role.Valid():
		return invalidf("unknown role %d", req.Role)
	case req.Kind != KindRoleChange && req.Role != 0:
		return invalidf("a role in a %s request", req.Kind)
	case req.MaxGroupSize < 0:
		return invalidf("negative group size limit")
	}
	for _, m := range req.Members {
		if !ValidID(m) {
			return invalidf("bad member id %q", m)
		}
	}
	return nil
}

// Resend answers req from its dedup record without writing anything: the original result with
// Duplicate set if a live record (unexpired at now, Unix ns) with the same payload exists, as
// [Tx.Append] would answer it; ErrConflict if the live record is of another payload; ok false if
// there is none (then only an Append can answer). It reads the shard's applied state, so a record
// it finds was committed. Safe for concurrent use with the writer.
func (s *Shard) Resend(req *Append, now int64) (res AppendResult, ok bool, err error) {
	if err := req.validate(); err != nil {
		return AppendResult{}, false, err
	}
	v, found, err := getValue(s.db, s.k.dedup(dedupSuffix(req.Sender, req.ClientMsgID, req.Kind)))
	if err != nil || !found {
		return AppendResult{}, false, err
	}
	rec, err := decodeDedupRecord(v)
	switch {
	case err != nil:
		return AppendResult{}, false, err
	case rec.Expires <= now:
		return AppendResult{}, false, nil // expired: a resend now is a new request
	case rec.Hash != req.hash():
		return AppendResult{}, false, ErrConflict
	}
	res = rec.Result
	res.Duplicate = true
	return res, true, nil
}

// hash is the payload hash stored with the dedup record: everything about the request that a
// faithful resend repeats. The windows are server settings, not payload.
func (req *Append) hash() [16]byte {
	h := sha256.New()
	var e encoder
	e.str(req.Conv)
	e.u8(uint8(req.Kind))
	e.bytes(req.Body)
	e.uvarint(uint64(req.ReadUpTo))
	e.msgID(req.Target)
	e.strs(sortedUnique(slices.Clone(req.Members)))
	if req.Role != 0 { // requests without a role keep the hash they always had
		e.u8(uint8(req.Role))
	}
	h.Write(e.b)
	var out [16]byte
	copy(out[:], h.Sum(nil))
	return out
}

func sortedUnique(s []string) []string {
	slices.Sort(s)
	return slices.Compact(s)
}
