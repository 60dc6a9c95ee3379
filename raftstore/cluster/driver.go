package cluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/syncd-dev/syncd/log"
	"github.com/syncd-dev/syncd/raftstore"
)

// The move driver carries out the moves of users' logs and of conversations between shards that
// the cluster map records (moves.go; the protocol is docs/MOVES.md). Every node runs a
// Driver; it acts on the moves whose source shard this node leads, so the source's state is read
// locally, and a new leader of the source resumes a move from the step the map holds. Every step
// is a Raft command that is idempotent per move, so a step that two drivers run at once (a leader
// that has not noticed its loss yet), or that is run again after a crash, changes nothing the
// second time.

// driverHost is what the driver needs: the cluster map and its moves (a Cluster) and the data
// shards (its node), as host provides them.
type driverHost interface {
	Map() (ClusterMap, bool)
	ShardStatus(shard ShardID) (raftstore.ShardStatus, error)
	State(shard ShardID) (*log.Shard, error)
	Propose(ctx context.Context, shard ShardID, cmd raftstore.Command) (raftstore.Result, error)
	AdvanceMove(ctx context.Context, id uint64, step Phase, cutovers map[ShardID]uint64) error
	SwitchMove(ctx context.Context, id uint64, split *SplitInfo) error
	EndMove(ctx context.Context, id uint64) error
	WaitMap(ctx context.Context, cond func(ClusterMap) bool) error
}

// DriverConfig tunes the move driver. Zero fields take the defaults.
type DriverConfig struct {
	// Chunk is how many log entries one copy command carries. Default 1000.
	Chunk int
	// Poll is how often the driver looks at the map for moves to run, and at the source's marks
	// while it waits for them. Default 100 ms.
	Poll time.Duration
	// Drained reports the outbox position of a source shard up to which its fan-out has
	// delivered everything (fanout.Fanout.Drained, on this node). A conversation's move, once
	// switched, waits for it to pass the conversation's fence before it lifts the barrier its
	// deliveries from the new home wait behind; without it conversations cannot move.
	Drained func(src ShardID) (uint64, bool)
	// Observe, if set, is called once per move that switched, with how long the key's writes
	// were paused (fence to switch) and the bytes copied.
	Observe func(pause time.Duration, copied int64)
	// Logger defaults to slog.Default().
	Logger *slog.Logger
}

// Driver runs the moves this node is the source leader of. It is safe for concurrent use.
type Driver struct {
	node driverHost
	cfg  DriverConfig

	mu      sync.Mutex
	running map[uint64]bool
	wg      sync.WaitGroup
}

// host is a Cluster with its node's shard operations.
type host struct {
	*Cluster
	*raftstore.Node
}

// Driver returns a move driver for this node (run it with Run).
func (c *Cluster) Driver(cfg DriverConfig) *Driver { return newDriver(host{c, c.node}, cfg) }

func newDriver(node driverHost, cfg DriverConfig) *Driver {
	if cfg.Chunk <= 0 {
		cfg.Chunk = 1000
	}
	if cfg.Poll <= 0 {
		cfg.Poll = 100 * time.Millisecond
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	cfg.Logger = cfg.Logger.With("component", "moves")
	return &Driver{node: node, cfg: cfg, running: map[uint64]bool{}}
}

// Run looks for moves to carry out until ctx ends, then waits for the moves it started to stop.
func (d *Driver) Run(ctx context.Context) {
	tick := time.NewTicker(d.cfg.Poll)
	defer tick.Stop()
	for {
		if m, ok := d.node.Map(); ok {
			for _, mv := range m.Moves {
				d.maybeStart(ctx, mv)
			}
		}
		select {
		case <-ctx.Done():
			d.wg.Wait()
			return
		case <-tick.C:
		}
	}
}

// maybeStart starts carrying out mv if this node leads its source and no goroutine runs it yet.
func (d *Driver) maybeStart(ctx context.Context, mv *MoveInfo) {
	if !d.leads(mv.From) {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.running[mv.ID] {
		return
	}
	d.running[mv.ID] = true
	d.wg.Go(func() {
		defer func() {
			d.mu.Lock()
			delete(d.running, mv.ID)
			d.mu.Unlock()
		}()
		r := &run{d: d, id: mv.ID, user: mv.User, conv: mv.Conv, key: mv.Key(), from: mv.From, to: mv.To}
		var s steps = r
		switch {
		case mv.Slots != nil:
			s = &slotRun{run: r, span: *mv.Slots, copied: map[slotKey]keyCopy{}}
		case mv.Subs != 0:
			s = &splitRun{run: r, subs: mv.Subs}
		}
		if err := r.carryOut(ctx, s); err != nil && ctx.Err() == nil {
			// The next poll tries again, from the step the map holds.
			d.cfg.Logger.Warn("move interrupted; it resumes from its step", "move", mv.ID, "key", mv.Key(), "err", err)
		}
	})
}

func (d *Driver) leads(shard ShardID) bool {
	st, err := d.node.ShardStatus(shard)
	return err == nil && st.State == "leader"
}

// run is one move being carried out by this node.
type run struct {
	d        *Driver
	id       uint64
	user     string // the user whose log moves, or
	conv     string // the conversation that moves
	key      string // what moves, for logs
	from, to ShardID
	copied   log.Position // the highest log position staged on the destination (by this run, or kept)
	bytes    int64        // bytes of records staged by this run
	hasLog   bool         // the source holds a log of the user (an export found one)
	// resumed: this run asked the destination where to copy from (resume); activated, the
	// answer was that an earlier run activated the key there, so nothing is left to copy and
	// only the switch remains.
	resumed, activated bool
	epoch              log.Epoch  // the epoch of the log this run copies (0: none seen yet)
	gate               *SplitInfo // a split's, for its switch
}

// errNotLeader ends a run whose node no longer leads the source: the new leader takes over.
var errNotLeader = errors.New("cluster: this node no longer leads the move's source shard")

// steps is what one kind of move does at each step the map holds: run's for a user or a
// conversation, slotRun's for a range of slots, splitRun's for a split.
type steps interface {
	copyStep(ctx context.Context) error
	cutoverStep(ctx context.Context, m ClusterMap) error
	fenceStep(ctx context.Context, mv *MoveInfo) error
	dropStep(ctx context.Context) error
	cancelStep(ctx context.Context) error
}

// carryOut runs the move's steps, as s makes them, from the one the map holds until it is done.
func (r *run) carryOut(ctx context.Context, s steps) error {
	for ctx.Err() == nil {
		m, _ := r.d.node.Map()
		mv := m.Moves[r.id]
		if mv == nil {
			return nil // done (or done by another driver)
		}
		if !r.d.leads(r.from) {
			return errNotLeader
		}
		var err error
		switch mv.Step {
		case PhaseCopy:
			err = s.copyStep(ctx)
		case PhaseCutover:
			err = s.cutoverStep(ctx, m)
		case PhaseFence:
			err = s.fenceStep(ctx, mv)
		case PhaseDrop:
			err = s.dropStep(ctx)
		case PhaseCanceled:
			err = s.cancelStep(ctx)
		default:
			err = fmt.Errorf("cluster: move %d at unknown step %q (a newer build's?)", r.id, mv.Step)
		}
		if err != nil {
			return err
		}
	}
	return ctx.Err()
}

func (r *run) step(op log.MoveOp) *log.MoveStep {
	return &log.MoveStep{Op: op, Move: log.MoveID(r.id), User: r.user, Conv: r.conv, From: r.from, To: r.to}
}

func (r *run) propose(ctx context.Context, shard ShardID, s *log.MoveStep) (raftstore.Result, error) {
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	res, err := r.d.node.Propose(pctx, shard, raftstore.MoveCommand(s))
	if err != nil {
		return res, fmt.Errorf("move %d, step %d on shard %d: %w", r.id, s.Op, shard, err)
	}
	return res, nil
}

// copyStep makes the destination ready and copies the user's log (or the conversation) to it, to
// the head. A conversation has no cutover step: it has one source, whose deliveries of it the
// destination's wait behind (fenceStep).
func (r *run) copyStep(ctx context.Context) error {
	if err := r.begin(ctx, r.step(log.MoveBegin)); err != nil {
		return err
	}
	if err := r.copyToHead(ctx, nil); err != nil {
		return err
	}
	if r.conv != "" {
		return r.advance(ctx, PhaseFence, nil)
	}
	return r.advance(ctx, PhaseCutover, nil)
}

// begin makes the destination ready for the keys moving in: the move's first step there, which
// installs the cluster's splits first (log.MoveStep.Splits), so that the keys' records route to
// the split users' sub-logs there as they did at their old home.
func (r *run) begin(ctx context.Context, step *log.MoveStep) error {
	// A destination added for this move (-new-shard) has no leader for an election timeout or so;
	// wait for the map to say its group is up rather than fail, warn and retry against it.
	var m ClusterMap
	err := r.d.node.WaitMap(ctx, func(cm ClusterMap) bool {
		_, creating := cm.Creating[r.to]
		m = cm
		return !creating
	})
	if err != nil {
		return err
	}
	step.Splits = splitsOf(m)
	_, err = r.propose(ctx, r.to, step)
	return err
}

// splitsOf returns the users m splits into sub-logs, or is splitting, with their sub-logs.
func splitsOf(m ClusterMap) map[string]int {
	var out map[string]int
	add := func(uid string, subs int) {
		if out == nil {
			out = map[string]int{}
		}
		out[uid] = subs
	}
	for uid, s := range m.Splits {
		add(uid, s.Subs)
	}
	for _, mv := range m.Moves {
		if mv.Subs != 0 {
			add(mv.User, mv.Subs)
		}
	}
	return out
}

// advance records that the move reached step, then waits until this node's map shows it, so
// that the next step is not taken from a map that is behind (it would repeat this one).
func (r *run) advance(ctx context.Context, step Phase, cutovers map[ShardID]uint64) error {
	var err error
	if step == PhaseDrop {
		err = r.d.node.SwitchMove(ctx, r.id, r.gate)
	} else {
		err = r.d.node.AdvanceMove(ctx, r.id, step, cutovers)
	}
	if err != nil {
		return err
	}
	return r.d.node.WaitMap(ctx, func(m ClusterMap) bool {
		mv := m.Moves[r.id]
		return mv == nil || mv.Step == step
	})
}

// copyToHead stages the source's records past what this run copied, in chunks, until a chunk
// reaches the head of the log as it was when that chunk was read. With final set (the
// activation), the last chunk is sent with it instead of being staged on its own; SourceEmpty is
// set from what the copy found.
func (r *run) copyToHead(ctx context.Context, final *log.MoveStep) error {
	state, err := r.d.node.State(r.from)
	if err != nil {
		return err
	}
	if r.activated {
		return nil
	}
	export, key := state.ExportUser, r.user
	if r.conv != "" {
		export, key = state.ExportConv, r.conv
	}
	if !r.resumed {
		// This run's first pass: the destination keeps what an earlier run staged if it is of
		// the log's epoch now, and the copy goes on after it; otherwise (a reset since, or
		// nothing known) it starts over. The answer also says whether an earlier run activated
		// the key on the destination already.
		var info log.LogInfo
		if r.conv != "" {
			info, err = state.ConvInfo(r.conv)
		} else {
			info, err = state.UserInfo(r.user)
		}
		if err != nil && !errors.Is(err, log.ErrNoConversation) {
			return err
		}
		if err := r.resume(ctx, info.Epoch); err != nil || r.activated {
			return err
		}
	}
	for {
		var recs []log.Record
		size := 0
		epoch, last, done, err := export(key, r.copied, r.d.cfg.Chunk, func(rec log.Record) error {
			r.hasLog = true
			recs = append(recs, rec)
			size += len(rec.Key) + len(rec.Value)
			return nil
		})
		if err != nil {
			return err
		}
		if epoch != r.epoch {
			// The log was reset while it was copied (a new epoch, from position 1 again): what
			// was staged is of the old one, so the copy starts over.
			if err := r.resume(ctx, epoch); err != nil || r.activated {
				return err
			}
			continue
		}
		r.epoch = epoch
		s := r.step(log.MoveStage)
		if done && final != nil {
			s = final // the last records ride with the activation: one commit less in the pause
			s.SourceEmpty = !r.hasLog
		}
		s.Records = recs
		if _, err := r.propose(ctx, r.to, s); err != nil {
			return err
		}
		r.copied, r.bytes = last, r.bytes+int64(size)
		if done {
			return nil
		}
	}
}

// resume asks the destination where this run's copy of a log of epoch goes on from (ResumeCopy):
// after what an earlier run staged, if it is of that epoch, else from the start.
func (r *run) resume(ctx context.Context, epoch log.Epoch) error {
	s := r.step(log.MoveResume)
	s.Epoch = epoch
	res, err := r.propose(ctx, r.to, s)
	if err != nil {
		return err
	}
	r.resumed, r.epoch, r.bytes = true, epoch, 0
	if r.activated = res.Move == log.ResumeActivated; !r.activated {
		r.copied = log.Position(res.Move)
		if r.copied > 0 {
			r.d.cfg.Logger.Info("move's copy resumed", "move", r.id, "key", r.key, "after", r.copied)
		}
	}
	return nil
}

// cutoverStep switches every shard's outbox to send the user's later records to the destination,
// and records where each switched.
func (r *run) cutoverStep(ctx context.Context, m ClusterMap) error {
	return r.cutover(ctx, m, r.step(log.MoveCutover))
}

// cutover proposes the cutover step to every data shard of m and records, with the move's next
// step, where each switched.
func (r *run) cutover(ctx context.Context, m ClusterMap, step *log.MoveStep) error {
	cut := map[ShardID]uint64{}
	for _, x := range m.DataShards() {
		res, err := r.propose(ctx, x, step)
		if err != nil {
			return err
		}
		cut[x] = res.Move
	}
	return r.advance(ctx, PhaseFence, cut)
}

// waitCutovers waits until the source's mark for every shard has reached that shard's cutover
// position: the source has every record routed to it.
func (r *run) waitCutovers(ctx context.Context, mv *MoveInfo) error {
	state, err := r.d.node.State(r.from)
	if err != nil {
		return err
	}
	for x, p := range mv.Cutovers {
		err := r.waitFor(ctx, func() (bool, error) {
			mark, err := state.SourceMark(x)
			return mark >= p, err
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// fenceStep fences the key on the source, copies what is left (the final meta and cursors or
// members with it) with the activation on the destination, and switches the map: the key's
// writes pause from the fence to the switch, three commits. A user's move first waits until the
// source has every record routed to it (each source's mark past its cutover). A conversation's
// activation carries the fence's position, the barrier its deliveries from the destination wait
// behind at every destination (log.Barrier): the writers never wait for the source's fan-out,
// which the drop step does. A run that found the key activated already only switches.
func (r *run) fenceStep(ctx context.Context, mv *MoveInfo) error {
	if err := r.waitCutovers(ctx, mv); err != nil {
		return err
	}
	if err := r.copyToHead(ctx, nil); err != nil { // most of the tail, before the pause
		return err
	}
	fenced := time.Now()
	if !r.activated {
		res, err := r.propose(ctx, r.from, r.step(log.MoveFence))
		if err != nil {
			return err
		}
		activate := r.step(log.MoveActivate)
		if r.conv != "" {
			activate.Fence = res.Move
		}
		if err := r.copyToHead(ctx, activate); err != nil {
			return err
		}
	}
	if err := r.advance(ctx, PhaseDrop, nil); err != nil {
		return err
	}
	r.switched(fenced)
	return nil
}

// switched reports a move that switched, its writes paused since fenced.
func (r *run) switched(fenced time.Time) {
	pause := time.Since(fenced)
	r.d.cfg.Logger.Info("moved", "move", r.id, "key", r.key, "from", uint32(r.from), "to", uint32(r.to),
		"pause", pause.Round(time.Millisecond), "copied_bytes", r.bytes)
	if r.d.cfg.Observe != nil {
		r.d.cfg.Observe(pause, r.bytes)
	}
}

// settle waits until the source's fan-out has delivered everything up to the fence of a
// conversation's (or a slot range's) move to every destination, then lifts the barrier on the
// destination: a later move of the key may then begin (its own barrier is behind the
// destination's deliveries alone). fence asks the source for the fence's position, as recorded,
// and settle lifts the barrier.
func (r *run) settle(ctx context.Context, fence, settle *log.MoveStep) error {
	if r.d.cfg.Drained == nil {
		return errors.New("cluster: this node's driver has no fan-out to wait for (DriverConfig.Drained)")
	}
	res, err := r.propose(ctx, r.from, fence)
	if err != nil {
		return err
	}
	err = r.waitFor(ctx, func() (bool, error) {
		pos, ok := r.d.cfg.Drained(r.from)
		return ok && pos >= res.Move, nil
	})
	if err != nil {
		return err
	}
	_, err = r.propose(ctx, r.to, settle)
	return err
}

// waitFor polls done until it is true, while this node leads the source (errNotLeader once it
// does not: the new leader takes over) and ctx lasts.
func (r *run) waitFor(ctx context.Context, done func() (bool, error)) error {
	for {
		if ok, err := done(); err != nil || ok {
			return err
		}
		if !r.d.leads(r.from) {
			return errNotLeader
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(r.d.cfg.Poll / 10):
		}
	}
}

// cancelStep drops what a canceled move copied to the destination and forgets the move.
func (r *run) cancelStep(ctx context.Context) error {
	if _, err := r.propose(ctx, r.to, r.step(log.MoveCancel)); err != nil {
		return err
	}
	r.d.cfg.Logger.Info("move canceled", "move", r.id, "key", r.key, "from", uint32(r.from), "to", uint32(r.to))
	return r.d.node.EndMove(ctx, r.id)
}

// dropStep deletes the source's copy (for a conversation, once its barrier is lifted) and
// forgets the move.
func (r *run) dropStep(ctx context.Context) error {
	if r.conv != "" {
		if err := r.settle(ctx, r.step(log.MoveFence), r.step(log.MoveSettle)); err != nil {
			return err
		}
	}
	if _, err := r.propose(ctx, r.from, r.step(log.MoveDrop)); err != nil {
		return err
	}
	return r.d.node.EndMove(ctx, r.id)
}
