// Property test (pgregory.net/rapid): random command sequences against a simple in-memory model of
// conversations, dedup records, the outbox and user logs. Each command is applied, as a state
// machine would, to two shards on separate Pebble databases. It proves:
//
//   - G2: every accepted append gets conv_seq = head+1 of its conversation (contiguous from 1) and
//     a msg_id never seen before; after the whole outbox is delivered, every user log is
//     contiguous from 1.
//   - G4: a resend within the dedup window returns exactly the original result marked duplicate
//     and writes nothing; a reused key with another payload is ErrConflict and writes nothing;
//     after the window the key is free again.
//   - G5/G6: delivering the outbox in random batches (with redeliveries, overlaps and batches
//     that skip ahead) puts every conversation entry into the log of each of its recipients
//     exactly once, per conversation in conv_seq order, and nowhere else.
//   - G7 and the Tx contract: every rejected command (and every duplicate or redelivery) leaves
//     StateChecksum unchanged; replaying an applied Raft index opens no Tx and changes nothing.
//   - Determinism: both shards return identical results and end with identical StateChecksums.
package log

import (
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"testing"

	"pgregory.net/rapid"
)

var (
	propUsers = []string{"u1", "u2", "u3", "u4"}
	propConvs = []string{"g1", "g2", "d:u1:u2"} // the last is direct between u1 and u2
	propCmids = []string{"c0", "c1", "c2", "c3"}
	propBody  = []string{"x", "y"}
)

const (
	propDedupWindow  = 1000
	propRecallWindow = 500
)

func TestPropertyModel(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		w := newWorld(rt)
		w.setup()
		steps := rapid.IntRange(10, 150).Draw(rt, "steps")
		for i := 0; i < steps; i++ {
			w.now += rapid.Int64Range(0, 200).Draw(rt, "dt")
			switch op := rapid.IntRange(0, 12).Draw(rt, "op"); {
			case op <= 3:
				w.send(w.randomMessage())
			case op == 4:
				if len(w.history) > 0 {
					w.send(w.history[rapid.IntRange(0, len(w.history)-1).Draw(rt, "resend")])
				}
			case op == 5:
				w.send(w.randomReceipt())
			case op == 6:
				w.send(w.randomRecall())
			case op == 7:
				w.send(w.randomMembership())
			case op == 8 || op == 9:
				w.deliverRandom()
			case op == 10:
				w.trimOutbox()
			case op == 11:
				w.replay()
			default:
				w.now += rapid.Int64Range(propDedupWindow/2, 3*propDedupWindow).Draw(rt, "jump")
			}
		}
		w.deliverAll()
		w.check()
	})
}

// model is the reference: what the shard should hold, computed naively.
type model struct {
	convs  map[string]*mConv
	dedup  map[string]mDedup
	msgs   map[MsgID]mRef
	outbox []mRef // outbox position i+1
	mark   uint64 // source mark of the shard's own stream
	logs   map[string][]mRef
}

type mConv struct {
	kind     ConvKind
	epoch    Epoch
	members  []string // sorted
	entries  []mEntry // conv_seq i+1
	readMark map[string]Position
	roles    map[string]Role // groups: every member's role
}

type mEntry struct {
	id         MsgID
	kind       Kind
	sender     string
	time       int64
	recalled   bool
	recipients []string
}

type mDedup struct {
	payload string
	expires int64
	res     AppendResult
}

type mRef struct {
	conv string
	seq  Position
}

func (m *model) entry(r mRef) *mEntry { return &m.convs[r.conv].entries[r.seq-1] }

// append predicts the outcome of req at st and, when it succeeds, updates the model.
func (m *model) append(st Stamp, req *Append) (AppendResult, error) {
	key := fmt.Sprintf("%s|%s|%d", req.Sender, req.ClientMsgID, req.Kind)
	payload := fmt.Sprintf("%s|%d|%q|%d|%s|%v|%d", req.Conv, req.Kind, req.Body, req.ReadUpTo, req.Target,
		sortedUnique(slices.Clone(req.Members)), req.Role)
	if rec, ok := m.dedup[key]; ok && rec.expires > st.Time {
		if rec.payload != payload {
			return AppendResult{}, ErrConflict
		}
		res := rec.res
		res.Duplicate = true
		return res, nil
	}
	c := m.convs[req.Conv]
	var members, add, remove, recipients []string
	var created *mConv
	noop := false
	var recall *mEntry
	var readMark Position
	roles := map[string]Role{} // role changes, the new owner's predecessor included
	switch {
	case req.Kind == KindGroupCreate:
		if c != nil {
			return AppendResult{}, ErrConversationExists
		}
		if strings.HasPrefix(req.Conv, "d:") {
			return AppendResult{}, ErrInvalid // the shape of a direct conversation's id
		}
		add = sortedUnique(append([]string{req.Sender}, req.Members...))
		created = &mConv{kind: ConvGroup, epoch: Epoch(st.Time), readMark: map[string]Position{}, roles: map[string]Role{}}
		for _, u := range add {
			roles[u] = RoleMember
		}
		roles[req.Sender] = RoleOwner
		recipients = add
	default:
		if c == nil {
			if len(req.Members) != 2 || req.Kind != KindMessage {
				return AppendResult{}, ErrNoConversation
			}
			add = sortedUnique(slices.Clone(req.Members))
			if len(add) != 2 || !slices.Contains(add, req.Sender) || req.Conv != "d:"+add[0]+":"+add[1] {
				return AppendResult{}, ErrInvalid
			}
			created = &mConv{kind: ConvDirect, epoch: Epoch(st.Time), readMark: map[string]Position{}}
			c = created
		}
		members = sortedUnique(append(slices.Clone(c.members), add...))
		if !slices.Contains(members, req.Sender) {
			return AppendResult{}, ErrNotMember
		}
		switch req.Kind {
		case KindMessage:
			recipients = members
		case KindReceipt:
			head := Position(len(c.entries))
			if req.ReadUpTo == 0 || req.ReadUpTo > head {
				return AppendResult{}, ErrInvalid
			}
			mark := c.readMark[req.Sender]
			if req.ReadUpTo <= mark {
				noop = true
				break
			}
			readMark = req.ReadUpTo
			if c.kind == ConvDirect {
				recipients = members
				break
			}
			recipients = []string{req.Sender}
			for seq := mark + 1; seq <= req.ReadUpTo; seq++ {
				e := c.entries[seq-1]
				if e.kind == KindMessage && slices.Contains(members, e.sender) {
					recipients = append(recipients, e.sender)
				}
			}
			recipients = sortedUnique(recipients)
		case KindRecall:
			ref, ok := m.msgs[req.Target]
			if !ok || ref.conv != req.Conv {
				return AppendResult{}, ErrNoMessage
			}
			target := m.entry(ref)
			switch {
			case target.kind != KindMessage:
				return AppendResult{}, ErrNoMessage
			case target.sender != req.Sender:
				return AppendResult{}, ErrNotSender
			case target.recalled:
				return AppendResult{}, ErrAlreadyRecalled
			case st.Time-target.time > req.RecallWindow:
				return AppendResult{}, ErrRecallWindow
			}
			recall = target
			recipients = members
		case KindMemberAdd, KindMemberRemove, KindRoleChange:
			if c.kind != ConvGroup {
				return AppendResult{}, ErrNotGroup
			}
			mine := c.roles[req.Sender]
			named := sortedUnique(slices.Clone(req.Members))
			switch {
			case req.Kind == KindMemberAdd && mine == RoleMember:
				return AppendResult{}, ErrNotPermitted
			case req.Kind == KindRoleChange && mine != RoleOwner:
				return AppendResult{}, ErrNotPermitted
			case req.Kind == KindRoleChange && (slices.Contains(named, req.Sender) || (req.Role == RoleOwner && len(named) != 1)):
				return AppendResult{}, ErrInvalid
			}
			for _, u := range named {
				in := slices.Contains(members, u)
				switch {
				case req.Kind == KindMemberAdd && !in:
					add = append(add, u)
				case req.Kind == KindMemberRemove && in && u == req.Sender:
					if mine == RoleOwner && len(members) > 1 {
						return AppendResult{}, ErrNotPermitted
					}
					remove = append(remove, u)
				case req.Kind == KindMemberRemove && in:
					if c.roles[u] >= mine {
						return AppendResult{}, ErrNotPermitted
					}
					remove = append(remove, u)
				case req.Kind == KindRoleChange && in && c.roles[u] != req.Role:
					roles[u] = req.Role
				}
			}
			if len(add)+len(members) > DefaultMaxGroupSize {
				return AppendResult{}, ErrGroupFull
			}
			for _, u := range add {
				roles[u] = RoleMember
			}
			if req.Role == RoleOwner && len(roles) == 1 {
				roles[req.Sender] = RoleAdmin
			}
			noop = len(add) == 0 && len(remove) == 0 && len(roles) == 0
			recipients = sortedUnique(append(slices.Clone(members), add...))
		}
	}

	// Accepted: update the model.
	if created != nil {
		c = created
		m.convs[req.Conv] = c
	}
	res := AppendResult{Time: st.Time, Epoch: c.epoch, NoOp: noop}
	if !noop {
		res.MsgID = MsgID{Shard: testShardID, Index: st.Index}
		res.ConvSeq = Position(len(c.entries) + 1)
		for _, u := range add {
			c.readMark[u] = 0
		}
		for _, u := range remove {
			delete(c.readMark, u)
			delete(c.roles, u)
		}
		maps.Copy(c.roles, roles)
		c.members = sortedUnique(append(slices.DeleteFunc(slices.Clone(c.members),
			func(u string) bool { return slices.Contains(remove, u) }), add...))
		if readMark != 0 {
			c.readMark[req.Sender] = readMark
		}
		if recall != nil {
			recall.recalled = true
		}
		c.entries = append(c.entries, mEntry{id: res.MsgID, kind: req.Kind, sender: req.Sender,
			time: st.Time, recipients: recipients})
		ref := mRef{conv: req.Conv, seq: res.ConvSeq}
		m.msgs[res.MsgID] = ref
		m.outbox = append(m.outbox, ref)
	}
	m.dedup[key] = mDedup{payload: payload, expires: st.Time + req.DedupWindow, res: res}
	return res, nil
}

// world runs commands on two shards and the model.
type world struct {
	t       *rapid.T
	shards  [2]*Shard
	index   uint64
	now     int64
	m       *model
	history []Append
	acked   map[MsgID]bool
}

func newWorld(t *rapid.T) *world {
	return &world{
		t:      t,
		shards: [2]*Shard{newMemShard(t, testShardID), newMemShard(t, testShardID)},
		now:    1_000_000,
		m: &model{convs: map[string]*mConv{}, dedup: map[string]mDedup{}, msgs: map[MsgID]mRef{},
			logs: map[string][]mRef{}},
		acked: map[MsgID]bool{},
	}
}

// execTx applies op as the next Raft index to both shards and returns shard 0's outcome after
// checking that shard 1's is identical. If unchanged says the outcome must not change the state,
// the op's Tx is committed alone and StateChecksum compared before and after; the applied index
// then moves in a Tx of its own (the resulting state is the same as with one Tx).
func execTx[R any](w *world, op func(*Tx, Stamp) (R, error), unchanged func(R, error) bool) (R, error) {
	w.t.Helper()
	w.index++
	st := Stamp{Index: w.index, Time: w.now}
	var outs [2]R
	var errs [2]error
	for i, s := range w.shards {
		before := stateSum(w.t, s)
		tx := s.Begin()
		outs[i], errs[i] = op(tx, st)
		if unchanged(outs[i], errs[i]) {
			if err := tx.Commit(false); err != nil {
				w.t.Fatalf("commit: %v", err)
			}
			if after := stateSum(w.t, s); after != before {
				w.t.Fatalf("index %d: outcome (%+v, %v) changed the state", st.Index, outs[i], errs[i])
			}
			tx = s.Begin()
		}
		if err := tx.SetApplied(st.Index); err != nil {
			w.t.Fatalf("set applied: %v", err)
		}
		if err := tx.Commit(false); err != nil {
			w.t.Fatalf("commit: %v", err)
		}
	}
	if !reflect.DeepEqual(outs[0], outs[1]) || fmt.Sprint(errs[0]) != fmt.Sprint(errs[1]) {
		w.t.Fatalf("index %d: shards disagree: (%+v, %v) vs (%+v, %v)", st.Index, outs[0], errs[0], outs[1], errs[1])
	}
	return outs[0], errs[0]
}

func (w *world) send(req Append) {
	w.history = append(w.history, req)
	st := Stamp{Index: w.index + 1, Time: w.now}
	want, wantErr := w.m.append(st, &req)
	got, err := execTx(w, func(tx *Tx, st Stamp) (AppendResult, error) {
		r := req // each shard gets its own copy of the request
		return tx.Append(st, &r)
	}, func(r AppendResult, err error) bool { return err != nil || r.Duplicate })
	if wantErr != nil {
		if !errors.Is(err, wantErr) {
			w.t.Fatalf("append %+v at %+v: got (%+v, %v), want error %v", req, st, got, err, wantErr)
		}
		return
	}
	if err != nil || got != want {
		w.t.Fatalf("append %+v at %+v: got (%+v, %v), want %+v", req, st, got, err, want)
	}
	if got.Duplicate || got.NoOp {
		return
	}
	if w.acked[got.MsgID] {
		w.t.Fatalf("msg_id %s assigned twice", got.MsgID)
	}
	w.acked[got.MsgID] = true
	// The outbox record names the predicted recipients.
	pos := uint64(len(w.m.outbox))
	items, err := w.shards[0].ReadOutbox(pos, 1)
	if err != nil || len(items) != 1 {
		w.t.Fatalf("read outbox %d: %v, %v", pos, items, err)
	}
	e := w.m.entry(w.m.outbox[pos-1])
	if it := items[0]; it.Entry.MsgID != got.MsgID || it.Entry.ConvSeq != got.ConvSeq ||
		!slices.Equal(it.Recipients, e.recipients) {
		w.t.Fatalf("outbox %d: got %v to %v, want %s/%d to %v", pos, it.Entry.MsgID, it.Recipients,
			got.MsgID, got.ConvSeq, e.recipients)
	}
}

// setup usually starts with the conversations created (by random members), so that most
// random commands reach the interesting checks; sometimes it leaves them for the steps to create.
func (w *world) setup() {
	if rapid.IntRange(0, 4).Draw(w.t, "setup") == 0 {
		return
	}
	for _, g := range []string{"g1", "g2"} {
		req := w.base(KindGroupCreate)
		req.Conv = g
		req.Members = rapid.SliceOfN(rapid.SampledFrom(propUsers), 1, 3).Draw(w.t, "members")
		w.send(req)
	}
	req := w.randomMessage()
	req.Conv, req.Sender, req.Members = "d:u1:u2", "u1", []string{"u1", "u2"}
	w.send(req)
}

func (w *world) draw(gen *rapid.Generator[string], label string) string { return gen.Draw(w.t, label) }

// base draws the common fields; the sender is mostly a member of the conversation.
func (w *world) base(kind Kind) Append {
	req := Append{
		Conv:         w.draw(rapid.SampledFrom(propConvs), "conv"),
		Sender:       w.draw(rapid.SampledFrom(propUsers), "sender"),
		ClientMsgID:  w.draw(rapid.SampledFrom(propCmids), "cmid"),
		Kind:         kind,
		DedupWindow:  propDedupWindow,
		RecallWindow: propRecallWindow,
	}
	if c := w.m.convs[req.Conv]; c != nil && len(c.members) > 0 && rapid.IntRange(0, 3).Draw(w.t, "member") > 0 {
		req.Sender = w.draw(rapid.SampledFrom(c.members), "sender")
	}
	return req
}

func (w *world) randomMessage() Append {
	req := w.base(KindMessage)
	req.Body = []byte(w.draw(rapid.SampledFrom(propBody), "body"))
	if req.Conv == "d:u1:u2" {
		req.Members = []string{"u2", "u1"}
	}
	return req
}

func (w *world) randomReceipt() Append {
	req := w.base(KindReceipt)
	head := 1
	if c := w.m.convs[req.Conv]; c != nil {
		head = len(c.entries)
	}
	req.ReadUpTo = Position(rapid.IntRange(0, head+1).Draw(w.t, "upto"))
	return req
}

func (w *world) randomRecall() Append {
	req := w.base(KindRecall)
	req.Target = MsgID{Shard: testShardID, Index: 1 << 40} // unknown unless replaced
	if n := len(w.m.outbox); n > 0 {
		ref := w.m.outbox[rapid.IntRange(0, n-1).Draw(w.t, "target")]
		e := w.m.entry(ref)
		req.Target = e.id
		if rapid.IntRange(0, 3).Draw(w.t, "own") > 0 {
			req.Conv, req.Sender = ref.conv, e.sender // mostly a recall its sender could make
		}
	}
	return req
}

func (w *world) randomMembership() Append {
	kind := rapid.SampledFrom([]Kind{KindGroupCreate, KindMemberAdd, KindMemberRemove, KindRoleChange}).Draw(w.t, "kind")
	req := w.base(kind)
	req.Members = rapid.SliceOfN(rapid.SampledFrom(propUsers), 0, 3).Draw(w.t, "members")
	if kind == KindRoleChange {
		req.Role = rapid.SampledFrom([]Role{RoleMember, RoleAdmin, RoleOwner}).Draw(w.t, "role")
	}
	if kind != KindGroupCreate && len(req.Members) == 0 {
		req.Members = []string{"u3"}
	}
	return req
}

// deliverRandom delivers a random (prev, last] of the shard's own outbox to itself: often
// overlapping what was applied, sometimes entirely redelivered, sometimes skipping ahead.
func (w *world) deliverRandom() {
	info, err := w.shards[0].Outbox()
	if err != nil {
		w.t.Fatalf("outbox: %v", err)
	}
	mark := w.m.mark
	lo := max(info.First-1, mark-min(mark, 3))
	prev := rapid.Uint64Range(lo, mark+1).Draw(w.t, "prev")
	if prev >= info.Head {
		return
	}
	last := rapid.Uint64Range(prev+1, info.Head).Draw(w.t, "last")
	w.deliver(prev, last)
}

func (w *world) deliver(prev, last uint64) {
	b := outboxBatch(w.t, w.shards[0], prev, last)
	mark := w.m.mark
	want := DeliverResult{Mark: max(mark, last)}
	var wantErr error
	switch {
	case last <= mark:
	case prev > mark:
		want, wantErr = DeliverResult{}, &OutOfOrderError{Source: testShardID, Mark: mark, Prev: prev}
	default:
		for pos := mark + 1; pos <= last; pos++ {
			ref := w.m.outbox[pos-1]
			for _, u := range w.m.entry(ref).recipients {
				w.m.logs[u] = append(w.m.logs[u], ref)
				want.Appended++
			}
		}
		w.m.mark = last
	}
	got, err := execTx(w, func(tx *Tx, st Stamp) (DeliverResult, error) { return tx.Deliver(st, b) },
		func(r DeliverResult, err error) bool { return err != nil || r.Mark == mark })
	if fmt.Sprint(err) != fmt.Sprint(wantErr) || got != want {
		w.t.Fatalf("deliver (%d, %d] at mark %d: got (%+v, %v), want (%+v, %v)", prev, last, mark, got, err, want, wantErr)
	}
}

func (w *world) trimOutbox() {
	upTo := rapid.Uint64Range(0, w.m.mark).Draw(w.t, "trim-outbox")
	_, err := execTx(w, func(tx *Tx, _ Stamp) (struct{}, error) { return struct{}{}, tx.TrimOutbox(upTo) },
		func(struct{}, error) bool { return false })
	if err != nil {
		w.t.Fatalf("trim outbox %d: %v", upTo, err)
	}
}

// replay re-applies an already-applied index: the state machine opens no Tx, nothing changes.
func (w *world) replay() {
	if w.index == 0 {
		return
	}
	idx := rapid.Uint64Range(1, w.index).Draw(w.t, "replay")
	for _, s := range w.shards {
		before := stateSum(w.t, s)
		skipped, _ := apply(w.t, s, Stamp{Index: idx, Time: w.now}, func(*Tx) error {
			w.t.Fatalf("replayed index %d opened a Tx", idx)
			return nil
		})
		if !skipped || stateSum(w.t, s) != before {
			w.t.Fatalf("replay of index %d: skipped=%v, state changed=%v", idx, skipped, stateSum(w.t, s) != before)
		}
	}
}

// deliverAll delivers the rest of the outbox in random chunks.
func (w *world) deliverAll() {
	head := uint64(len(w.m.outbox))
	for w.m.mark < head {
		last := rapid.Uint64Range(w.m.mark+1, head).Draw(w.t, "final-last")
		w.deliver(w.m.mark, last)
	}
}

func (w *world) check() {
	// Determinism: identical state on both shards.
	if a, b := stateSum(w.t, w.shards[0]), stateSum(w.t, w.shards[1]); a != b {
		w.t.Fatalf("shards diverged: %v vs %v", a, b)
	}
	s := w.shards[0]
	// Conversation logs: contiguous from 1, the model's entries.
	for name, c := range w.m.convs {
		info, entries := readAll(w.t, s, name, true)
		if info.First != 1 || int(info.Head) != len(c.entries) || len(entries) != len(c.entries) {
			w.t.Fatalf("conv %s: info %+v with %d entries, model has %d", name, info, len(entries), len(c.entries))
		}
		for i, e := range entries {
			if e.MsgID != c.entries[i].id || e.Sender != c.entries[i].sender || e.Kind != c.entries[i].kind {
				w.t.Fatalf("conv %s/%d: got %s, want %+v", name, i+1, fmtEntry(&e), c.entries[i])
			}
		}
		// Members and their roles, as any member pages them.
		if c.kind == ConvGroup && len(c.members) > 0 {
			page, _, err := s.MembersAfter(name, c.members[0], "", len(propUsers))
			if err != nil {
				w.t.Fatalf("members of %s: %v", name, err)
			}
			got := map[string]Role{}
			for _, m := range page {
				got[m.User] = m.Role
			}
			if !maps.Equal(got, c.roles) {
				w.t.Fatalf("members of %s: %v, model has %v", name, got, c.roles)
			}
		}
	}
	// User logs: contiguous from 1 (readAll checks), exactly the model's log, and for every
	// conversation entry each recipient holds it once, in conv_seq order per conversation.
	for _, u := range propUsers {
		_, entries := readAll(w.t, s, u, false)
		want := w.m.logs[u]
		if len(entries) != len(want) {
			w.t.Fatalf("user %s: %d entries, model has %d", u, len(entries), len(want))
		}
		seen := map[MsgID]bool{}
		lastSeq := map[string]Position{}
		for i, e := range entries {
			ref := want[i]
			if e.Conv != ref.conv || e.ConvSeq != ref.seq || e.MsgID != w.m.entry(ref).id {
				w.t.Fatalf("user %s/%d: got %s, want %s/%d", u, i+1, fmtEntry(&e), ref.conv, ref.seq)
			}
			if seen[e.MsgID] || e.ConvSeq <= lastSeq[e.Conv] {
				w.t.Fatalf("user %s/%d: %s repeated or out of conv order", u, i+1, fmtEntry(&e))
			}
			seen[e.MsgID] = true
			lastSeq[e.Conv] = e.ConvSeq
		}
		for name, c := range w.m.convs {
			for _, e := range c.entries {
				if slices.Contains(e.recipients, u) != seen[e.id] {
					w.t.Fatalf("user %s: entry %s of %s is a recipient=%v but delivered=%v",
						u, e.id, name, slices.Contains(e.recipients, u), seen[e.id])
				}
			}
		}
	}
}
