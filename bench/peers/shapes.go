package main

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/syncd-dev/syncd/bench/peerresult"
	"github.com/syncd-dev/syncd/bench/procstat"
)

// system is a system under measurement: its name in the results, its node count, and its
// server processes.
type system struct {
	name    string
	nodes   int
	servers []*server
	self    bool // in this process: its CPU is this process's
}

// fail reports that the system could not be measured at all: it did not start.
func (s system) fail(err error) {
	progress("%s: %v", s.name, err)
	emit(peerresult.Result{System: s.name, Nodes: s.nodes, Failed: err.Error()})
}

// cpu returns the CPU time the system's server processes have used so far.
func (s system) cpu() time.Duration {
	if s.self {
		return procstat.CPU(os.Getpid())
	}
	var total time.Duration
	for _, srv := range s.servers {
		total += procstat.CPU(srv.cmd.Process.Pid)
	}
	return total
}

// store is one running system as the shapes see it: logs by user name.
type store interface {
	// append appends value to user's log and returns once the system has acked it as durable.
	append(ctx context.Context, user string, value []byte) error
	// subscribe starts following user's log, a fresh one, and returns once the subscription is
	// set up: from then on every value appended to the log is passed to fn, in log order, until
	// ctx ends. fn is called from one goroutine per subscription. An error of the subscription
	// after it has started goes to fail, once.
	subscribe(ctx context.Context, user string, fn func(value []byte), fail func(error)) error
	// read reads user's whole log from its start in pages of page entries, passes every value to
	// fn in log order, and returns how many there were.
	read(ctx context.Context, user string, page int, fn func(value []byte)) (int, error)
}

// requestTimeout bounds one append or one page read.
const requestTimeout = 15 * time.Second

// percentile returns the q-quantile (0..1) of sorted s, or 0 for none (as syncbench computes
// its own).
func percentile(s []time.Duration, q float64) time.Duration {
	if len(s) == 0 {
		return 0
	}
	return s[int(q*float64(len(s)-1)+0.5)]
}

// payload returns a body-byte value (a fixed pattern: none of the systems compresses).
func payload(body int) []byte {
	b := make([]byte, body)
	for i := range b {
		b[i] = byte('a' + i%26)
	}
	return b
}

// appends runs the appends shape: sh.writers closed-loop writers for sh.duration, each appending
// to a random log among sh.users and waiting for the ack before its next.
func appends(ctx context.Context, st store, sys system, sh shapes) peerresult.Result {
	res := peerresult.Result{System: sys.name, Nodes: sys.nodes, Shape: peerresult.Appends,
		Note: fmt.Sprintf("%d closed-loop writers, random logs among %d, %d-byte values, durable ack", sh.writers, sh.users, sh.body)}
	users := make([]string, sh.users)
	for i := range users {
		users[i] = "u" + strconv.Itoa(i)
	}
	value := payload(sh.body)
	var acked, failed atomic.Int64
	var firstErr atomic.Value
	lat := make([][]time.Duration, sh.writers)
	cpu0 := sys.cpu()
	deadline := time.Now().Add(sh.duration)
	var wg sync.WaitGroup
	for w := range sh.writers {
		wg.Go(func() {
			for time.Now().Before(deadline) && ctx.Err() == nil {
				user := users[rand.IntN(len(users))]
				t0 := time.Now()
				actx, cancel := context.WithTimeout(ctx, requestTimeout)
				err := st.append(actx, user, value)
				cancel()
				t1 := time.Now()
				if err != nil {
					failed.Add(1)
					firstErr.CompareAndSwap(nil, err.Error())
					time.Sleep(10 * time.Millisecond) // no tight loop on a broken path
					continue
				}
				if t1.Before(deadline) {
					acked.Add(1)
					lat[w] = append(lat[w], t1.Sub(t0))
				}
			}
		})
	}
	wg.Wait()
	cpu := sys.cpu() - cpu0
	all := slices.Concat(lat...)
	slices.Sort(all)
	res.Count, res.Errors = int(acked.Load()), int(failed.Load())
	res.PerSec = float64(res.Count) / sh.duration.Seconds()
	res.P50, res.P99 = percentile(all, 0.5), percentile(all, 0.99)
	if res.Count == 0 {
		res.Failed = fmt.Sprintf("no append was acked (first error: %v)", firstErr.Load())
		return res
	}
	if cpu > 0 {
		res.Note += fmt.Sprintf("; server CPU %v per append (%.2f cores)", (cpu / time.Duration(res.Count)).Round(time.Microsecond), cpu.Seconds()/sh.duration.Seconds())
	}
	if e := firstErr.Load(); e != nil {
		res.Note += fmt.Sprintf("; first error: %v", e)
	}
	return res
}

// pushWait bounds the wait for the last pushed values after the appends end.
const pushWait = 10 * time.Second

// push runs the push shape: sh.subscribers subscribers, one per fresh log, then appends at
// sh.rate per second in total for sh.duration to random ones among those logs, each append in
// its own goroutine (open loop). Each value carries its issue time; the latency is its arrival at
// the subscriber minus that time (one clock: the same process).
func push(ctx context.Context, st store, sys system, sh shapes) peerresult.Result {
	res := peerresult.Result{System: sys.name, Nodes: sys.nodes, Shape: peerresult.Push,
		Note: fmt.Sprintf("%d live subscribers, %d appends/s in total; append issued → value at its subscriber", sh.subscribers, sh.rate)}
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	users := make([]string, sh.subscribers)
	var mu sync.Mutex
	var lat []time.Duration
	arrived := make(chan struct{}, 1)
	var subErr atomic.Value
	for i := range users {
		users[i] = "p" + strconv.Itoa(i)
		err := st.subscribe(sctx, users[i], func(v []byte) {
			now := time.Now().UnixNano()
			if len(v) < 8 {
				subErr.CompareAndSwap(nil, fmt.Sprintf("a value of %d bytes", len(v)))
				return
			}
			mu.Lock()
			lat = append(lat, time.Duration(now-int64(binary.BigEndian.Uint64(v))))
			mu.Unlock()
			select {
			case arrived <- struct{}{}:
			default:
			}
		}, func(err error) {
			if sctx.Err() == nil {
				subErr.CompareAndSwap(nil, err.Error())
			}
		})
		if errors.Is(err, errors.ErrUnsupported) {
			res.Skip = err.Error()
			return res
		}
		if err != nil {
			res.Failed = fmt.Sprintf("subscribing %s: %v", users[i], err)
			return res
		}
	}

	body := sh.body
	var sent, failed atomic.Int64
	var firstErr atomic.Value
	var wg sync.WaitGroup
	total := int(float64(sh.rate) * sh.duration.Seconds())
	interval := time.Second / time.Duration(sh.rate)
	start := time.Now()
	for i := range total {
		if ctx.Err() != nil {
			break
		}
		if wait := time.Until(start.Add(time.Duration(i) * interval)); wait > 0 {
			time.Sleep(wait)
		}
		wg.Go(func() {
			v := payload(body)
			binary.BigEndian.PutUint64(v, uint64(time.Now().UnixNano()))
			actx, cancel := context.WithTimeout(ctx, requestTimeout)
			defer cancel()
			if err := st.append(actx, users[rand.IntN(len(users))], v); err != nil {
				failed.Add(1)
				firstErr.CompareAndSwap(nil, err.Error())
				return
			}
			sent.Add(1)
		})
	}
	wg.Wait()
	want := int(sent.Load())
	timeout := time.After(pushWait)
wait:
	for {
		mu.Lock()
		n := len(lat)
		mu.Unlock()
		if n >= want {
			break
		}
		select {
		case <-arrived:
		case <-timeout:
			break wait
		case <-ctx.Done():
			break wait
		}
	}
	mu.Lock()
	all := slices.Clone(lat)
	mu.Unlock()
	slices.Sort(all)
	res.Count, res.Errors = len(all), int(failed.Load())
	res.P50, res.P99 = percentile(all, 0.5), percentile(all, 0.99)
	switch {
	case subErr.Load() != nil:
		res.Failed = fmt.Sprintf("a subscription failed: %v", subErr.Load())
	case want == 0:
		res.Failed = fmt.Sprintf("no append was acked (first error: %v)", firstErr.Load())
	case len(all) < want:
		res.Failed = fmt.Sprintf("%d of %d acked appends reached their subscriber within %v", len(all), want, pushWait)
	case len(all) > want:
		res.Failed = fmt.Sprintf("%d values reached the subscribers for %d acked appends", len(all), want)
	}
	if e := firstErr.Load(); e != nil && res.Failed == "" {
		res.Note += fmt.Sprintf("; %d appends failed, the first with: %v", res.Errors, e)
	}
	return res
}

// catchUp runs the catch-up shape: it fills one fresh log with sh.catchup entries from
// sh.writers concurrent appenders, then times the read of the whole log from its start.
func catchUp(ctx context.Context, st store, sys system, sh shapes) peerresult.Result {
	res := peerresult.Result{System: sys.name, Nodes: sys.nodes, Shape: peerresult.CatchUp}
	const user = "c0"
	value := payload(sh.body)
	var next atomic.Int64
	var firstErr atomic.Value
	var wg sync.WaitGroup
	fillStart := time.Now()
	for range min(sh.writers, sh.catchup) {
		wg.Go(func() {
			for next.Add(1) <= int64(sh.catchup) && firstErr.Load() == nil {
				actx, cancel := context.WithTimeout(ctx, requestTimeout)
				err := st.append(actx, user, value)
				cancel()
				if err != nil {
					firstErr.CompareAndSwap(nil, err)
					return
				}
			}
		})
	}
	wg.Wait()
	if err, _ := firstErr.Load().(error); err != nil {
		res.Failed = fmt.Sprintf("filling the backlog: %v", err)
		return res
	}
	fill := time.Since(fillStart)

	start := time.Now()
	short := 0
	n, err := st.read(ctx, user, sh.page, func(v []byte) {
		if len(v) != len(value) {
			short++
		}
	})
	el := time.Since(start)
	switch {
	case err != nil:
		res.Failed = fmt.Sprintf("reading the backlog: %v", err)
	case n != sh.catchup:
		res.Failed = fmt.Sprintf("read %d entries of %d", n, sh.catchup)
	case short > 0:
		res.Failed = fmt.Sprintf("%d entries read back with the wrong length", short)
	}
	res.Count = n
	res.PerSec = float64(n) / el.Seconds()
	res.Note = fmt.Sprintf("%d entries from position 0 in %v, pages of %d; backlog written at %.0f appends/s by %d writers",
		n, el.Round(time.Millisecond), sh.page, float64(sh.catchup)/fill.Seconds(), min(sh.writers, sh.catchup))
	return res
}

// measure runs the three shapes on st, in order, and emits their results; it stops early when
// ctx ends.
func measure(ctx context.Context, st store, sys system, sh shapes) {
	for _, shape := range []struct {
		name string
		run  func(context.Context, store, system, shapes) peerresult.Result
	}{{"appends", appends}, {"push", push}, {"catchup", catchUp}} {
		if ctx.Err() != nil {
			return
		}
		progress("%s: %s", sys.name, shape.name)
		r := shape.run(ctx, st, sys, sh)
		if r.Skip != "" {
			progress("%s: %s skipped: %s", sys.name, shape.name, r.Skip)
		} else if r.Failed != "" {
			progress("%s: %s failed: %s", sys.name, shape.name, r.Failed)
		} else {
			progress("%s: %s: %s; %s", sys.name, shape.name, summary(r), r.Note)
		}
		emit(r)
	}
}

// summary is a result's figures, for a progress line.
func summary(r peerresult.Result) string {
	switch r.Shape {
	case peerresult.Appends:
		return fmt.Sprintf("%.0f acked/s, p50 %v, p99 %v, %d failed", r.PerSec, r.P50, r.P99, r.Errors)
	case peerresult.Push:
		return fmt.Sprintf("%d values pushed, p50 %v, p99 %v, %d appends failed", r.Count, r.P50, r.P99, r.Errors)
	}
	return fmt.Sprintf("%.0f entries/s", r.PerSec)
}
