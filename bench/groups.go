package bench

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/syncd-dev/syncd/proto"
)

// The large-group scenarios (issue #24): a group built by CreateGroup and AddMembers, messages
// sent to it, one member added, and the push of its messages to its members' live devices. They
// speak only the protocol: whether the server serves the group by write diffusion (an entry in
// every member's log) or read diffusion (a large group: its members' devices follow the
// conversation log as a source of their sync streams, docs/PROTOCOL.md §6 "Sources") is the
// server's large_group_threshold, and what each costs the server (disk bytes, the fan-out's
// delay) is measured by the caller around them (cmd/syncbench -scenario groups).

// mutationTimeout bounds the resends of one mutation the server sheds (overloaded, rate limited)
// or cannot take yet (timeout, unavailable): a write-diffusion fan-out of a 100,000-member
// group can keep a shard busy for a while.
const mutationTimeout = 2 * time.Minute

// mutate sends the mutation mk builds and waits for its Ack, resending it (the same cmid: at
// most one entry) after the server's retry-after while the answer is shed or retryable, for up to
// mutationTimeout. retried counts the resends.
func mutate(ctx context.Context, rs *reqStream, mk func(id uint64) proto.Frame) (a *proto.Ack, retried int, err error) {
	deadline := time.Now().Add(mutationTimeout)
	for {
		rctx, cancel := context.WithTimeout(ctx, requestTimeout)
		f, err := rs.do(rctx, mk)
		cancel()
		var wait time.Duration
		switch f := f.(type) {
		case *proto.Ack:
			return f, retried, nil
		case *proto.Error:
			if !shedCode(f.Code) && !retryableCode(f.Code) {
				return nil, retried, f
			}
			err, wait = f, max(f.RetryAfter(), 20*time.Millisecond)
		case nil:
			if err == nil || ctx.Err() != nil || !errors.Is(err, context.DeadlineExceeded) {
				return nil, retried, err
			}
			wait = 20 * time.Millisecond // a request that timed out: resend it
		default:
			return nil, retried, fmt.Errorf("bench: answered by %v", f.FrameType())
		}
		if time.Now().Add(wait).After(deadline) {
			return nil, retried, fmt.Errorf("bench: still refused after %v: %w", mutationTimeout, err)
		}
		retried++
		sleepCtx(ctx, wait)
	}
}

// session is one device of user with a request stream, on t's first node.
type session struct {
	dl *dialer
	c  *client
	rs *reqStream
}

func openSession(ctx context.Context, t Target, user string) (*session, error) {
	dl, err := newDialer(t, 1)
	if err != nil {
		return nil, err
	}
	c, err := dl.connect(ctx, user, 0)
	if err != nil {
		dl.close()
		return nil, err
	}
	rs, err := c.openRequests(ctx)
	if err != nil {
		c.close()
		dl.close()
		return nil, err
	}
	return &session{dl: dl, c: c, rs: rs}, nil
}

func (s *session) close() {
	s.c.close()
	s.dl.close()
}

// GroupBuildResult is the outcome of BuildGroup.
type GroupBuildResult struct {
	Members  int           // the group's members once built, its owner included
	Requests int           // the CreateGroup and the AddMembers
	Retried  int           // resends of requests the server shed or could not take yet
	Took     time.Duration // from the first request to the last ack
}

// BuildGroup creates group conv, owned by owner, of owner and members (who need never connect),
// naming at most proto.MaxMembers users per request — the CreateGroup with the first ones, then
// AddMembers with the rest, one request after another as a client would — and returns once the
// last is acked. The acks say the changes are committed to the group's conversation log; under
// write diffusion the fan-out to the members' logs goes on after them.
func BuildGroup(ctx context.Context, t Target, conv, owner string, members []string) (GroupBuildResult, error) {
	s, err := openSession(ctx, t, owner)
	if err != nil {
		return GroupBuildResult{}, err
	}
	defer s.close()
	run := runID()
	res := GroupBuildResult{Members: 1 + len(members)}
	start := time.Now()
	for i := 0; i == 0 || i < len(members); i += proto.MaxMembers {
		chunk := members[i:min(i+proto.MaxMembers, len(members))]
		cmid := run + "-build-" + strconv.Itoa(i)
		_, retried, err := mutate(ctx, s.rs, func(id uint64) proto.Frame {
			if i == 0 {
				return &proto.CreateGroup{ID: id, Conv: conv, ClientMsgID: cmid, Members: chunk}
			}
			return &proto.AddMembers{ID: id, Conv: conv, ClientMsgID: cmid, Members: chunk}
		})
		res.Requests++
		res.Retried += retried
		if err != nil {
			return res, fmt.Errorf("bench: building group %s, members %d–%d: %w", conv, i+1, i+len(chunk), err)
		}
	}
	res.Took = time.Since(start)
	return res, nil
}

// GroupJoin has owner add user to group conv (one AddMembers of one member) and returns the
// time from the request to its ack.
func GroupJoin(ctx context.Context, t Target, conv, owner, user string) (time.Duration, error) {
	s, err := openSession(ctx, t, owner)
	if err != nil {
		return 0, err
	}
	defer s.close()
	cmid := runID() + "-join"
	start := time.Now()
	if _, _, err := mutate(ctx, s.rs, func(id uint64) proto.Frame {
		return &proto.AddMembers{ID: id, Conv: conv, ClientMsgID: cmid, Members: []string{user}}
	}); err != nil {
		return 0, fmt.Errorf("bench: adding %s to %s: %w", user, conv, err)
	}
	return time.Since(start), nil
}

// GroupSendResult is the outcome of GroupSends.
type GroupSendResult struct {
	Acked    int           // messages acked (all of them, or GroupSends failed)
	Retried  int           // resends of messages the server shed or could not take yet
	Took     time.Duration // from the first send to the last ack
	P50, P99 time.Duration // send → ack of each message (resends included)
}

// GroupSends sends n messages of body bytes to group conv from member sender's device, window of
// them in flight at once (pipelined on one request stream), and returns once every one is acked.
func GroupSends(ctx context.Context, t Target, conv, sender string, n, window, body int) (GroupSendResult, error) {
	if n < 1 || window < 1 {
		return GroupSendResult{}, errors.New("bench: group sends need n ≥ 1 and window ≥ 1")
	}
	s, err := openSession(ctx, t, sender)
	if err != nil {
		return GroupSendResult{}, err
	}
	defer s.close()
	run := runID()
	payload := make([]byte, body)
	for i := range payload {
		payload[i] = byte('a' + i%26)
	}
	var next, retried atomic.Int64
	var firstErr atomic.Value
	lat := make([][]time.Duration, window)
	var wg sync.WaitGroup
	start := time.Now()
	for w := range window {
		wg.Go(func() {
			for {
				i := next.Add(1)
				if i > int64(n) || firstErr.Load() != nil {
					return
				}
				cmid := run + "-" + strconv.FormatInt(i, 10)
				t0 := time.Now()
				_, r, err := mutate(ctx, s.rs, func(id uint64) proto.Frame {
					return &proto.Send{ID: id, Conv: conv, ClientMsgID: cmid, Body: payload}
				})
				retried.Add(int64(r))
				if err != nil {
					firstErr.CompareAndSwap(nil, err)
					return
				}
				lat[w] = append(lat[w], time.Since(t0))
			}
		})
	}
	wg.Wait()
	all := slices.Concat(lat...)
	slices.Sort(all)
	res := GroupSendResult{Acked: len(all), Retried: int(retried.Load()), Took: time.Since(start),
		P50: percentile(all, 0.5), P99: percentile(all, 0.99)}
	if err, _ := firstErr.Load().(error); err != nil {
		return res, fmt.Errorf("bench: sending to %s: %w", conv, err)
	}
	return res, nil
}

// GroupPushConfig says what GroupPush measures.
type GroupPushConfig struct {
	Conv string // the conversation: a group, or the direct conversation of Sender and Peer
	// Peer is, for a direct conversation, its other user (Live is then Peer alone); "" for a
	// group.
	Peer   string
	Sender string   // the member who sends; its device does not sync
	Live   []string // the members whose devices connect and sync (the others never do)
	Rate   int      // messages per second, paced
	D      time.Duration
	Body   int // message body bytes, at least pushBodyMin
	// Ready, if set, is called once every device has received the warm-up, right before the
	// timed sends (to start a profile of the server, say).
	Ready func()
	// SourceAckEvery coalesces the devices' acks of a source (CursorAck{Source}): 0 acks every
	// source batch, as the SDK does; d > 0 acks a source at most once per d, with the newest
	// cursor, d after the first batch not acked yet (PROTOCOL §8.4 step 5: coalescing is fine).
	// A source's delivered marks then move up to d later. User-log batches are acked each.
	SourceAckEvery time.Duration
}

// catchUpParallel bounds the live devices of GroupPush catching up at once; catchUpWait is the
// longest one holds its turn.
const (
	catchUpParallel = 32
	catchUpWait     = 10 * time.Second
)

// pushBodyMin is the smallest body GroupPush sends: the run's mark (so that the group's earlier
// messages, replayed to a device catching up, are not taken for its own), the send's time and
// the message's number.
const pushBodyMin = 24

// GroupPushResult is the outcome of GroupPush.
type GroupPushResult struct {
	Live int // devices that synced
	// Ready is the time to connect them and have each receive a first message (the warm-up,
	// sent once every device's stream was open: so every device followed the group by then).
	Ready        time.Duration
	Sent, Failed int // timed messages acked, and not acked
	// Deliveries are the timed messages' arrivals on the live devices' streams; Missing those
	// (Sent × Live in all) that had not arrived 20 s after the last send.
	Deliveries, Missing int
	// SourceBatches and SourceEntries count the Batch frames of a source (Batch.Source set: a
	// large group followed by read diffusion) the devices received, and their entries. Zero
	// under write diffusion, where the group's entries come in the members' own logs.
	SourceBatches, SourceEntries int
	// Batches counts the Batch frames (of any log) the devices received from the first timed
	// send on: what the server sent, one frame per wake-up of a device's stream.
	Batches          int
	SendP50, SendP99 time.Duration // a message's send (client clock) → its arrival on each live device
	PushP50, PushP99 time.Duration // its append (server stamp, Entry.Time) → arrival, as Delivery measures
	AckP50, AckP99   time.Duration // send → ack at the sender
	// FirstP50 and LastP50, LastP99 are over the timed messages: each message's send → its
	// arrival on the first live device to get it, and on the last (the fan-out's spread).
	FirstP50, LastP50, LastP99 time.Duration
}

// GroupPush measures the push of a conversation's messages to its members' live devices. The
// Live members' devices connect (dialParallel at a time) and open their sync streams from the
// start of their logs (catchUpParallel of them catching up at a time), without sources: a device learns that it follows a large group from its
// log's `source: true` entry, and the server then sends the group's entries as the source's
// batches (the first with After), which the device checks for contiguity and acknowledges with
// CursorAck{Source} as the SDK does; the user log's batches are checked and acknowledged too.
// Once every stream is open the sender sends a warm-up message and waits for it to reach every
// device; then it sends Rate messages a second for D (each send in a goroutine of its own, as
// Delivery does), each body carrying its send time. Every arrival of a timed message on a live
// device is one delivery: its latency from the send (client clock) and from the server's
// append stamp (the clocks are the same host's).
func GroupPush(ctx context.Context, t Target, cfg GroupPushConfig) (GroupPushResult, error) {
	if cfg.Rate < 1 || len(cfg.Live) == 0 || cfg.Body < pushBodyMin || cfg.Sender == "" || cfg.Conv == "" {
		return GroupPushResult{}, fmt.Errorf("bench: group push needs a conversation, a sender, live members, a rate ≥ 1 and bodies of at least %d bytes", pushBodyMin)
	}
	begin := time.Now()
	mark := uint64(begin.UnixNano()) | 1
	snd, err := openSession(ctx, t, cfg.Sender)
	if err != nil {
		return GroupPushResult{}, err
	}
	defer snd.close()
	dl, err := newDialer(t, min(len(cfg.Live), 8))
	if err != nil {
		return GroupPushResult{}, err
	}
	defer dl.close()
	clients, err := dl.connectMany(ctx, cfg.Live, dialParallel)
	if err != nil {
		return GroupPushResult{}, err
	}
	devs := make([]*pushDevice, len(clients))
	var wg sync.WaitGroup
	var arrived, warm, timedBatches atomic.Int64
	var timed atomic.Bool
	readErr := make(chan error, 1)
	stopped := make(chan struct{})
	defer func() {
		close(stopped)
		for _, c := range clients {
			c.close()
		}
		wg.Wait()
	}()
	// The devices catch up catchUpParallel at a time (each replays its log and the group's
	// entries after its join): with a thousand replays at once through the few sockets of this
	// one load generator, some streams made no progress for the server's write timeout (10 s)
	// and were reset, which a fleet of real devices, each with its own socket and CPU, would not
	// see.
	sem := make(chan struct{}, catchUpParallel)
	for i, c := range clients {
		select {
		case sem <- struct{}{}:
		case err := <-readErr:
			return GroupPushResult{}, err
		case <-ctx.Done():
			return GroupPushResult{}, ctx.Err()
		}
		st, r, err := c.syncStream(ctx, &proto.SyncStart{MaxBatch: proto.MaxPage})
		if err != nil {
			return GroupPushResult{}, fmt.Errorf("bench: sync stream of %s: %w", c.user, err)
		}
		// The slot is given back when the device has caught up, when its stream ends, or after
		// catchUpWait whatever it has (the warm-up below checks that every device follows).
		release := sync.OnceFunc(func() { <-sem })
		timer := time.AfterFunc(catchUpWait, release)
		d := &pushDevice{user: c.user, conv: cfg.Conv, mark: mark, sources: map[string]*srcCursor{}, arrived: &arrived, warm: &warm,
			timed: &timed, batches: &timedBatches, caughtUp: release, ackEvery: cfg.SourceAckEvery}
		devs[i] = d
		wg.Go(func() {
			err := d.read(st, r) // only ever ends with an error
			timer.Stop()
			release()
			select {
			case <-stopped: // the streams are being closed
			case readErr <- fmt.Errorf("bench: %s's sync stream: %w", d.user, err):
			default:
			}
		})
	}

	run := runID()
	var msgs atomic.Int64
	send := func(sctx context.Context, n uint64) (time.Duration, error) {
		body := make([]byte, cfg.Body)
		t0 := time.Now()
		binary.LittleEndian.PutUint64(body, mark)
		binary.LittleEndian.PutUint64(body[8:], uint64(t0.UnixNano()))
		binary.LittleEndian.PutUint64(body[16:], n)
		cmid := run + "-" + strconv.FormatUint(n, 10)
		_, _, err := mutate(sctx, snd.rs, func(id uint64) proto.Frame {
			return &proto.Send{ID: id, Conv: cfg.Conv, Peer: cfg.Peer, ClientMsgID: cmid, Body: body}
		})
		msgs.Add(1)
		return time.Since(t0), err
	}
	// The warm-up: every device has its stream open and, once the message reaches it, follows
	// the group (a source's first batch comes after the user-log entry that starts it).
	if _, err := send(ctx, 0); err != nil {
		return GroupPushResult{}, fmt.Errorf("bench: group push, the warm-up message: %w", err)
	}
	if err := waitCount(ctx, &warm, int64(len(devs)), 2*time.Minute, readErr); err != nil {
		return GroupPushResult{}, fmt.Errorf("bench: group push, the warm-up reached %d of %d devices: %w", warm.Load(), len(devs), err)
	}
	res := GroupPushResult{Live: len(devs), Ready: time.Since(begin)}
	if cfg.Ready != nil {
		cfg.Ready()
	}
	timed.Store(true)

	total := int(float64(cfg.Rate) * cfg.D.Seconds())
	interval := time.Second / time.Duration(cfg.Rate)
	sctx, cancel := context.WithTimeout(ctx, cfg.D+mutationTimeout)
	defer cancel()
	var sent, failed atomic.Int64
	acks := make([]time.Duration, total)
	var swg sync.WaitGroup
	start := time.Now()
	for i := 1; i <= total; i++ {
		if wait := time.Until(start.Add(time.Duration(i-1) * interval)); wait > 0 {
			sleepCtx(ctx, wait)
		}
		swg.Go(func() {
			if lat, err := send(sctx, uint64(i)); err == nil {
				sent.Add(1)
				acks[i-1] = lat
			} else {
				failed.Add(1)
			}
		})
	}
	swg.Wait()
	res.Sent, res.Failed = int(sent.Load()), int(failed.Load())
	want := int64(res.Sent * len(devs))
	waitErr := waitCount(ctx, &arrived, want, 20*time.Second, readErr)

	// Stop the devices' readers before reading what they gathered.
	for _, c := range clients {
		c.close()
	}
	wg.Wait()
	res.Batches = int(timedBatches.Load())
	var sendLat, pushLat []time.Duration
	first, last := make([]time.Duration, total+1), make([]time.Duration, total+1)
	for _, d := range devs {
		sendLat = append(sendLat, d.sendLat...)
		pushLat = append(pushLat, d.pushLat...)
		for i, n := range d.msgNum {
			if n > uint64(total) {
				continue
			}
			l := d.sendLat[i]
			if first[n] == 0 || l < first[n] {
				first[n] = l
			}
			last[n] = max(last[n], l)
		}
		res.SourceBatches += d.srcBatches
		res.SourceEntries += d.srcEntries
	}
	first = slices.DeleteFunc(first, func(d time.Duration) bool { return d == 0 })
	last = slices.DeleteFunc(last, func(d time.Duration) bool { return d == 0 })
	slices.Sort(first)
	slices.Sort(last)
	res.FirstP50, res.LastP50, res.LastP99 = percentile(first, 0.5), percentile(last, 0.5), percentile(last, 0.99)
	slices.Sort(sendLat)
	slices.Sort(pushLat)
	acked := slices.DeleteFunc(acks, func(d time.Duration) bool { return d == 0 })
	slices.Sort(acked)
	res.Deliveries = len(sendLat)
	res.Missing = max(0, int(want)-res.Deliveries)
	res.SendP50, res.SendP99 = percentile(sendLat, 0.5), percentile(sendLat, 0.99)
	res.PushP50, res.PushP99 = percentile(pushLat, 0.5), percentile(pushLat, 0.99)
	res.AckP50, res.AckP99 = percentile(acked, 0.5), percentile(acked, 0.99)
	if waitErr != nil {
		return res, fmt.Errorf("bench: group push: %d of %d deliveries arrived: %w", res.Deliveries, want, waitErr)
	}
	if res.Sent == 0 {
		return res, errors.New("bench: group push: no message was acked")
	}
	return res, nil
}

// waitCount waits until n reaches want, for at most timeout; an error from errs ends it early.
func waitCount(ctx context.Context, n *atomic.Int64, want int64, timeout time.Duration, errs <-chan error) error {
	deadline := time.Now().Add(timeout)
	for n.Load() < want {
		if time.Now().After(deadline) {
			return fmt.Errorf("not within %v", timeout)
		}
		select {
		case err := <-errs:
			return err
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
	return nil
}

// srcCursor is a device's cursor in one source.
type srcCursor struct {
	epoch proto.Epoch
	pos   proto.Position
}

// pushDevice is one live device of GroupPush: what its reader saw. Its fields are its reader's
// until the reader returns.
type pushDevice struct {
	user, conv       string
	mark             uint64 // the run's mark, at the start of its messages' bodies
	epoch            proto.Epoch
	pos              proto.Position // in the user log
	sources          map[string]*srcCursor
	sendLat, pushLat []time.Duration
	msgNum           []uint64 // the number of the message of each sendLat
	srcBatches       int
	srcEntries       int
	arrived, warm    *atomic.Int64 // timed messages and warm-ups arrived, over every device
	timed            *atomic.Bool  // the timed sends have started
	batches          *atomic.Int64 // batches received since, over every device

	// Catching up: the device is ready once its user log and, if the log says it follows the
	// group as a source, the source have been sent up to their heads; caughtUp is called then.
	userCaught, srcCaught, expectSrc, ready bool
	caughtUp                                func()

	ackEvery time.Duration // GroupPushConfig.SourceAckEvery
}

// checkReady calls caughtUp the first time the device is caught up.
func (d *pushDevice) checkReady() {
	if !d.ready && d.userCaught && (!d.expectSrc || d.srcCaught) {
		d.ready = true
		d.caughtUp()
	}
}

// read reads the device's sync stream until it fails (the connection is closed at the end),
// checking each log's contiguity and acknowledging every batch as the SDK does.
func (d *pushDevice) read(st io.Writer, r *proto.Reader) error {
	acks := &acker{st: st, every: d.ackEvery}
	defer acks.stop()
	for {
		f, err := r.Next()
		now := time.Now()
		if err != nil {
			return err
		}
		switch f := f.(type) {
		case *proto.Batch:
			if len(f.Entries) == 0 {
				continue
			}
			if d.timed.Load() {
				d.batches.Add(1)
			}
			var ack proto.CursorAck
			if f.Source != "" {
				c := d.sources[f.Source]
				if c == nil {
					// A source this device has no cursor for starts at the batch's After, which
					// the user log's `source: true` entry for it, sent before, names.
					if f.After == 0 {
						return fmt.Errorf("source %s: a first batch without after", f.Source)
					}
					c = &srcCursor{epoch: f.Epoch, pos: f.After}
					d.sources[f.Source] = c
				} else if f.After != 0 {
					c.pos = f.After // added again after a removal (not in this benchmark)
				}
				for _, e := range f.Entries {
					if e.Seq != c.pos+1 {
						return fmt.Errorf("source %s: entry %d after %d", f.Source, e.Seq, c.pos)
					}
					c.pos = e.Seq
					d.entry(e, f.Source, now)
				}
				d.srcBatches++
				d.srcEntries += len(f.Entries)
				c.epoch = f.Epoch
				if f.Source == d.conv && c.pos >= f.Head {
					d.srcCaught = true
				}
				ack = proto.CursorAck{Epoch: f.Epoch, Pos: c.pos, Source: f.Source}
			} else {
				if f.Sub != 0 {
					return fmt.Errorf("a batch of sub-log %d: the user's stream is split", f.Sub)
				}
				for _, e := range f.Entries {
					if e.Seq != d.pos+1 {
						return fmt.Errorf("user log: entry %d after %d", e.Seq, d.pos)
					}
					d.pos = e.Seq
					if e.Source && e.Conv == d.conv {
						d.expectSrc = e.Kind != proto.KindMemberRemove
					}
					d.entry(e, "", now)
				}
				d.epoch = f.Epoch
				d.userCaught = d.userCaught || d.pos >= f.Head
				ack = proto.CursorAck{Epoch: f.Epoch, Pos: d.pos}
			}
			if err := acks.ack(ack); err != nil {
				return err
			}
			d.checkReady()
		case *proto.Heartbeat:
			// One comes at once for a log with nothing to replay.
			if f.Source == "" && f.Sub == 0 && f.Head <= d.pos {
				d.userCaught = true
			} else if f.Source == d.conv {
				if c := d.sources[f.Source]; c == nil || f.Head <= c.pos {
					d.srcCaught = true
				}
			}
			d.checkReady()
		case *proto.SourceEnd:
			return fmt.Errorf("source %s ended at %d", f.Source, f.Last)
		case *proto.Error:
			return f
		case *proto.TooOld, *proto.EpochChanged, *proto.Rebase:
			return fmt.Errorf("answered %v", f.FrameType())
		}
	}
}

// entry takes one entry that arrived at now: a message of the conversation measured is a
// delivery (or the warm-up).
func (d *pushDevice) entry(e proto.Entry, source string, now time.Time) {
	if e.Kind != proto.KindMessage || e.Conv != d.conv || len(e.Body) < pushBodyMin || binary.LittleEndian.Uint64(e.Body) != d.mark {
		return
	}
	if source != "" && source != e.Conv {
		return
	}
	sentAt := int64(binary.LittleEndian.Uint64(e.Body[8:]))
	n := binary.LittleEndian.Uint64(e.Body[16:])
	if n == 0 {
		d.warm.Add(1)
		return
	}
	d.msgNum = append(d.msgNum, n)
	d.sendLat = append(d.sendLat, time.Duration(now.UnixNano()-sentAt))
	d.pushLat = append(d.pushLat, time.Duration(now.UnixNano()-e.Time))
	d.arrived.Add(1)
}

// acker writes a device's CursorAcks on its sync stream: each user-log ack at once, a source's
// at once or coalesced (every > 0: at most one per source per every, with the newest cursor,
// written by a timer). Safe for concurrent use: the timer and the reader write through it.
type acker struct {
	mu      sync.Mutex
	st      io.Writer
	every   time.Duration
	pending map[string]proto.CursorAck // the newest ack of each source not written yet
	timer   *time.Timer                // flushes the pending acks
	armed   bool                       // the timer will fire: acks are pending
	err     error                      // the first write error of a coalesced ack
	stopped bool
}

// ack writes a or, for a source's with coalescing, keeps it for the next flush. It returns the
// error of a write, now or by an earlier flush.
func (a *acker) ack(ack proto.CursorAck) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.err != nil {
		return a.err
	}
	if ack.Source == "" || a.every <= 0 {
		return proto.WriteFrame(a.st, &ack)
	}
	if a.pending == nil {
		a.pending = map[string]proto.CursorAck{}
	}
	a.pending[ack.Source] = ack
	switch { // armed once per every, not pushed back by each batch: under steady traffic acks still go
	case a.timer == nil:
		a.timer = time.AfterFunc(a.every, a.flush)
	case !a.armed:
		a.timer.Reset(a.every)
	}
	a.armed = true
	return nil
}

// flush writes the pending acks (the timer's).
func (a *acker) flush() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.armed = false
	if a.stopped || a.err != nil {
		return
	}
	for src, ack := range a.pending {
		if err := proto.WriteFrame(a.st, &ack); err != nil {
			a.err = err
			return
		}
		delete(a.pending, src)
	}
}

// stop ends the coalescing: pending acks are dropped (the stream is ending) and the timer stops.
func (a *acker) stop() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.stopped = true
	if a.timer != nil {
		a.timer.Stop()
	}
}
