package bench

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/syncd-dev/syncd/proto"
)

// HotStep is one phase of Hot: it lasts D, or, with an Action, as long as the action runs (and
// at least D). The action (an operator's move of the hot key, say) runs while the senders go on.
type HotStep struct {
	Name   string
	D      time.Duration
	Action func(context.Context) error
}

// HotPhase is what one phase of Hot measured.
type HotPhase struct {
	Name             string
	Took             time.Duration // the phase's length
	Acked, Errors    int           // sends acked in the phase, and those that failed
	PerSec           float64       // acked sends per second
	AckP50, AckP99   time.Duration // send → ack
	PushP50, PushP99 time.Duration // append (server stamp) → arrival on the watching device's sync stream
	MaxGap           time.Duration // the longest time between two batches arriving on that stream
	CPU              time.Duration // what the cpu function given to Hot counted over the phase
	FirstErr         string        // why the first failed send failed ("" if none did)
}

// HotConfig says what Hot measures.
type HotConfig struct {
	// User is the hot user (Group empty): Senders devices each write to it in a direct
	// conversation. With Group set, User owns group Group, whose members are User and the
	// Senders, all of whom write to it but User. Either way User's device watches its log.
	User, Group string
	// Workers are the closed-loop writers taking turns over the senders, so at most Workers
	// sends are in flight.
	Senders, Workers int
}

// Hot measures one hot key under many writers: a user receiving from cfg.Senders devices, or a
// group they all write to (HotConfig), while the watching user's device syncs its log from the
// start and checks that it is contiguous. It runs the steps in order on the same connections and
// measures each; cpu, if not nil, is read at each phase's start and end (the server's CPU time,
// say). Device k is on the target's node k mod its nodes.
func Hot(ctx context.Context, t Target, cfg HotConfig, steps []HotStep, cpu func() time.Duration) ([]HotPhase, error) {
	hot, senders, workers := cfg.User, cfg.Senders, cfg.Workers
	if hot == "" || senders < 1 || workers < 1 || len(steps) == 0 {
		return nil, errors.New("bench: hot needs a user, senders, workers and steps")
	}
	dl, err := newDialer(t, min(senders, 8))
	if err != nil {
		return nil, err
	}
	defer dl.close()
	run := runID()
	users := []string{hot}
	for k := range senders {
		users = append(users, "hsnd"+strconv.Itoa(k)+"-"+run)
	}
	clients, err := dl.connectMany(ctx, users, dialParallel)
	if err != nil {
		return nil, err
	}
	defer func() {
		for _, c := range clients {
			c.close()
		}
	}()
	streams := make([]*reqStream, senders)
	for k := range streams {
		if streams[k], err = clients[k+1].openRequests(ctx); err != nil {
			return nil, err
		}
	}
	if cfg.Group != "" {
		owner, err := clients[0].openRequests(ctx)
		if err != nil {
			return nil, err
		}
		if err := createGroup(ctx, owner, cfg.Group, users[1:], run); err != nil {
			return nil, err
		}
	}

	// The hot user's stream: every arrival's latency and the gaps between batches, into the
	// phase under way.
	var mu sync.Mutex
	var push []time.Duration
	var maxGap time.Duration
	var lastBatch time.Time
	streamErr := make(chan error, 1)
	sctx, stopStream := context.WithCancel(ctx)
	defer stopStream()
	// A vector cursor: a split of the hot user's stream (an operator's step) adds its sub-logs to
	// the stream, each contiguous on its own.
	st, r, err := clients[0].syncStream(sctx, &proto.SyncStart{MaxBatch: proto.MaxPage, Subs: []proto.SubCursor{{}}})
	if err != nil {
		return nil, err
	}
	go func() {
		var pos [proto.MaxSubLogs]proto.Position
		for {
			f, err := r.Next()
			now := time.Now()
			if err != nil {
				if sctx.Err() == nil {
					streamErr <- fmt.Errorf("bench: hot user's sync stream: %w", err)
				}
				return
			}
			if e, ok := f.(*proto.Error); ok {
				streamErr <- fmt.Errorf("bench: hot user's sync stream: %w", e)
				return
			}
			b, ok := f.(*proto.Batch)
			if !ok || b.Sub >= proto.MaxSubLogs {
				continue
			}
			mu.Lock()
			for _, e := range b.Entries {
				if e.Seq != pos[b.Sub]+1 {
					mu.Unlock()
					streamErr <- fmt.Errorf("bench: hot user's sub-log %d: entry %d after %d", b.Sub, e.Seq, pos[b.Sub])
					return
				}
				pos[b.Sub] = e.Seq
				push = append(push, now.Sub(time.Unix(0, e.Time)))
			}
			if !lastBatch.IsZero() {
				maxGap = max(maxGap, now.Sub(lastBatch))
			}
			lastBatch = now
			mu.Unlock()
		}
	}()
	defer st.CancelRead(0)

	payload := make([]byte, 256)
	var next atomic.Int64 // the next send's number: which conversation, and its cmid
	var out []HotPhase
	for _, step := range steps {
		mu.Lock()
		push, maxGap, lastBatch = nil, 0, time.Time{}
		mu.Unlock()
		var acked, failed atomic.Int64
		var firstErr atomic.Value
		lat := make([][]time.Duration, workers)
		stop := make(chan struct{})
		var wg sync.WaitGroup
		start := time.Now()
		var cpu0 time.Duration
		if cpu != nil {
			cpu0 = cpu()
		}
		wctx, cancel := context.WithTimeout(ctx, step.D+10*time.Minute)
		for w := range workers {
			wg.Go(func() {
				for {
					select {
					case <-stop:
						return
					default:
					}
					n := next.Add(1)
					k := int(n) % senders
					msg := proto.Send{Conv: proto.DirectConv(users[k+1], hot), Peer: hot, Body: payload,
						ClientMsgID: run + "-" + strconv.FormatInt(n, 10)}
					if cfg.Group != "" {
						msg.Conv, msg.Peer = cfg.Group, ""
					}
					t0 := time.Now()
					if o, _, err := attempt(wctx, streams[k], msg); o == outAcked {
						acked.Add(1)
						lat[w] = append(lat[w], time.Since(t0))
					} else {
						failed.Add(1)
						firstErr.CompareAndSwap(nil, fmt.Sprint(err))
						sleepCtx(wctx, 10*time.Millisecond)
					}
				}
			})
		}
		var actionErr error
		if step.Action != nil {
			actionErr = step.Action(ctx)
		}
		if rest := step.D - time.Since(start); rest > 0 {
			sleepCtx(ctx, rest)
		}
		close(stop)
		wg.Wait()
		cancel()
		took := time.Since(start)
		var used time.Duration
		if cpu != nil {
			used = cpu() - cpu0
		}
		if actionErr != nil {
			return out, fmt.Errorf("bench: hot user, %s: %w", step.Name, actionErr)
		}
		select {
		case err := <-streamErr:
			return out, err
		default:
		}
		all := slices.Concat(lat...)
		slices.Sort(all)
		mu.Lock()
		p := slices.Clone(push)
		gap := maxGap
		mu.Unlock()
		slices.Sort(p)
		out = append(out, HotPhase{Name: step.Name, Took: took, Acked: int(acked.Load()), Errors: int(failed.Load()),
			PerSec: float64(acked.Load()) / took.Seconds(), AckP50: percentile(all, 0.5), AckP99: percentile(all, 0.99),
			PushP50: percentile(p, 0.5), PushP99: percentile(p, 0.99), MaxGap: gap, CPU: used})
		if e, ok := firstErr.Load().(string); ok {
			out[len(out)-1].FirstErr = e
		}
	}
	return out, nil
}

// createGroup creates group conv owned by rs's user with members, naming at most
// proto.MaxMembers users per request (a creation, then additions).
func createGroup(ctx context.Context, rs *reqStream, conv string, members []string, run string) error {
	for i := 0; i == 0 || i < len(members); i += proto.MaxMembers {
		chunk := members[i:min(i+proto.MaxMembers, len(members))]
		cmid := run + "-group-" + strconv.Itoa(i)
		f, err := rs.do(ctx, func(id uint64) proto.Frame {
			if i == 0 {
				return &proto.CreateGroup{ID: id, Conv: conv, ClientMsgID: cmid, Members: chunk}
			}
			return &proto.AddMembers{ID: id, Conv: conv, ClientMsgID: cmid, Members: chunk}
		})
		if err != nil {
			return fmt.Errorf("bench: create group %s: %w", conv, err)
		}
		if _, ok := f.(*proto.Ack); !ok {
			return fmt.Errorf("bench: create group %s: answered %v", conv, f)
		}
	}
	return nil
}
