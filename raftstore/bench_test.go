package raftstore_test

// BenchmarkDurableAppend compares, in one run, the engine's ceiling (raw Pebble synced commits)
// with the full send path (Raft commit + fsm apply of a conversation append with dedup, outbox
// and msg index) on one shard, eight shards, and eight shards replicated on three nodes.
//
//	go test -run '^$' -bench DurableAppend -benchtime 20000x -count 5 ./raftstore/
//
// Each of 64 workers appends 256-byte entries to random logs among 10,000 and waits for the
// durable result; ops/s, p50 and p99 latency are reported as extra metrics.

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/syncd-dev/syncd/log"
	"github.com/syncd-dev/syncd/raftstore"
	"github.com/syncd-dev/syncd/raftstore/raftstoretest"
)

const (
	benchWorkers = 64
	benchLogs    = 10_000
	benchBody    = 256
)

func BenchmarkDurableAppend(b *testing.B) {
	b.Run("raw-pebble-sync", func(b *testing.B) {
		db, err := pebble.Open(b.TempDir(), &pebble.Options{Logger: quietPebble{}})
		if err != nil {
			b.Fatal(err)
		}
		defer db.Close()
		body := make([]byte, benchBody)
		var seq atomic.Uint64
		runDurable(b, func(r *rand.Rand) error {
			key := fmt.Appendf(nil, "log%05d/%016x", r.IntN(benchLogs), seq.Add(1))
			return db.Set(key, body, pebble.Sync)
		})
	})
	for _, tc := range []struct {
		name          string
		nodes, shards int
	}{
		{"1-node-1-shard", 1, 1},
		{"1-node-8-shards", 1, 8},
		{"3-nodes-1-shard", 3, 1},
		{"3-nodes-8-shards", 3, 8},
	} {
		b.Run(tc.name, func(b *testing.B) {
			var ids []raftstore.ShardID
			for i := 1; i <= tc.shards; i++ {
				ids = append(ids, raftstore.ShardID(i))
			}
			c := raftstoretest.NewCluster(b, tc.nodes, ids, func(cfg *raftstore.Config) {
				cfg.Logger = quietLogger()
				cfg.PeerAddr = nil // dial peers directly: no test relay in the measured path
			})
			leaders := newLeaderCache(c, ids)
			termsBefore := sumTerms(c, ids)
			defer func() {
				// Elections during the run: leader changes under load cost retries and latency.
				b.ReportMetric(float64(sumTerms(c, ids)-termsBefore), "elections")
			}()
			body := make([]byte, benchBody)
			var seq atomic.Uint64
			runDurable(b, func(r *rand.Rand) error {
				k := r.IntN(benchLogs)
				conv := fmt.Sprintf("d:a%d:b%d", k, k)
				shard := ids[shardOf(conv, len(ids))]
				cmd := raftstore.AppendCommand(&log.Append{
					Conv: conv, Sender: fmt.Sprintf("a%d", k), ClientMsgID: fmt.Sprint(seq.Add(1)),
					Kind: log.KindMessage, Body: body, Members: []string{fmt.Sprintf("a%d", k), fmt.Sprintf("b%d", k)},
				})
				// A leader change under load is retried like a client would: same client_msg_id,
				// so dedup keeps it exactly once.
				for {
					_, err := leaders.get(shard).Propose(context.Background(), shard, cmd)
					if !errors.Is(err, raftstore.ErrNotLeader) && !errors.Is(err, raftstore.ErrLeadershipLost) {
						return err
					}
					if err := leaders.refresh(shard); err != nil {
						return err
					}
				}
			})
		})
	}
}

// leaderCache remembers each shard's leader for the benchmark's proposers.
type leaderCache struct {
	c  *raftstoretest.Cluster
	mu sync.Mutex
	m  map[raftstore.ShardID]*raftstore.Node
}

func newLeaderCache(c *raftstoretest.Cluster, ids []raftstore.ShardID) *leaderCache {
	lc := &leaderCache{c: c, m: map[raftstore.ShardID]*raftstore.Node{}}
	for _, id := range ids {
		lc.m[id] = c.Node(c.Leader(id))
	}
	return lc
}

func (lc *leaderCache) get(shard raftstore.ShardID) *raftstore.Node {
	lc.mu.Lock()
	defer lc.mu.Unlock()
	return lc.m[shard]
}

// refresh waits up to 10 s for a node that leads shard. It runs on worker goroutines, so it
// reports failure as an error instead of failing the benchmark itself.
func (lc *leaderCache) refresh(shard raftstore.ShardID) error {
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		for i := range lc.c.Size() {
			n := lc.c.Node(i)
			if st, err := n.ShardStatus(shard); err == nil && st.State == "leader" {
				lc.mu.Lock()
				lc.m[shard] = n
				lc.mu.Unlock()
				return nil
			}
		}
	}
	return fmt.Errorf("no leader for shard %d within 10s", shard)
}

// sumTerms adds up the highest Raft term any node has seen for each shard.
func sumTerms(c *raftstoretest.Cluster, ids []raftstore.ShardID) uint64 {
	var sum uint64
	for _, id := range ids {
		var top uint64
		for i := range c.Size() {
			if st, err := c.Node(i).ShardStatus(id); err == nil {
				top = max(top, st.Term)
			}
		}
		sum += top
	}
	return sum
}

func shardOf(key string, n int) int {
	h := fnv.New32a()
	h.Write([]byte(key))
	return int(h.Sum32() % uint32(n))
}

// runDurable runs b.N calls of op over benchWorkers goroutines and reports throughput and
// latency percentiles.
func runDurable(b *testing.B, op func(r *rand.Rand) error) {
	var next atomic.Int64
	lat := make([][]time.Duration, benchWorkers)
	var wg sync.WaitGroup
	var failed atomic.Value
	b.ResetTimer()
	start := time.Now()
	for w := range benchWorkers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(w), 42))
			for next.Add(1) <= int64(b.N) {
				t0 := time.Now()
				if err := op(r); err != nil {
					failed.Store(err)
					return
				}
				lat[w] = append(lat[w], time.Since(t0))
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	if err, ok := failed.Load().(error); ok {
		b.Fatal(err)
	}
	all := slices.Concat(lat...)
	slices.Sort(all)
	b.ReportMetric(float64(len(all))/elapsed.Seconds(), "ops/s")
	b.ReportMetric(float64(all[len(all)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(all[len(all)*99/100].Microseconds())/1000, "p99-ms")
}

type quietPebble struct{}

func (quietPebble) Infof(string, ...any)  {}
func (quietPebble) Errorf(string, ...any) {}
func (quietPebble) Fatalf(format string, args ...any) {
	panic(fmt.Sprintf(format, args...))
}
