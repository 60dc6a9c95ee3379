package bench

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/syncd-dev/syncd/proto"
)

// dialParallel bounds the handshakes the bench has in progress at once. All its connections
// come from one address, and a server admits at most max_handshakes_per_source handshakes in
// progress from one address (default 16; the node's whole gate, max_handshakes, defaults to
// 256): a load generator on one machine keeps within that share rather than have its dials
// refused, as any client fleet behind one NAT would. More in flight would not open connections
// faster anyway: a handshake is CPU-bound on both ends of this loopback.
const dialParallel = 16

// requestTimeout bounds one request's answer.
const requestTimeout = 15 * time.Second

// runID makes user names and client message ids unique per run, so runs against the same data
// directory never collide with an earlier run's dedup entries.
func runID() string { return strconv.FormatInt(time.Now().UnixNano(), 36) }

// percentile returns the q-quantile (0..1) of sorted s, or 0 for none.
func percentile(s []time.Duration, q float64) time.Duration {
	if len(s) == 0 {
		return 0
	}
	return s[int(q*float64(len(s)-1)+0.5)]
}

// SendResult is the outcome of Sends.
type SendResult struct {
	Acked  int           // sends acked within the run
	Shed   int           // answers Overloaded or RateLimited (each retried after its hint)
	Errors int           // other errors: error frames, timeouts, dead streams
	PerSec float64       // acked sends per second
	P50    time.Duration // send→ack latency of the acked attempt
	P99    time.Duration
}

// sendOutcome is the result of one attempt.
type sendOutcome int

const (
	outAcked sendOutcome = iota
	outShed
	outRetry // retryable error: resend the same cmid
	outError
)

// attempt sends one Send and classifies the answer; wait is the server's retry hint.
func attempt(ctx context.Context, rs *reqStream, s proto.Send) (out sendOutcome, wait time.Duration, err error) {
	_, out, wait, err = attemptAck(ctx, rs, s, requestTimeout)
	return out, wait, err
}

// attemptAck is attempt with the Ack (when acked) and a bound on the wait for the answer.
func attemptAck(ctx context.Context, rs *reqStream, s proto.Send, timeout time.Duration) (*proto.Ack, sendOutcome, time.Duration, error) {
	rctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	f, err := rs.do(rctx, func(id uint64) proto.Frame { s.ID = id; return &s })
	if err != nil {
		return nil, outError, 0, err
	}
	switch f := f.(type) {
	case *proto.Ack:
		return f, outAcked, 0, nil
	case *proto.Error:
		switch {
		case shedCode(f.Code):
			return nil, outShed, f.RetryAfter(), f
		case retryableCode(f.Code):
			return nil, outRetry, max(f.RetryAfter(), 100*time.Millisecond), f
		}
		return nil, outError, 0, f
	}
	return nil, outError, 0, fmt.Errorf("bench: send answered by %v", f.FrameType())
}

// Sends opens devices connections (users u0…u{devices-1}), each with one pipelined request
// stream, and runs senders goroutines for d: sender i sends body-byte 1:1 messages from
// u{i mod devices} to the next user, one at a time (send, wait for the Ack, repeat) — the
// fixed-peer shape, one conversation per sender. Shed answers are retried with the same cmid
// after the server's retry-after.
func Sends(ctx context.Context, t Target, devices, senders int, d time.Duration, body int) (SendResult, error) {
	if devices < 2 || senders < 1 {
		return SendResult{}, errors.New("bench: sends needs at least 2 devices and 1 sender")
	}
	return sends(ctx, t, devices, senders, 0, d, body)
}

// SendsSpread is Sends on the peers' spread (issue #27), the shape etcd's and Redis's writers
// run: senders devices (users s0…), one sender each, each message to a random one of users
// recipients (r0…, not connected), so that the load is many conversations (one per pair, created
// by its first message) whose logs spread over every shard.
func SendsSpread(ctx context.Context, t Target, senders, users int, d time.Duration, body int) (SendResult, error) {
	if senders < 1 || users < 1 {
		return SendResult{}, errors.New("bench: sends needs at least 1 sender and 1 recipient")
	}
	return sends(ctx, t, senders, senders, users, d, body)
}

// sends is Sends (spread 0: to the next device's user) and SendsSpread (to one of spread users
// at random, from senders' own users).
func sends(ctx context.Context, t Target, devices, senders, spread int, d time.Duration, body int) (SendResult, error) {
	dl, err := newDialer(t, min(devices, 8))
	if err != nil {
		return SendResult{}, err
	}
	defer dl.close()
	users := make([]string, devices)
	for i := range users {
		users[i] = "u" + strconv.Itoa(i)
		if spread > 0 {
			users[i] = "s" + strconv.Itoa(i)
		}
	}
	clients, err := dl.connectMany(ctx, users, dialParallel)
	if err != nil {
		return SendResult{}, err
	}
	defer func() {
		for _, c := range clients {
			c.close()
		}
	}()
	streams := make([]*reqStream, devices)
	for i, c := range clients {
		if streams[i], err = c.openRequests(ctx); err != nil {
			return SendResult{}, fmt.Errorf("bench: request stream of %s: %w", c.user, err)
		}
	}

	run := runID()
	payload := make([]byte, body)
	for i := range payload {
		payload[i] = byte('a' + i%26)
	}
	var acked, shed, errs atomic.Int64
	lat := make([][]time.Duration, senders)
	start := time.Now()
	deadline := start.Add(d)
	sctx, cancel := context.WithDeadline(ctx, deadline.Add(requestTimeout))
	defer cancel()
	var wg sync.WaitGroup
	var firstErr atomic.Value
	for i := range senders {
		wg.Go(func() {
			from := i % devices
			to := users[(from+1)%devices]
			rs := streams[from]
			rng := rand.New(rand.NewPCG(uint64(i), uint64(start.UnixNano())))
			msg := proto.Send{Conv: proto.DirectConv(users[from], to), Peer: to, Body: payload}
			for n := 0; time.Now().Before(deadline); n++ {
				if spread > 0 {
					to = "r" + strconv.Itoa(rng.IntN(spread))
					msg.Conv, msg.Peer = proto.DirectConv(users[from], to), to
				}
				msg.ClientMsgID = run + "-" + strconv.Itoa(i) + "-" + strconv.Itoa(n)
				for time.Now().Before(deadline) { // attempts of one message, same cmid
					t0 := time.Now()
					out, wait, err := attempt(sctx, rs, msg)
					t1 := time.Now()
					if out == outAcked {
						if t1.Before(deadline) {
							acked.Add(1)
							lat[i] = append(lat[i], t1.Sub(t0))
						}
						break
					}
					if out == outShed {
						shed.Add(1)
					} else {
						errs.Add(1)
						firstErr.CompareAndSwap(nil, fmt.Sprint(err))
					}
					if out == outError {
						sleepCtx(sctx, 10*time.Millisecond) // no tight loop on a broken path
						break
					}
					sleepCtx(sctx, wait)
				}
			}
		})
	}
	wg.Wait()
	var all []time.Duration
	for _, l := range lat {
		all = append(all, l...)
	}
	slices.Sort(all)
	res := SendResult{Acked: int(acked.Load()), Shed: int(shed.Load()), Errors: int(errs.Load()),
		PerSec: float64(acked.Load()) / d.Seconds(), P50: percentile(all, 0.5), P99: percentile(all, 0.99)}
	if res.Acked == 0 {
		return res, fmt.Errorf("bench: no send was acked (first error: %v)", firstErr.Load())
	}
	return res, nil
}

// DeliveryResult is the outcome of Delivery.
type DeliveryResult struct {
	Sender, Receiver string        // the run's first pair of users (fresh ones every run)
	Receivers        int           // live receivers (one sender each)
	Count            int           // entries delivered to the receivers' sync streams
	Sent             int           // sends acked
	Errors           int           // sends not acked (error answers, shed, timeouts)
	P50, P99         time.Duration // append (entry time, server clock) → arrival on a receiver's sync stream, of the paced sends
}

// Delivery paces sends at rate sends/s for d, spread in turn over receivers pairs of fresh users
// (a sender and a receiver each, in a direct conversation of their own), and measures, for every
// entry, its arrival on its receiver's sync stream, open from the start of the log, minus its
// server append time (client and server on the same host clock). Each pair's first send, which
// creates its conversation, goes out with all the other pairs' at once before the paced ones and
// is left out of the latencies (with 200 pairs, that burst alone was 2% of the entries, the whole
// of the p99). With many receivers the
// conversations and the receivers' logs spread over the shards, so each source shard fans out to
// many destinations at once (issue #11 measures 200 at 1,000 sends/s); with one, a single stream
// is timed. The devices are spread over a cluster's nodes so that each sender is on another node
// than its receiver.
func Delivery(ctx context.Context, t Target, rate, receivers int, d time.Duration) (DeliveryResult, error) {
	if rate < 1 || receivers < 1 {
		return DeliveryResult{}, errors.New("bench: delivery needs a rate ≥ 1 and a receiver")
	}
	dl, err := newDialer(t, min(2*receivers, 8))
	if err != nil {
		return DeliveryResult{}, err
	}
	defer dl.close()
	run := runID()
	users := make([]string, 0, 2*receivers) // sender k at 2k, its receiver at 2k+1
	for k := range receivers {
		users = append(users, "dsnd"+strconv.Itoa(k)+"-"+run, "drcv"+strconv.Itoa(k)+"-"+run)
	}
	clients, err := dl.connectMany(ctx, users, dialParallel)
	if err != nil {
		return DeliveryResult{}, err
	}
	defer func() {
		for _, c := range clients {
			c.close()
		}
	}()
	type pair struct {
		snd, rcv *client
		rs       *reqStream
		conv     string
	}
	pairs := make([]pair, receivers)
	var mu sync.Mutex
	var lat []time.Duration  // of the paced sends
	arrived := 0             // entries arrived, the first sends' too
	got := make(chan int, 1) // arrived, after each batch
	readErr := make(chan error, 1)
	for k := range pairs {
		p := &pairs[k]
		p.snd, p.rcv = clients[2*k], clients[2*k+1]
		p.conv = proto.DirectConv(p.snd.user, p.rcv.user)
		if p.rs, err = p.snd.openRequests(ctx); err != nil {
			return DeliveryResult{}, err
		}
		st, r, err := p.rcv.syncStream(ctx, &proto.SyncStart{MaxBatch: proto.MaxPage})
		if err != nil {
			return DeliveryResult{}, err
		}
		// Wait for the stream to be live (a heartbeat comes at once when there is nothing to
		// replay).
		st.SetReadDeadline(time.Now().Add(10 * time.Second))
		if f, err := r.Next(); err != nil {
			return DeliveryResult{}, fmt.Errorf("bench: receiver sync stream: %w", err)
		} else if e, ok := f.(*proto.Error); ok {
			return DeliveryResult{}, fmt.Errorf("bench: receiver sync stream: %w", e)
		}
		st.SetReadDeadline(time.Time{})
		go func() {
			var pos proto.Position
			for {
				f, err := r.Next()
				now := time.Now().UnixNano()
				if err != nil {
					select {
					case readErr <- err:
					default:
					}
					return
				}
				b, ok := f.(*proto.Batch)
				if !ok {
					continue
				}
				mu.Lock()
				for _, e := range b.Entries {
					if e.Seq != pos+1 {
						mu.Unlock()
						select {
						case readErr <- fmt.Errorf("bench: delivery: entry %d after %d", e.Seq, pos):
						default:
						}
						return
					}
					pos = e.Seq
					arrived++
					if e.Seq > 1 { // the first, which created the conversation, was sent with all the others' at once
						lat = append(lat, time.Duration(now-e.Time))
					}
				}
				n := arrived
				mu.Unlock()
				select {
				case <-got:
				default:
				}
				got <- n
			}
		}()
	}

	payload := make([]byte, 256)
	var sent, failed atomic.Int64
	var wg sync.WaitGroup
	sctx, cancel := context.WithTimeout(ctx, d+requestTimeout)
	defer cancel()
	// Each pair's first send creates its conversation; send those alone so the paced ones do not
	// race them.
	var firstErr atomic.Value
	for k := range pairs {
		wg.Go(func() {
			p := pairs[k]
			if out, _, err := attempt(sctx, p.rs, proto.Send{Conv: p.conv, Peer: p.rcv.user, ClientMsgID: run + "-" + strconv.Itoa(k) + "-0", Body: payload}); out != outAcked {
				firstErr.CompareAndSwap(nil, fmt.Sprintf("bench: delivery: first send of %s: %v", p.snd.user, err))
				return
			}
			sent.Add(1)
		})
	}
	wg.Wait()
	if e := firstErr.Load(); e != nil {
		return DeliveryResult{}, errors.New(e.(string))
	}
	total := int(float64(rate) * d.Seconds())
	start := time.Now()
	interval := time.Second / time.Duration(rate)
	for i := 1; i <= total; i++ {
		if wait := time.Until(start.Add(time.Duration(i) * interval)); wait > 0 {
			time.Sleep(wait)
		}
		wg.Go(func() {
			k := i % receivers
			p := pairs[k]
			out, _, _ := attempt(sctx, p.rs, proto.Send{Conv: p.conv, Peer: p.rcv.user, ClientMsgID: run + "-" + strconv.Itoa(k) + "-" + strconv.Itoa(i), Body: payload})
			if out == outAcked {
				sent.Add(1)
			} else {
				failed.Add(1)
			}
		})
	}
	wg.Wait()
	want := int(sent.Load())
	timeout := time.After(10 * time.Second)
wait:
	for {
		mu.Lock()
		n := arrived
		mu.Unlock()
		if n >= want {
			break
		}
		select {
		case <-got:
		case err := <-readErr:
			return DeliveryResult{}, fmt.Errorf("bench: delivery: sync stream: %w", err)
		case <-timeout:
			break wait
		}
	}
	mu.Lock()
	all, count := slices.Clone(lat), arrived
	mu.Unlock()
	slices.Sort(all)
	res := DeliveryResult{Sender: pairs[0].snd.user, Receiver: pairs[0].rcv.user, Receivers: receivers, Count: count,
		Sent: want, Errors: int(failed.Load()), P50: percentile(all, 0.5), P99: percentile(all, 0.99)}
	if res.Count < want {
		return res, fmt.Errorf("bench: delivery: %d of %d acked entries arrived within 10s", res.Count, want)
	}
	return res, nil
}

// CatchUpResult is the outcome of CatchUp.
type CatchUpResult struct {
	Entries    int           // entries replayed
	Duration   time.Duration // from SyncStart to the last entry
	PerSec     float64
	Batch      int     // entries per Batch in use (the server's max_batch)
	FillPerSec float64 // rate at which the backlog was written (acked sends/s)
}

// catchUpSenders and catchUpWindow: the backlog is written by this many sender devices with
// this many sends in flight each.
const (
	catchUpSenders = 8
	catchUpWindow  = 32
)

// CatchUp fills a fresh user's log with entries messages from several pipelined sender
// devices (FillBacklog), then times the replay of the whole backlog through a new connection of
// the user's device (Replay).
func CatchUp(ctx context.Context, t Target, entries int) (CatchUpResult, error) {
	b, err := FillBacklog(ctx, t, entries)
	if err != nil {
		return CatchUpResult{}, err
	}
	res, err := Replay(ctx, t, b)
	res.FillPerSec = b.FillPerSec
	return res, err
}

// Backlog is a user log written by FillBacklog, for Replay.
type Backlog struct {
	User       string         // the user whose log holds the backlog
	Head       proto.Position // its head once filled: the entries to replay
	FillPerSec float64        // rate at which the backlog was written (acked sends/s)
}

// FillBacklog writes entries messages to a fresh user's log from catchUpSenders sender devices
// (spread over t's nodes), each keeping catchUpWindow sends in flight, and returns once every
// send is acked and a HeadCheck on the first of t's nodes shows them all.
func FillBacklog(ctx context.Context, t Target, entries int) (Backlog, error) {
	if entries < 1 {
		return Backlog{}, errors.New("bench: catch-up needs entries ≥ 1")
	}
	dl, err := newDialer(t, 4)
	if err != nil {
		return Backlog{}, err
	}
	defer dl.close()
	run := runID()
	rcvUser := "cu-" + run
	var users []string
	for k := range catchUpSenders {
		users = append(users, "cus"+strconv.Itoa(k)+"-"+run)
	}
	clients, err := dl.connectMany(ctx, users, len(users))
	if err != nil {
		return Backlog{}, err
	}
	defer func() {
		for _, c := range clients {
			c.close()
		}
	}()

	// Message n goes from sender n mod catchUpSenders; each sender keeps catchUpWindow sends in
	// flight.
	payload := make([]byte, 256)
	var next atomic.Int64
	// acked counts what the log will hold: a sender's first send, made after other senders'
	// workers took the last numbers, comes on top of entries.
	var acked atomic.Int64
	var failed atomic.Value
	var wg sync.WaitGroup
	fillStart := time.Now()
	for k, c := range clients {
		rs, err := c.openRequests(ctx)
		if err != nil {
			return Backlog{}, err
		}
		conv := proto.DirectConv(c.user, rcvUser)
		// Create the conversation first, alone.
		if out, _, err := attempt(ctx, rs, proto.Send{Conv: conv, Peer: rcvUser, ClientMsgID: run + "-c" + strconv.Itoa(k), Body: payload}); out != outAcked {
			return Backlog{}, fmt.Errorf("bench: catch-up: first send of %s: %v", c.user, err)
		}
		next.Add(1)
		acked.Add(1)
		for range catchUpWindow {
			wg.Go(func() {
				for {
					n := next.Add(1)
					if n > int64(entries) {
						return
					}
					msg := proto.Send{Conv: conv, Peer: rcvUser, ClientMsgID: run + "-" + strconv.FormatInt(n, 10), Body: payload}
					for tries := 0; ; tries++ {
						out, wait, err := attempt(ctx, rs, msg)
						if out == outAcked {
							acked.Add(1)
							break
						}
						if out == outError || tries > 50 || ctx.Err() != nil {
							failed.CompareAndSwap(nil, fmt.Sprint(err))
							return
						}
						sleepCtx(ctx, max(wait, 10*time.Millisecond))
					}
				}
			})
		}
	}
	wg.Wait()
	if f := failed.Load(); f != nil {
		return Backlog{}, fmt.Errorf("bench: catch-up: filling the backlog: %v", f)
	}
	b := Backlog{User: rcvUser, FillPerSec: float64(entries) / time.Since(fillStart).Seconds()}
	rcv, err := dl.connect(ctx, rcvUser, 0)
	if err != nil {
		return Backlog{}, err
	}
	defer rcv.close()
	b.Head, err = waitHead(ctx, rcv, proto.Position(acked.Load()))
	return b, err
}

// waitHead polls c's user log head with HeadCheck until it reaches want (30s at most) and
// returns it.
func waitHead(ctx context.Context, c *client, want proto.Position) (proto.Position, error) {
	rs, err := c.openRequests(ctx)
	if err != nil {
		return 0, err
	}
	defer rs.st.Close()
	for wait := time.Now().Add(30 * time.Second); ; {
		head, err := rs.head(ctx)
		if err != nil {
			return 0, fmt.Errorf("bench: head check: %w", err)
		}
		if head >= want {
			return head, nil
		}
		if time.Now().After(wait) {
			return 0, fmt.Errorf("bench: %s's head %d, want %d", c.user, head, want)
		}
		sleepCtx(ctx, 50*time.Millisecond)
	}
}

// Replay connects b.User's device to t (its first node), waits until a HeadCheck there shows
// b.Head (so the replica that node reads has it all), then opens a sync stream from 0 (asking
// for the largest batches) and times the replay of the whole backlog, checking that positions
// are contiguous. FillPerSec is left zero.
func Replay(ctx context.Context, t Target, b Backlog) (CatchUpResult, error) {
	dl, err := newDialer(t, 1)
	if err != nil {
		return CatchUpResult{}, err
	}
	defer dl.close()
	rcv, err := dl.connect(ctx, b.User, 0)
	if err != nil {
		return CatchUpResult{}, err
	}
	defer rcv.close()
	head, err := waitHead(ctx, rcv, b.Head)
	if err != nil {
		return CatchUpResult{}, fmt.Errorf("bench: catch-up: %w", err)
	}

	start := time.Now()
	st, r, err := rcv.syncStream(ctx, &proto.SyncStart{MaxBatch: proto.MaxPage})
	if err != nil {
		return CatchUpResult{}, err
	}
	st.SetReadDeadline(start.Add(2 * time.Minute))
	var pos proto.Position
	batch := 0
	for pos < head {
		f, err := r.Next()
		if err != nil {
			return CatchUpResult{}, fmt.Errorf("bench: catch-up: sync stream at %d of %d: %w", pos, head, err)
		}
		switch f := f.(type) {
		case *proto.Batch:
			batch = max(batch, len(f.Entries))
			for _, e := range f.Entries {
				if e.Seq != pos+1 {
					return CatchUpResult{}, fmt.Errorf("bench: catch-up: entry %d after %d", e.Seq, pos)
				}
				pos = e.Seq
			}
		case *proto.Error:
			return CatchUpResult{}, fmt.Errorf("bench: catch-up: sync stream: %w", f)
		case *proto.TooOld, *proto.Rebase, *proto.EpochChanged:
			return CatchUpResult{}, fmt.Errorf("bench: catch-up: sync stream answered %v", f.FrameType())
		}
	}
	el := time.Since(start)
	return CatchUpResult{Entries: int(head), Duration: el, PerSec: float64(head) / el.Seconds(), Batch: batch}, nil
}

// IdleResult is the outcome of Idle: conns connections are open until Close is called.
type IdleResult struct {
	Conns int
	Close func()
}

// Idle opens conns authenticated connections (users i0…, each with its sync stream open and
// live), dialling at most dialParallel at once, and leaves them open until Close.
func Idle(ctx context.Context, t Target, conns int) (IdleResult, error) {
	dl, err := newDialer(t, 8)
	if err != nil {
		return IdleResult{}, err
	}
	users := make([]string, conns)
	for i := range users {
		users[i] = "i" + strconv.Itoa(i)
	}
	clients := make([]*client, conns)
	closeAll := func() {
		for _, c := range clients {
			if c != nil {
				c.close()
			}
		}
		dl.close()
	}
	sem := make(chan struct{}, dialParallel)
	var wg sync.WaitGroup
	var first atomic.Value
	for i, u := range users {
		if first.Load() != nil {
			break
		}
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			c, err := dl.connect(ctx, u, i)
			if err == nil {
				clients[i] = c
				err = openIdleSync(ctx, c)
			}
			if err != nil {
				first.CompareAndSwap(nil, fmt.Errorf("bench: idle connection %s: %w", u, err))
			}
		})
	}
	wg.Wait()
	if err, _ := first.Load().(error); err != nil {
		closeAll()
		return IdleResult{}, err
	}
	return IdleResult{Conns: conns, Close: closeAll}, nil
}

// openIdleSync opens c's sync stream and waits for its first frame (the stream is live).
func openIdleSync(ctx context.Context, c *client) error {
	st, r, err := c.syncStream(ctx, &proto.SyncStart{})
	if err != nil {
		return err
	}
	st.SetReadDeadline(time.Now().Add(15 * time.Second))
	f, err := r.Next()
	st.SetReadDeadline(time.Time{})
	if err != nil {
		return asProtoError(err)
	}
	if e, ok := f.(*proto.Error); ok {
		return e
	}
	return nil
}
