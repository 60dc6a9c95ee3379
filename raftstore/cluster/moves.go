package cluster

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/syncd-dev/syncd/log"
)

// Moves of users and conversations between shards, as the cluster map records them
// (docs/MOVES.md). The map holds every move in progress with the step it has reached, and the
// overrides that pin moved users and conversations to their shard; the steps themselves are Raft commands of the shards involved (MoveCommand), run by
// the move driver (driver.go) on the node leading the move's source shard. Because
// the step is in the map and every shard's step is idempotent per move, a driver that starts
// after a crash or a leader change resumes where the map says.
//
// Meta commands:
//
//	{"v":1, "op":"move-start",  "move":{"user":"bob","from":2,"to":9}}   the move's id is this command's index
//	{"v":1, "op":"move-start",  "move":{"conv":"g1","from":2,"to":9}}   a conversation: no cutover step
//	{"v":1, "op":"move-start",  "move":{"slots":{"first":2048,"last":4095},"from":2,"to":9}}   every key of those slots on 2
//	{"v":1, "op":"move-start",  "move":{"user":"bot","subs":4,"from":2,"to":2}}   bot's stream split into 4 sub-logs
//	{"v":1, "op":"move-step",   "move_id":41, "step":"fence", "cutovers":{"1":17,…}}
//	{"v":1, "op":"move-switch", "move_id":41}    bob's (or g1's) override → 9, or the slots → 9; the step becomes drop
//	{"v":1, "op":"move-switch", "move_id":41, "split":{"subs":4,"gate":180,"epoch":…}}   a split's: bot is split
//	{"v":1, "op":"move-end",    "move_id":41}    forget the move
//	{"v":1, "op":"move-cancel", "move_id":41}    during the copy only: the step becomes canceled

// Phase names how far a move has come, as the map records it (log.MoveStep is the data-shard
// command that carries a phase out). Phases only move forward, in this order.
type Phase string

// The steps of a move, in order.
const (
	// PhaseCopy: the destination copies the user's log (or the conversation) from the source
	// while it keeps serving.
	PhaseCopy Phase = "copy"
	// PhaseCutover: every shard's outbox switches the user's later records to the destination.
	// A conversation's move skips it.
	PhaseCutover Phase = "cutover"
	// PhaseFence: the source waits for every record routed to it, fences the user, and the
	// destination takes the rest of the log and activates it; then the map switches. For a
	// conversation: the source fences it, and the destination takes the rest and activates it
	// behind the source's fence (its deliveries wait for the source's); then the map switches.
	PhaseFence Phase = "fence"
	// PhaseDrop: the map routes the user to the destination; the source drops its copy (for a
	// conversation, once its fan-out has delivered up to the fence and the barrier is lifted).
	PhaseDrop Phase = "drop"
	// PhaseCanceled: an operator canceled the move during its copy; the destination drops what
	// was copied, then the move is forgotten.
	PhaseCanceled Phase = "canceled"
)

var phases = []Phase{PhaseCopy, PhaseCutover, PhaseFence, PhaseDrop}

// MoveInfo is one move in progress in the cluster map: of a user's log (User), of a
// conversation (Conv) or of a range of hash slots (Slots: every key of the range From holds),
// exactly one of them set. A conversation's move has no cutover step (docs/MOVES.md).
//
// A split of a user's stream into sub-logs (User and Subs) is carried out as a move of the user
// that copies nothing and stays on its shard (To is From): its cutover step switches every
// shard's later records of the user to the sub-logs, its fence step waits for the user's shard
// to have the records before the switch, and its switch records the split (Splits).
type MoveInfo struct {
	ID    uint64        `json:"id"` // the meta index of its start: unique, and the log's MoveID
	User  string        `json:"user,omitempty"`
	Conv  string        `json:"conv,omitempty"`
	Slots *log.SlotSpan `json:"slots,omitempty"`
	Subs  int           `json:"subs,omitempty"` // a split's sub-logs
	From  ShardID       `json:"from"`
	To    ShardID       `json:"to"`
	Step  Phase         `json:"step"`
	// Cutovers holds, once the step is past cutover, every shard's outbox position after which
	// its records of the user go to To.
	Cutovers map[ShardID]uint64 `json:"cutovers,omitempty"`
	// Started is when the move was asked for, the proposer's clock (Unix ns).
	Started int64 `json:"started"`
}

// SplitInfo is how a user's stream is split into sub-logs (docs/MOVES.md, "Sub-logs").
type SplitInfo struct {
	// Subs is the number of sub-logs; sub-log 0 is the user's own log.
	Subs int `json:"subs"`
	// Gate is the position of the user's own log that holds every entry routed to it before the
	// split, under Epoch: a sync stream sends no sub-log's entries before it has sent the own
	// log's up to Gate, so each conversation's entries before the split come before its later
	// ones. A reset of the own log (another epoch) leaves nothing behind the gate.
	Gate  uint64 `json:"gate"`
	Epoch uint64 `json:"epoch"`
}

// Key names what moves, for messages and logs: "user bob", "conversation g1" or "slots 0-99".
func (m *MoveInfo) Key() string {
	switch {
	case m.Subs != 0:
		return fmt.Sprintf("split of user %q", m.User)
	case m.Slots != nil:
		return "slots " + m.Slots.String()
	case m.Conv != "":
		return fmt.Sprintf("conversation %q", m.Conv)
	}
	return fmt.Sprintf("user %q", m.User)
}

// sameKey reports whether m and o move the same user, the same conversation or the same slots.
func (m *MoveInfo) sameKey(o *MoveInfo) bool {
	if (m.Slots == nil) != (o.Slots == nil) {
		return false
	}
	return m.User == o.User && m.Conv == o.Conv && (m.Slots == nil || *m.Slots == *o.Slots)
}

// conflicts says why m cannot start while o is in progress: they move the same key, a key of
// one's range is the other's, or their ranges overlap; "" if they can run together.
func (m *MoveInfo) conflicts(o *MoveInfo) string {
	slot := func(mv *MoveInfo) int {
		if mv.Conv != "" {
			return log.ConvSlot(mv.Conv)
		}
		return log.UserSlot(mv.User)
	}
	switch {
	case m.Subs != 0 || o.Subs != 0:
		// A key moving in before the split installs no split (its first step's Splits lack
		// it), so a split waits for the moves in progress; a move may start during a split,
		// unless it moves the user's own log away from under it.
		if m.Subs != 0 || m.User == o.User || m.Slots != nil && m.Slots.Contains(log.UserSlot(o.User)) {
			return fmt.Sprintf("%s waits for %s to end", m.Key(), o.Key())
		}
	case m.sameKey(o):
		return fmt.Sprintf("%s is already moving", m.Key())
	case m.Slots != nil && o.Slots != nil && m.Slots.Overlaps(*o.Slots):
		return fmt.Sprintf("%s overlap the %s moving", m.Key(), o.Key())
	case m.Slots != nil && o.Slots == nil && m.Slots.Contains(slot(o)),
		m.Slots == nil && o.Slots != nil && o.Slots.Contains(slot(m)):
		return fmt.Sprintf("%s and %s, moving, are in the same slots", m.Key(), o.Key())
	}
	return ""
}

func (m *MoveInfo) clone() *MoveInfo {
	c := *m
	c.Cutovers = maps.Clone(m.Cutovers)
	return &c
}

// checkMoveStart returns why m refuses to start mv (ErrMetaRefused), or nil. It is the
// move-start command's check, and Node.CheckMove's, so that an operator's move to a new shard is
// refused before the shard is added.
func checkMoveStart(m *ClusterMap, mv *MoveInfo) error {
	kinds := 0
	for _, set := range []bool{mv != nil && mv.User != "", mv != nil && mv.Conv != "", mv != nil && mv.Slots != nil} {
		if set {
			kinds++
		}
	}
	split := mv != nil && mv.Subs != 0
	switch {
	case kinds != 1:
		return fmt.Errorf("%w: move-start needs one of a user, a conversation or a slot range", ErrMetaRefused)
	case mv.Slots != nil && !mv.Slots.Valid():
		return fmt.Errorf("%w: slots %s: a range of 0-%d", ErrMetaRefused, mv.Slots, log.NumSlots-1)
	case split && (mv.User == "" || !log.ValidID(mv.User) || mv.Subs < 2 || mv.Subs > log.MaxSubLogs || mv.To != mv.From):
		return fmt.Errorf("%w: a split is of a user's stream into 2 to %d sub-logs, on the user's shard", ErrMetaRefused, log.MaxSubLogs)
	case split && m.Splits[mv.User].Subs != 0:
		return fmt.Errorf("%w: user %q is split into %d sub-logs already", ErrMetaRefused, mv.User, m.Splits[mv.User].Subs)
	case mv.From < 1 || int(mv.From) > m.Shards || mv.To < 1 || int(mv.To) > m.Shards || mv.From == mv.To && !split:
		return fmt.Errorf("%w: move of %s from shard %d to %d: both must be data shards (1-%d), and differ", ErrMetaRefused, mv.Key(), mv.From, mv.To, m.Shards)
	}
	for _, o := range m.Moves {
		if why := mv.conflicts(o); why != "" {
			return fmt.Errorf("%w: %s (move %d, step %s)", ErrMetaRefused, why, o.ID, o.Step)
		}
	}
	if mv.Slots != nil {
		table, err := NewSlotTable(m.Slots)
		if err != nil {
			return fmt.Errorf("%w: %v", ErrMetaRefused, err)
		}
		for i := mv.Slots.First; i <= mv.Slots.Last; i++ {
			if owner := table.Shard(i); owner != mv.From {
				return fmt.Errorf("%w: slot %d is shard %d's, not %d's: move a range one shard owns", ErrMetaRefused, i, owner, mv.From)
			}
		}
	}
	pinned := m.Overrides[mv.User]
	if mv.Conv != "" {
		pinned = m.ConvOverrides[mv.Conv]
	}
	if pinned != 0 && pinned != mv.From {
		return fmt.Errorf("%w: %s is on shard %d, not %d", ErrMetaRefused, mv.Key(), pinned, mv.From)
	}
	if split && pinned == 0 {
		if table, err := NewSlotTable(m.Slots); err == nil && table.Shard(log.UserSlot(mv.User)) != mv.From {
			return fmt.Errorf("%w: user %q is on shard %d, not %d", ErrMetaRefused, mv.User, table.Shard(log.UserSlot(mv.User)), mv.From)
		}
	}
	return nil
}

// applyMove applies the move commands to m; index is the command's Raft index.
func (f *metaFSM) applyMove(m *ClusterMap, c *metaCommand, index uint64) error {
	switch c.Op {
	case "move-start":
		mv := c.Move
		if err := checkMoveStart(m, mv); err != nil {
			return err
		}
		n := &MoveInfo{ID: index, User: mv.User, Conv: mv.Conv, Slots: mv.Slots, Subs: mv.Subs, From: mv.From, To: mv.To, Step: PhaseCopy, Started: mv.Started}
		if m.Moves == nil {
			m.Moves = map[uint64]*MoveInfo{}
		}
		m.Moves[index] = n
	case "move-step":
		mv := m.Moves[c.MoveID]
		if mv == nil {
			return fmt.Errorf("%w: no move %d", ErrMetaRefused, c.MoveID)
		}
		if mv.Step == PhaseCanceled {
			return fmt.Errorf("%w: move %d was canceled", ErrMetaRefused, c.MoveID)
		}
		step := slices.Index(phases, c.Step)
		if step < 0 || c.Step == PhaseDrop {
			return fmt.Errorf("%w: move-step to %q (the drop step comes with move-switch)", ErrMetaRefused, c.Step)
		}
		if mv.Conv != "" && c.Step == PhaseCutover {
			return fmt.Errorf("%w: move %d moves a conversation, which has no cutover step", ErrMetaRefused, c.MoveID)
		}
		if step <= slices.Index(phases, mv.Step) {
			return nil // a step already reached (a driver that was behind): nothing to do
		}
		if mv.Subs != 0 && c.Step == PhaseFence {
			// Every shard must route the user's later records to the sub-logs, a shard added
			// since the cutover step ran included: its driver runs the step again.
			for _, x := range m.DataShards() {
				if _, ok := c.Cutovers[x]; !ok {
					return fmt.Errorf("%w: the %s has not cut over on shard %d", ErrMetaRefused, mv.Key(), x)
				}
			}
		}
		mv = mv.clone()
		mv.Step = c.Step
		if c.Cutovers != nil {
			mv.Cutovers = maps.Clone(c.Cutovers)
		}
		m.Moves[c.MoveID] = mv
	case "move-switch":
		mv := m.Moves[c.MoveID]
		if mv == nil || mv.Step == PhaseDrop {
			return nil // switched before
		}
		if mv.Step != PhaseFence {
			return fmt.Errorf("%w: move %d is at step %s, not fence", ErrMetaRefused, c.MoveID, mv.Step)
		}
		if mv.Slots != nil { // first: a refusal leaves the map as it was
			if err := switchSlots(m, mv); err != nil {
				return err
			}
		}
		if mv.Subs != 0 && (c.Split == nil || c.Split.Subs != mv.Subs) {
			return fmt.Errorf("%w: the switch of the %s must say where its gate is", ErrMetaRefused, mv.Key())
		}
		mv = mv.clone()
		mv.Step = PhaseDrop
		m.Moves[c.MoveID] = mv
		if mv.Subs != 0 {
			if m.Splits == nil {
				m.Splits = map[string]SplitInfo{}
			}
			m.Splits[mv.User] = *c.Split
			break
		}
		if mv.Slots != nil {
			break
		}
		if mv.Conv != "" {
			if m.ConvOverrides == nil {
				m.ConvOverrides = map[string]ShardID{}
			}
			m.ConvOverrides[mv.Conv] = mv.To
			break
		}
		if m.Overrides == nil {
			m.Overrides = map[string]ShardID{}
		}
		m.Overrides[mv.User] = mv.To
	case "move-end":
		if mv := m.Moves[c.MoveID]; mv != nil && mv.Step != PhaseDrop && mv.Step != PhaseCanceled {
			return fmt.Errorf("%w: move %d is at step %s; only a switched or canceled move ends", ErrMetaRefused, c.MoveID, mv.Step)
		}
		delete(m.Moves, c.MoveID)
	case "move-cancel":
		mv := m.Moves[c.MoveID]
		switch {
		case mv == nil:
			return fmt.Errorf("%w: no move %d in progress", ErrMetaRefused, c.MoveID)
		case mv.Step == PhaseCanceled:
			return nil
		case mv.Step != PhaseCopy:
			return fmt.Errorf("%w: move %d is at step %s: a move can be canceled only while it copies (the sources have cut over since)", ErrMetaRefused, c.MoveID, mv.Step)
		}
		mv = mv.clone()
		mv.Step = PhaseCanceled
		m.Moves[c.MoveID] = mv
	}
	return f.setSlots(m)
}

// switchSlots gives mv's slots to its destination in m's slot table, and drops the overrides that
// pinned keys of those slots to its source: they moved with the range, and route by it now. It
// refuses, changing nothing, a slot table that is not whole.
func switchSlots(m *ClusterMap, mv *MoveInfo) error {
	table, err := NewSlotTable(m.Slots)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrMetaRefused, err)
	}
	m.Slots = rangesOf(func(slot int) ShardID {
		if mv.Slots.Contains(slot) {
			return mv.To
		}
		return table.Shard(slot)
	})
	for uid, s := range m.Overrides {
		if s == mv.From && mv.Slots.Contains(log.UserSlot(uid)) {
			delete(m.Overrides, uid)
		}
	}
	for conv, s := range m.ConvOverrides {
		if s == mv.From && mv.Slots.Contains(log.ConvSlot(conv)) {
			delete(m.ConvOverrides, conv)
		}
	}
	return nil
}

// StartMove asks for the user's log or the conversation req names (User or Conv) to move from
// shard req.From to req.To, asked for at req.Started, and returns the move's id. The driver on
// the node leading From carries it out (Driver).
func (c *Cluster) StartMove(ctx context.Context, req MoveInfo) (uint64, error) {
	if err := c.propose(ctx, metaCommand{Op: "move-start", Move: &req}); err != nil {
		return 0, err
	}
	// Committed; this node's replica of the map applies it soon after, if it is not the leader.
	var id uint64
	err := c.WaitMap(ctx, func(m ClusterMap) bool {
		for _, mv := range m.Moves {
			if mv.sameKey(&req) {
				id = mv.ID
				return true
			}
		}
		return false
	})
	if err != nil {
		return 0, fmt.Errorf("cluster: the move of %s was recorded, but this node's map has not shown it yet (%w): see the cluster's status", req.Key(), err)
	}
	return id, nil
}

// CheckMove returns why the cluster map as this node has it would refuse StartMove(req)
// (ErrMetaRefused), or nil; a zero req.To stands for the shard AddShard would add next. An
// operator's move to a new shard checks first, so that a refused move adds no empty shard. The
// map may change before StartMove's command applies (another move of the same key started
// meanwhile), which can still refuse it.
func (c *Cluster) CheckMove(req MoveInfo) error {
	m, ok := c.Map()
	if !ok || m.Shards == 0 {
		return fmt.Errorf("%w: this node does not have the cluster map yet; retry", ErrMetaRefused)
	}
	if req.To == 0 {
		m.Shards++
		req.To = ShardID(m.Shards)
	}
	return checkMoveStart(&m, &req)
}

// WaitMap waits until this node's replica of the cluster map satisfies cond, or ctx ends: for
// a change this node proposed, which a replica that is not the meta leader applies a little
// after the proposal returned.
func (c *Cluster) WaitMap(ctx context.Context, cond func(ClusterMap) bool) error {
	for {
		if m, _ := c.Map(); cond(m) {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// AdvanceMove records that move id reached step (cutovers: every shard's cutover position, set
// with PhaseFence). A step already reached is not recorded again.
func (c *Cluster) AdvanceMove(ctx context.Context, id uint64, step Phase, cutovers map[ShardID]uint64) error {
	return c.propose(ctx, metaCommand{Op: "move-step", MoveID: id, Step: step, Cutovers: cutovers})
}

// SwitchMove routes the user of move id to its destination (an override) and moves it to
// PhaseDrop; it is for once the destination serves the user. The switch of a split records it,
// with split saying where its gate is; nil for the other moves.
func (c *Cluster) SwitchMove(ctx context.Context, id uint64, split *SplitInfo) error {
	return c.propose(ctx, metaCommand{Op: "move-switch", MoveID: id, Split: split})
}

// CancelMove cancels move id while it is still copying; the destination then drops what was
// copied and the move is forgotten. Once the sources have cut over it is refused: the move only
// goes forward from there.
func (c *Cluster) CancelMove(ctx context.Context, id uint64) error {
	return c.propose(ctx, metaCommand{Op: "move-cancel", MoveID: id})
}

// EndMove forgets move id, once the source has dropped its copy (or the destination has
// dropped a canceled move's).
func (c *Cluster) EndMove(ctx context.Context, id uint64) error {
	return c.propose(ctx, metaCommand{Op: "move-end", MoveID: id})
}
