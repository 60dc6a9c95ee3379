package log

import (
	"cmp"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"slices"

	"github.com/cockroachdb/pebble/v2"

	"github.com/syncd-dev/syncd/proto/ident"
)

// Append is a request to add an entry to a conversation log: a message, a read receipt, a recall,
// a group creation or membership change, or a delivered report. It is carried inside a Raft
// command.
//
// A KindDelivered request is the server's delivery reporter's, never a client's: it moves the
// Sender's delivered mark to ReadUpTo (clamped to the head) and writes no dedup record (it needs
// no ClientMsgID): a report that does not move the mark is a NoOp that writes nothing, so a
// repeated report changes nothing. Its entry goes to both members of a direct conversation, to
// the senders of the messages it covers in a group of at most StatusFanoutLimit members, and
// nowhere in a larger group: there it writes no entry (NoOp) but moves the mark and the counts
// ([Shard.Receipts]).
type Append struct {
	Conv        string
	Sender      string
	ClientMsgID string // chosen by the client; the dedup key is (Sender, ClientMsgID, Kind); none for KindDelivered
	Kind        Kind
	Body        []byte   // KindMessage, KindEdit (the new body)
	ReadUpTo    Position // KindReceipt, KindDelivered
	Target      MsgID    // KindRecall, KindEdit, KindReaction
	Reaction    string   // KindReaction: at most MaxReactionLen bytes of printable UTF-8
	Remove      bool     // KindReaction: take Reaction off instead of putting it on
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
	// StatusFanoutLimit is the largest group whose KindDelivered entries are written (to the
	// senders concerned); a larger group's delivered marks only move its counts. Zero means
	// DefaultStatusFanoutLimit. It travels in the command like MaxGroupSize.
	StatusFanoutLimit int64
	// LargeGroupThreshold is the most members a group may have and still be served by write
	// diffusion (an entry per member's log); a creation or addition that takes a group past it
	// makes it large for good (logMeta.Large, read diffusion: see [Entry.Source]). Zero means
	// DefaultLargeGroupThreshold. It travels in the command like MaxGroupSize.
	LargeGroupThreshold int64
}

// Defaults for the windows of an [Append].
const (
	DefaultDedupWindow  = int64(24 * 3600 * 1e9) // mobile apps retry after being killed for hours
	DefaultRecallWindow = int64(2 * 60 * 1e9)
	// DefaultMaxGroupSize is the group size limit when the request names none: large groups
	// cost no write per member per message (read diffusion), so it is the size Telegram and
	// WuKongIM serve.
	DefaultMaxGroupSize = 100_000
	// DefaultLargeGroupThreshold is the LargeGroupThreshold when the request names none: above
	// it a message's write per member outweighs a follower per group in members' streams.
	DefaultLargeGroupThreshold = 1000
	// DefaultStatusFanoutLimit is the largest group whose delivered reports become entries when
	// the request names no limit: beyond it, one entry per member per report round would be a
	// fan-out of n² per round for a group whose members all read.
	DefaultStatusFanoutLimit = 100
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
	// NoOp: accepted, no entry written: a receipt or a delivered report that did not move the
	// mark, a membership change that changed nothing, or a delivered report that moved the
	// mark of a member of a group with nobody to tell (larger than StatusFanoutLimit, or no
	// other sender's message covered).
	NoOp bool
}

// Append applies req, stamped st. See [Append] for the request and the sentinel errors in
// errors.go for the refusals.
func (t *Tx) Append(st Stamp, req *Append) (AppendResult, error) {
	if err := req.validate(); err != nil {
		return AppendResult{}, err
	}
	if req.Kind == KindDelivered {
		return t.appendDelivered(st, req)
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
	plan, err := t.plan(st, req)
	if err != nil {
		return AppendResult{}, err
	}

	// 3. Writes.
	res, err := t.writeAppend(st, req, &plan, suffix)
	if err != nil {
		return AppendResult{}, err
	}
	if err := t.writeDedup(st, req, suffix, hash, res, expired); err != nil {
		return AppendResult{}, err
	}
	if st.Index%dedupGCEvery == 0 {
		return res, t.gcDedup(st)
	}
	return res, nil
}

// appendDelivered applies a KindDelivered request: like any append but without a dedup record,
// which it needs none of (see [Append]).
func (t *Tx) appendDelivered(st Stamp, req *Append) (AppendResult, error) {
	plan, err := t.plan(st, req)
	if err != nil {
		return AppendResult{}, err
	}
	res, err := t.writeAppend(st, req, &plan, nil)
	if err == nil && st.Index%dedupGCEvery == 0 {
		err = t.gcDedup(st) // the rule is the Raft index's, whatever the command
	}
	return res, err
}

// plan checks req against the conversation and decides what it writes, before any write.
func (t *Tx) plan(st Stamp, req *Append) (appendPlan, error) {
	if err := t.checkConvNotMoving(req.Conv); err != nil {
		return appendPlan{}, err
	}
	meta, exists, err := t.logMeta(t.s.k.conv(req.Conv))
	if err != nil {
		return appendPlan{}, err
	}
	plan := appendPlan{meta: meta}
	return plan, t.planAppend(st, req, exists, &plan)
}

// writeAppend makes the writes plan decided for req: an entry, or only the sender's mark, or
// nothing. dedup is the suffix of the request's dedup record (nil: it has none).
func (t *Tx) writeAppend(st Stamp, req *Append, plan *appendPlan, dedup []byte) (AppendResult, error) {
	res := AppendResult{Time: st.Time, Epoch: plan.meta.Epoch}
	switch {
	case plan.noop:
		res.NoOp = true
	case plan.silent, plan.private:
		res.NoOp = plan.silent
		if err := t.writeMembers(req, plan, 0); err != nil {
			return AppendResult{}, err
		}
		if err := t.putLogMeta(t.s.k.conv(req.Conv), plan.meta); err != nil {
			return AppendResult{}, err
		}
		if plan.private {
			// A large group's receipt: the reader's own devices learn it from an entry that
			// has no conversation position (ConvSeq 0) and goes to the reader's log only.
			res.MsgID = MsgID{Shard: t.s.id, Index: st.Index}
			e := Entry{Kind: req.Kind, MsgID: res.MsgID, Conv: req.Conv, Sender: req.Sender, Time: st.Time, ReadUpTo: req.ReadUpTo}
			if err := t.appendOutbox(outboxRecord{Recipients: []string{req.Sender}, Entry: e}); err != nil {
				return AppendResult{}, err
			}
		}
	default:
		res.MsgID = MsgID{Shard: t.s.id, Index: st.Index}
		res.ConvSeq = plan.meta.Head + 1
		plan.meta.Head = res.ConvSeq
		if err := t.writeConvEntry(st, req, plan, res, dedup); err != nil {
			return AppendResult{}, err
		}
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
	readMark   bool     // update the sender's read mark (and its delivered mark with it)
	delivered  bool     // update the sender's delivered mark to upTo
	upTo       Position // KindDelivered: the new delivered mark, the request's clamped to the head
	demoteSelf bool     // the sender hands ownership over and becomes an admin
	recall     *msgRef  // the target's ref, to mark recalled
	recipients []string
	noop       bool // nothing is written
	silent     bool // only the sender's mark moves: no entry (a delivered report nobody is told of)
	private    bool // a large group's receipt: the marks move, and an entry without a conv_seq goes to the reader's log
	source     bool // a membership entry starting or ending its recipients' following of a large group (Entry.Source)
}

func (t *Tx) planAppend(st Stamp, req *Append, exists bool, p *appendPlan) error {
	if req.Kind == KindGroupCreate {
		if exists {
			return ErrConversationExists
		}
		if ident.ReservedForDirect(req.Conv) {
			return invalidf("group id %q has the shape of a direct conversation id (d:… or dh:…), which only a direct conversation may have", req.Conv)
		}
		// Histograms are kept from the creation on (marks.go).
		p.meta = logMeta{Kind: ConvGroup, Epoch: newEpoch(st), First: 1, Counted: true}
		p.add = sortedUnique(append([]string{req.Sender}, req.Members...))
		if err := checkGroupSize(req, len(p.add)); err != nil {
			return err
		}
		p.meta.MemberCount = len(p.add)
		p.recipients = p.add
		p.meta.Large = isLarge(req, len(p.add))
		p.source = p.meta.Large // every member starts following
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
	if req.Kind == KindReceipt || req.Kind == KindDelivered {
		// Marks: a large group's member list is read only when the recipients need it.
		ms := &memberSet{t: t, conv: req.Conv, meta: &p.meta}
		if req.Kind == KindReceipt {
			return t.planReceipt(req, ms, p)
		}
		return t.planDelivered(req, ms, p)
	}
	if p.meta.Large {
		return t.planLarge(st, req, p)
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
	case KindRecall, KindEdit, KindReaction:
		if err := t.planTargeted(st, req, p); err != nil {
			return err
		}
		p.recipients = members
	case KindMemberAdd, KindMemberRemove, KindRoleChange:
		if p.meta.Kind != ConvGroup {
			return ErrNotGroup
		}
		has := func(uid string) (bool, error) { return isMember(members, uid), nil }
		if err := t.planMembership(req, has, len(members), p); err != nil || p.noop {
			return err
		}
		p.meta.MemberCount = len(members) + len(p.add) - len(p.remove)
		// Removed members learn of their removal; added members see the add.
		p.recipients = sortedUnique(append(slices.Clone(members), p.add...))
		if req.Kind == KindMemberAdd && isLarge(req, p.meta.MemberCount) {
			// The switch to read diffusion: this add goes to every member, each of whom
			// follows the conversation log from it on. The one write per member it costs is
			// paid once: a large group stays large.
			p.meta.Large, p.source = true, true
		}
	}
	return nil
}

// isLarge reports whether a group of n members is past req's LargeGroupThreshold.
func isLarge(req *Append, n int) bool {
	return int64(n) > cmp.Or(req.LargeGroupThreshold, DefaultLargeGroupThreshold)
}

// planLarge plans a message, recall or membership change of a large group: its entries are read
// from the conversation log by the members' devices (Entry.Source), so the outbox record goes to
// the users whose following starts or ends with it, if any; and nothing reads the member list,
// so that what a request costs does not grow with the group.
func (t *Tx) planLarge(st Stamp, req *Append, p *appendPlan) error {
	ms := &memberSet{t: t, conv: req.Conv, meta: &p.meta}
	if _, err := ms.self(req.Sender); err != nil {
		return err
	}
	switch req.Kind {
	case KindMessage:
	case KindRecall, KindEdit, KindReaction:
		if err := t.planTargeted(st, req, p); err != nil {
			return err
		}
	case KindMemberAdd, KindMemberRemove, KindRoleChange:
		n, err := ms.count()
		if err != nil {
			return err
		}
		if err := t.planMembership(req, ms.has, n, p); err != nil || p.noop {
			return err
		}
		p.meta.MemberCount = n + len(p.add) - len(p.remove)
		p.recipients = sortedUnique(append(slices.Clone(p.add), p.remove...))
		p.source = len(p.recipients) > 0 // a role change goes to nobody's log
	}
	return nil
}

// planMembership decides a KindMemberAdd, KindMemberRemove or KindRoleChange on a group of n
// members, has telling who is one, checking the sender's rights (see [Role]): owners and admins add; a member may be
// removed by one ranked above it, or leave (the owner only last, or after handing ownership
// over); only the owner gives roles, and giving ownership away makes the owner an admin.
func (t *Tx) planMembership(req *Append, has func(uid string) (bool, error), n int, p *appendPlan) error {
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
			if in, err := has(m); err != nil {
				return err
			} else if !in {
				p.add = append(p.add, m)
			}
		}
		if err := checkGroupSize(req, n+len(p.add)); err != nil {
			return err
		}
	case KindMemberRemove:
		for _, m := range named {
			if in, err := has(m); err != nil {
				return err
			} else if !in {
				continue
			}
			if m == req.Sender {
				if self.Role == RoleOwner && n > 1 {
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
			if in, err := has(m); err != nil {
				return err
			} else if !in {
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

// isMember reports whether uid is in members, sorted: a binary search, since a membership
// request names up to MaxMembersPerRequest users of a group of up to its size limit.
func isMember(members []string, uid string) bool {
	_, ok := slices.BinarySearch(members, uid)
	return ok
}

// memberSet answers who is a member of a conversation for the mark requests (receipts,
// delivered reports) without reading a group's whole member list unless the recipients need
// it: a mark moves on every report round of every member, and a group may have many thousands.
type memberSet struct {
	t    *Tx
	conv string
	meta *logMeta // the conversation's; a group's MemberCount is set here if it lacked one
	all  []string // a group's members, once read
}

// record returns uid's member record; ok is false if uid is not a member.
func (ms *memberSet) record(uid string) (member, bool, error) {
	v, ok, err := getValue(ms.t.b, ms.t.s.k.member(ms.conv, uid))
	if err != nil || !ok {
		return member{}, false, err
	}
	m, err := decodeMember(v)
	return m, err == nil, err
}

// has reports whether uid is a member.
func (ms *memberSet) has(uid string) (bool, error) {
	if ms.meta.Kind == ConvDirect {
		return slices.Contains(ms.meta.Members, uid), nil
	}
	if ms.all != nil {
		return isMember(ms.all, uid), nil
	}
	_, ok, err := ms.record(uid)
	return ok, err
}

// list returns every member, sorted.
func (ms *memberSet) list() ([]string, error) {
	if ms.meta.Kind == ConvDirect {
		return ms.meta.Members, nil
	}
	if ms.all == nil {
		all, err := ms.t.members(ms.conv)
		if err != nil {
			return nil, err
		}
		ms.all = all
		ms.meta.MemberCount = len(all) // kept from here on (values written before lack it)
	}
	return ms.all, nil
}

// count returns a group's number of members, counting them once if its meta predates the count.
func (ms *memberSet) count() (int, error) {
	if ms.meta.Kind == ConvGroup && ms.meta.MemberCount == 0 {
		if _, err := ms.list(); err != nil {
			return 0, err
		}
	}
	return ms.meta.MemberCount, nil
}

// self returns the sender's member record, ErrNotMember if it is none.
func (ms *memberSet) self(uid string) (member, error) {
	if ms.meta.Kind == ConvDirect && !slices.Contains(ms.meta.Members, uid) {
		return member{}, ErrNotMember
	}
	m, ok, err := ms.record(uid)
	if err == nil && !ok {
		if ms.meta.Kind == ConvGroup {
			return member{}, ErrNotMember
		}
		m.Role = RoleMember // a direct member whose record is missing reads as a fresh one
	}
	return m, err
}

func (t *Tx) planReceipt(req *Append, ms *memberSet, p *appendPlan) error {
	m, err := ms.self(req.Sender)
	if err != nil {
		return err
	}
	if _, err := ms.count(); err != nil {
		return err
	}
	head := p.meta.Head
	if req.ReadUpTo == 0 || req.ReadUpTo > head {
		return invalidf("receipt reads up to %d, conversation head is %d", req.ReadUpTo, head)
	}
	p.self = m
	if req.ReadUpTo <= m.ReadMark {
		p.noop = true
		return nil
	}
	p.readMark = true
	if p.meta.Large {
		p.private = true // a receipt in the log every member follows would be O(members²)
		return nil
	}
	if p.meta.Kind == ConvDirect || req.ReadUpTo-m.ReadMark > receiptScanLimit {
		p.recipients, err = ms.list()
		return err
	}
	// Group: the reader's own devices and the senders whose messages were just read.
	senders, err := t.sendersIn(req, ms, max(m.ReadMark+1, p.meta.First), req.ReadUpTo)
	p.recipients = sortedUnique(append(senders, req.Sender))
	return err
}

// planDelivered plans a KindDelivered report (see [Append]).
func (t *Tx) planDelivered(req *Append, ms *memberSet, p *appendPlan) error {
	m, err := ms.self(req.Sender)
	if err != nil {
		return err
	}
	n, err := ms.count()
	if err != nil {
		return err
	}
	p.self, p.upTo = m, min(req.ReadUpTo, p.meta.Head)
	if p.upTo <= m.delivered() {
		p.noop = true
		return nil
	}
	p.delivered = true
	if p.meta.Kind == ConvDirect {
		// Both members: each member's log keeps every conv_seq of a direct conversation.
		p.recipients = p.meta.Members
		return nil
	}
	if p.meta.Large || int64(n) > cmp.Or(req.StatusFanoutLimit, DefaultStatusFanoutLimit) {
		p.silent = true
		return nil
	}
	// The senders of the messages now delivered, counted from the member's join: it saw
	// nothing before.
	from := max(m.delivered(), m.Joined) + 1
	if from > p.upTo {
		p.silent = true // the mark moves within what came before the join: nothing to tell
		return nil
	}
	if p.upTo-from+1 > receiptScanLimit {
		p.recipients, err = ms.list()
		return err
	}
	senders, err := t.sendersIn(req, ms, max(from, p.meta.First), p.upTo)
	if err != nil {
		return err
	}
	p.recipients = sortedUnique(slices.DeleteFunc(senders, func(u string) bool { return u == req.Sender }))
	p.silent = len(p.recipients) == 0
	return nil
}

// sendersIn returns the senders of the KindMessage entries of req's conversation at from..to
// (at most receiptScanLimit of them) who are members still.
func (t *Tx) sendersIn(req *Append, ms *memberSet, from, to Position) ([]string, error) {
	if from > to {
		return nil, nil
	}
	var out []string
	err := scanRange(t.b, t.s.k.convEntryPrefix(req.Conv), from, to, receiptScanLimit, 1<<62, func(val []byte, seq Position) (int, bool, error) {
		// The kind is the second byte of every entry version: a membership entry of a large
		// group (a thousand ids) is not decoded only to be passed over.
		if len(val) < 2 || Kind(val[1]) != KindMessage {
			return 1, true, nil
		}
		e, err := decodeEntry(val, seq)
		if err != nil || slices.Contains(out, e.Sender) {
			return 1, true, err
		}
		ok, err := ms.has(e.Sender)
		if ok {
			out = append(out, e.Sender)
		}
		return 1, true, err
	})
	return out, err
}

// planTargeted checks a recall, edit or reaction against the message it names: a message of
// this conversation, still retained and not recalled; recalled and edited by its author only,
// recalled within the recall window. A recall is planned to mark the message recalled.
func (t *Tx) planTargeted(st Stamp, req *Append, p *appendPlan) error {
	ref, target, err := t.targetMessage(req)
	if err != nil {
		return err
	}
	switch {
	case req.Kind != KindReaction && target.Sender != req.Sender:
		return ErrNotSender
	case ref.Recalled:
		return ErrAlreadyRecalled
	case req.Kind == KindRecall && st.Time-target.Time > cmp.Or(req.RecallWindow, DefaultRecallWindow):
		return ErrRecallWindow
	}
	if req.Kind == KindRecall {
		p.recall = &ref
	}
	return nil
}

// targetMessage returns the msg_id index entry and the entry of req's Target, ErrNoMessage
// unless it is a message of req's conversation still in its log.
func (t *Tx) targetMessage(req *Append) (msgRef, Entry, error) {
	v, ok, err := getValue(t.b, t.s.k.msgIndex(req.Target))
	if err != nil {
		return msgRef{}, Entry{}, err
	}
	if !ok {
		return msgRef{}, Entry{}, ErrNoMessage
	}
	ref, err := decodeMsgRef(v)
	if err != nil {
		return msgRef{}, Entry{}, err
	}
	if ref.Conv != req.Conv {
		return msgRef{}, Entry{}, ErrNoMessage
	}
	ev, ok, err := getValue(t.b, t.s.k.convEntry(ref.Conv, ref.ConvSeq))
	if err != nil {
		return msgRef{}, Entry{}, err
	}
	if !ok {
		return msgRef{}, Entry{}, ErrNoMessage // trimmed from the history
	}
	target, err := decodeEntry(ev, ref.ConvSeq)
	if err != nil {
		return msgRef{}, Entry{}, err
	}
	if target.Kind != KindMessage {
		return msgRef{}, Entry{}, ErrNoMessage
	}
	return ref, target, nil
}

// writeConvEntry writes the entry res names, with the membership, read mark and recall changes
// of p; dedup is the suffix of the request's dedup record, which the msg_id index keeps.
func (t *Tx) writeConvEntry(st Stamp, req *Append, p *appendPlan, res AppendResult, dedup []byte) error {
	k := t.s.k
	e := Entry{
		Kind: req.Kind, MsgID: res.MsgID, Conv: req.Conv, ConvSeq: res.ConvSeq,
		Sender: req.Sender, Time: st.Time, Body: req.Body, ReadUpTo: req.ReadUpTo, Target: req.Target,
		Reaction: req.Reaction, Remove: req.Remove,
	}
	switch req.Kind {
	case KindGroupCreate, KindMemberAdd:
		e.Members = p.add
	case KindMemberRemove:
		e.Members = p.remove
	case KindRoleChange:
		e.Members, e.Role = p.roles, req.Role
	case KindDelivered:
		e.ReadUpTo = p.upTo
	}
	e.Source = p.source
	if err := t.writeMembers(req, p, res.ConvSeq); err != nil {
		return err
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
	if p.meta.Large { // its members' devices read it from this log: wake them
		if t.touchedConvs == nil {
			t.touchedConvs = map[string]struct{}{}
		}
		t.touchedConvs[req.Conv] = struct{}{}
	}
	if len(p.recipients) == 0 {
		return nil // a large group's message: its members' devices read it from this log
	}
	// The outbox record keeps the whole member list, once; each destination gets only the ids of
	// its own recipients (Entry.CopyFor) and user logs only a count (see MaxInlineMembers).
	return t.appendOutbox(outboxRecord{Recipients: p.recipients, Entry: e})
}

// writeMembers writes the member records p changes, the entry at seq adding members (their
// join position), and keeps a group's histograms with them (marks.go): built first if the
// group predates them, then moved by each member's change.
func (t *Tx) writeMembers(req *Append, p *appendPlan, seq Position) error {
	k := t.s.k
	var h histDelta
	counted := p.meta.Kind == ConvGroup
	if counted && !p.meta.Counted && (len(p.add) > 0 || len(p.remove) > 0 || p.readMark || p.delivered) {
		// Before any member record changes: the build reads them as they were.
		if err := t.buildCounts(req.Conv, &h); err != nil {
			return err
		}
		p.meta.Counted = true
	}
	put := func(uid string, old *member, now member) error {
		if counted {
			if old != nil {
				h.member(*old, -1)
			}
			h.member(now, 1)
		}
		return t.set(k.member(req.Conv, uid), now.encode())
	}
	for _, m := range p.add {
		role := RoleMember
		if req.Kind == KindGroupCreate && m == req.Sender {
			role = RoleOwner // the creator owns the group
		}
		joined := seq
		if p.meta.Kind == ConvDirect {
			joined = 0 // a direct conversation's members are in it from its first entry
		}
		if err := put(m, nil, member{Role: role, Joined: joined}); err != nil {
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
		if counted {
			them, err := t.member(req.Conv, m)
			if err != nil {
				return err
			}
			h.member(them, -1)
		}
		if err := t.del(k.member(req.Conv, m)); err != nil {
			return err
		}
	}
	if p.readMark || p.delivered {
		old, now := p.self, p.self
		if p.readMark {
			// Read implies delivered: a device that read the messages stored them.
			now.ReadMark, now.DeliveredMark = req.ReadUpTo, max(now.DeliveredMark, req.ReadUpTo)
		} else {
			now.DeliveredMark = p.upTo
		}
		if err := put(req.Sender, &old, now); err != nil {
			return err
		}
	}
	return t.flushCounts(req.Conv, &h)
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
	case !ValidID(req.ClientMsgID) && !(req.Kind == KindDelivered && req.ClientMsgID == ""):
		return invalidf("bad client_msg_id %q", req.ClientMsgID)
	case !req.Kind.Valid():
		return invalidf("unknown entry kind %d", req.Kind)
	case len(req.Members) > MaxMembersPerRequest:
		return invalidf("%d members in one request, at most %d", len(req.Members), MaxMembersPerRequest)
	case req.DedupWindow < 0 || req.RecallWindow < 0:
		return invalidf("negative window")
	case req.Kind.Targeted() && req.Target.IsZero():
		return invalidf("%s without a target msg_id", req.Kind)
	case req.Kind == KindReaction && !ident.ValidReaction(req.Reaction):
		return invalidf("bad reaction %q: 1 to %d bytes of printable UTF-8, no spaces", req.Reaction, ident.MaxReactionLen)
	case req.Kind != KindReaction && (req.Reaction != "" || req.Remove):
		return invalidf("a reaction in a %s request", req.Kind)
	case (req.Kind == KindEdit || req.Kind == KindReaction) && len(req.Members) > 0:
		return invalidf("a %s names no members", req.Kind)
	case (req.Kind == KindMemberAdd || req.Kind == KindMemberRemove || req.Kind == KindRoleChange) && len(req.Members) == 0:
		return invalidf("%s names no members", req.Kind)
	case req.Kind == KindRoleChange && !req.Role.Valid():
		return invalidf("unknown role %d", req.Role)
	case req.Kind != KindRoleChange && req.Role != 0:
		return invalidf("a role in a %s request", req.Kind)
	case req.MaxGroupSize < 0 || req.StatusFanoutLimit < 0:
		return invalidf("negative group size or status fan-out limit")
	case req.Kind == KindDelivered && (req.ReadUpTo == 0 || len(req.Members) > 0):
		return invalidf("a delivered report names a position (not %d) and no members", req.ReadUpTo)
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
	if req.Kind == KindReaction { // nor do kinds without a reaction
		e.str(req.Reaction)
		e.u8(boolByte(req.Remove))
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
