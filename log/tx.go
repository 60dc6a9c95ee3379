package log

import (
	"fmt"
	"maps"
	"slices"

	"github.com/cockroachdb/pebble/v2"
)

// Tx collects the writes of one or more commands into one atomic Pebble batch. The state machine
// opens a Tx, applies each committed command with the operation methods, records the Raft index
// with SetApplied, and commits; so the applied index always moves in the same batch as the data.
//
// Operations read their own earlier writes in the same Tx. Every operation runs all of its checks
// before its first write, so a rejected command (an error return) leaves the Tx as it was.
//
// A Tx is not safe for concurrent use, and at most one may be open per shard.
type Tx struct {
	s *Shard
	b *pebble.Batch

	outboxHead       uint64 // cached by appendOutbox
	outboxHeadLoaded bool
	outboxHeadDirty  bool // outboxHead moved; Commit writes it

	// pending holds the log metas written by this Tx, by key; Commit moves them into the
	// shard's cache of committed metas.
	pending map[string]logMeta

	// touched holds the users whose logs this Tx appended to, touchedConvs the large groups
	// whose conversation logs it appended to (see Touched).
	touched, touchedConvs map[string]struct{}

	// routed is set when this Tx changes how ReadOutbox routes records (RoutingVersion).
	routed bool

	// rng is this Tx's copy of the shard's slot-move markers and cutovers, once it changes them;
	// Commit publishes it.
	rng *shardRanges
}

// Touched names logs that readers follow and a commit grew: users' logs, and the conversation
// logs of large groups, which their members' devices follow as sources (follow.go).
type Touched struct {
	Users, Convs []string
	// All is set when any log of the shard may have changed (a snapshot was restored).
	All bool
}

// Empty reports whether t names nothing.
func (t Touched) Empty() bool { return !t.All && len(t.Users) == 0 && len(t.Convs) == 0 }

// Add adds the logs of o to t, each once.
func (t *Touched) Add(o Touched) {
	t.All = t.All || o.All
	t.Users = mergeUnique(t.Users, o.Users)
	t.Convs = mergeUnique(t.Convs, o.Convs)
}

func mergeUnique(a, b []string) []string {
	if len(a) == 0 {
		return b
	}
	if len(b) == 0 {
		return a
	}
	out := append(slices.Clone(a), b...)
	slices.Sort(out)
	return slices.Compact(out)
}

// Touched returns the logs this Tx appended to, in no particular order, so the caller can wake
// exactly their readers after the commit.
func (t *Tx) Touched() Touched {
	return Touched{Users: slices.Collect(maps.Keys(t.touched)), Convs: slices.Collect(maps.Keys(t.touchedConvs))}
}

// Begin opens a Tx on the shard. The caller must Commit or Close it.
func (s *Shard) Begin() *Tx {
	return &Tx{s: s, b: s.db.NewIndexedBatch()}
}

// SetApplied records index as the last Raft index applied.
func (t *Tx) SetApplied(index uint64) error {
	return t.set(t.s.k.meta(metaApplied), encodeUint(index))
}

// Applied returns the last Raft index applied, including this Tx's writes.
func (t *Tx) Applied() (uint64, error) {
	v, _, err := getUint(t.b, t.s.k.meta(metaApplied))
	return v, err
}

// Commit writes the batch. With sync it is fsynced before Commit returns. Commit closes the Tx.
func (t *Tx) Commit(sync bool) error {
	opts := pebble.NoSync
	if sync {
		opts = pebble.Sync
	}
	var err error
	if t.outboxHeadDirty {
		err = t.set(t.s.k.meta(metaOutboxHead), encodeUint(t.outboxHead))
	}
	if err == nil {
		err = t.b.Commit(opts)
	}
	t.Close()
	if err != nil {
		return fmt.Errorf("log: commit shard %d: %w", t.s.id, err)
	}
	if t.rng != nil {
		t.s.ranges.Store(t.rng) // after the commit: readers outside a Tx see committed state
	}
	if t.routed {
		t.s.routing.Add(1) // after the commit: a read of the outbox begun before it is stale now
	}
	if len(t.s.metas)+len(t.pending) > metaCacheMax {
		clear(t.s.metas) // crude bound; the hot set refills within a few batches
	}
	for k, m := range t.pending {
		t.s.metas[k] = m
	}
	return nil
}

// metaCacheMax bounds the shard's cache of log metas.
const metaCacheMax = 100_000

// logMeta returns the meta of the log at key (a conversation or user meta key), from this Tx's
// writes, the shard's cache of committed metas, or Pebble, in that order. Every write of a log
// meta goes through putLogMeta, so the cache never holds a stale value.
func (t *Tx) logMeta(key []byte) (logMeta, bool, error) {
	if m, ok := t.pending[string(key)]; ok {
		return m, true, nil
	}
	if m, ok := t.s.metas[string(key)]; ok {
		return m, true, nil
	}
	m, ok, err := getLogMeta(t.b, key)
	if err == nil && ok && len(t.s.metas) < metaCacheMax {
		t.s.metas[string(key)] = m // not in pending, so this is committed state
	}
	return m, ok, err
}

// putLogMeta writes the meta of the log at key.
func (t *Tx) putLogMeta(key []byte, m logMeta) error {
	if t.pending == nil {
		t.pending = map[string]logMeta{}
	}
	t.pending[string(key)] = m
	return t.set(key, m.encode())
}

// Close discards uncommitted writes. It is safe to call after Commit.
func (t *Tx) Close() {
	if t.b != nil {
		_ = t.b.Close()
		t.b = nil
	}
}

func (t *Tx) set(key, val []byte) error {
	if err := t.b.Set(key, val, nil); err != nil {
		return fmt.Errorf("log: write: %w", err)
	}
	return nil
}

// deletePrefixes deletes every key under each of prefixes.
func (t *Tx) deletePrefixes(prefixes ...[]byte) error {
	for _, p := range prefixes {
		if err := t.b.DeleteRange(p, prefixEnd(p), nil); err != nil {
			return fmt.Errorf("log: write: %w", err)
		}
	}
	return nil
}

func (t *Tx) del(key []byte) error {
	if err := t.b.Delete(key, nil); err != nil {
		return fmt.Errorf("log: write: %w", err)
	}
	return nil
}

// newEpoch picks the epoch of a log created by the command st: the proposer's clock, which moves
// forward across re-creations (a restore from backup happens later than the original creation),
// or the Raft index if the command carries no time.
func newEpoch(st Stamp) Epoch {
	if st.Time > 0 {
		return Epoch(st.Time)
	}
	return Epoch(st.Index)
}
