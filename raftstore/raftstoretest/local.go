package raftstoretest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/syncd-dev/syncd/log"
	"github.com/syncd-dev/syncd/raftstore"
)

// Local is a node's shards without Raft, for testing the layers above raftstore (fan-out,
// retention) fast and deterministically: real log.Shards on one real Pebble store, every one led
// by this "node". A proposal applies its command at once through raftstore.Apply, the state
// machine's own code, in a batch that records the applied index as a shard's apply does. What
// replication adds (quorums, leader changes, forwarding) is covered by the Cluster tests and the
// server's.
//
// Local implements the node methods those layers declare interfaces for (Shards, ShardStatus,
// State, Propose, Status). It is safe for concurrent use; the proposals of one shard are
// serialized, as its Raft log serializes them, and those of different shards are independent, so
// a shard whose proposals hang (see FailProposals) holds up only its own.
type Local struct {
	db     *pebble.DB
	shards map[raftstore.ShardID]*log.Shard
	ids    []raftstore.ShardID
	apply  map[raftstore.ShardID]*sync.Mutex // per shard: one proposal applies at a time
	index  atomic.Uint64                     // the last index handed out, across shards

	mu   sync.Mutex // guards fail and applied
	fail func(shard raftstore.ShardID, cmd raftstore.Command) error
	// applied, if set, is called after each applied proposal, as raftstore.App.Applied is.
	applied func(shard raftstore.ShardID)
}

// OpenLocal opens (or reopens, with what an earlier Local wrote) shards 1..n in dir; close it
// with Close.
func OpenLocal(t testing.TB, dir string, n int) *Local {
	t.Helper()
	db, err := pebble.Open(dir, &pebble.Options{Logger: quietPebble{}})
	if err != nil {
		t.Fatal(err)
	}
	l := &Local{db: db, shards: map[raftstore.ShardID]*log.Shard{}, apply: map[raftstore.ShardID]*sync.Mutex{}}
	for i := 1; i <= n; i++ {
		id := raftstore.ShardID(i)
		l.ids = append(l.ids, id)
		l.apply[id] = new(sync.Mutex)
		if l.shards[id], err = log.OpenShard(db, id); err != nil {
			t.Fatal(err)
		}
		idx, err := l.shards[id].Applied()
		if err != nil {
			t.Fatal(err)
		}
		l.index.Store(max(l.index.Load(), idx)) // indexes stay unique across a reopen: msg_ids derive from them
	}
	return l
}

// OnApplied makes f be called after each applied proposal (nil: nothing), like
// raftstore.App.Applied. f runs on the proposer's goroutine and must not block.
func (l *Local) OnApplied(f func(shard raftstore.ShardID)) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.applied = f
}

// FailProposals makes every later proposal ask f first; a non-nil error is returned instead of
// applying the command (a transient failure such as a lost leader). f runs on the proposer's
// goroutine outside Local's locks and may block, as a proposal to a shard without quorum does
// until it times out; proposals to other shards go on meanwhile. nil removes it.
func (l *Local) FailProposals(f func(shard raftstore.ShardID, cmd raftstore.Command) error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.fail = f
}

// Shards returns the shard ids, ascending.
func (l *Local) Shards() []raftstore.ShardID { return l.ids }

// ShardStatus reports shard as led here.
func (l *Local) ShardStatus(shard raftstore.ShardID) (raftstore.ShardStatus, error) {
	if l.shards[shard] == nil {
		return raftstore.ShardStatus{}, raftstore.ErrNoShard
	}
	return raftstore.ShardStatus{Shard: shard, State: "leader", LeaderID: "local"}, nil
}

// Status reports every shard as led here.
func (l *Local) Status() []raftstore.ShardStatus {
	out := make([]raftstore.ShardStatus, 0, len(l.ids))
	for _, id := range l.ids {
		st, _ := l.ShardStatus(id)
		out = append(out, st)
	}
	return out
}

// State returns shard's state, or raftstore.ErrNoShard.
func (l *Local) State(shard raftstore.ShardID) (*log.Shard, error) {
	if s := l.shards[shard]; s != nil {
		return s, nil
	}
	return nil, raftstore.ErrNoShard
}

// Propose applies cmd to shard at once, stamped with the next index and the local clock (or the
// command's own time). A refusal of the state machine is returned as it is from a real shard, and
// recorded as applied, as the FSM records it.
func (l *Local) Propose(_ context.Context, shard raftstore.ShardID, cmd raftstore.Command) (raftstore.Result, error) {
	state, err := l.State(shard)
	if err != nil {
		return raftstore.Result{}, err
	}
	l.mu.Lock()
	fail, applied := l.fail, l.applied
	l.mu.Unlock()
	if fail != nil {
		if err := fail(shard, cmd); err != nil {
			return raftstore.Result{}, err
		}
	}
	mu := l.apply[shard]
	mu.Lock()
	index := l.index.Add(1) // under the shard's lock: its applied index only grows
	tx := state.Begin()
	res, err := raftstore.Apply(tx, log.Stamp{Index: index, Time: time.Now().UnixNano()}, cmd)
	if err == nil || log.Rejected(err) {
		if cerr := errors.Join(tx.SetApplied(index), tx.Commit(false)); cerr != nil {
			err = cerr
		}
	}
	tx.Close()
	mu.Unlock()
	if applied != nil {
		applied(shard)
	}
	return res, err
}

// Close closes the store.
func (l *Local) Close() error { return l.db.Close() }

// quietPebble drops Pebble's informational logging; a fatal error still fails loudly.
type quietPebble struct{}

func (quietPebble) Infof(string, ...any)  {}
func (quietPebble) Errorf(string, ...any) {}
func (quietPebble) Fatalf(format string, args ...any) {
	panic(fmt.Sprintf(format, args...))
}
