package syncd

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/syncd-dev/syncd/proto"
	"github.com/syncd-dev/syncd/syncd/transport"
)

// What the node holds for a client's requests, and for how long (issue 21, point 2). A request
// stream answers pipelined requests, each on a goroutine of its own, and an answer waits to be
// written until the client reads what came before it. A client that reads nothing used to make
// the node hold every answer (up to 64 per stream, each up to max_frame) and its goroutine for
// as long as the connection lived: one connection of 15 streams asking History of 64 KiB
// messages held 1.1 GB. Now:
//
//   - every request reserves bytes of its connection's, device's and user's answer budgets
//     (Config.MaxAnswerBytesPer…) before it is served, and holds them until its answer has been
//     written: max_frame for a query that may answer a page while it runs, the encoded size of
//     the answer while it waits to be written, at least answerOverhead (its goroutine, its
//     buffers). A request beyond a budget is refused at once with Overloaded and a
//     retry-after, written by the stream's reader itself, which reads nothing more meanwhile;
//   - every write to a request or sync stream must make progress within Config.WriteTimeout
//     (streamWriter): a client that does not read gets the stream reset with Timeout, both
//     ways, and the writes waiting behind it end at once, releasing what they held;
//   - queries count in Config.MaxInFlight like mutations, while they read.
//
// So one user costs the node at most MaxAnswerBytesPerUser of answers and about
// MaxAnswerBytesPerUser/answerOverhead goroutines waiting to write, for at most WriteTimeout at a
// time, however many devices, connections and streams it opens.

// answerOverhead is what every request costs while it is served, whatever its answer: its
// goroutine's stack, the decoded request and the small frames around it. It is also what a
// budget counts at least per request, so a budget bounds the goroutines as well as the bytes.
const answerOverhead = 16 << 10

// answerRetry is the retry-after of a request refused for want of answer budget: about the time
// a client that reads takes to receive a few pages.
const answerRetry = 250 * time.Millisecond

// pageAnswerCost is what a request whose answer may be a page (History, ConvList, Members), or
// that reads one (Digest: its entries are read before they are digested), reserves while it
// runs: a whole frame, plus the overhead.
func pageAnswerCost(maxFrame int) int64 { return int64(maxFrame) + answerOverhead }

// requestCost is what req reserves of the answer budgets until its answer is built: a page for
// a query that may answer one, and for a mutation the bytes it carries, which the request holds
// while it is replicated.
func requestCost(req proto.Request, maxFrame int) int64 {
	switch r := req.(type) {
	case *proto.History, *proto.ConvList, *proto.Members, *proto.Digest:
		return pageAnswerCost(maxFrame)
	case *proto.Send:
		return answerOverhead + int64(len(r.Body))
	case *proto.Edit:
		return answerOverhead + int64(len(r.Body))
	case *proto.CreateGroup:
		return answerOverhead + idsCost(r.Members)
	case *proto.AddMembers:
		return answerOverhead + idsCost(r.Members)
	case *proto.RemoveMembers:
		return answerOverhead + idsCost(r.Members)
	case *proto.SetRole:
		return answerOverhead + idsCost(r.Members)
	}
	return answerOverhead
}

// idsCost is about what a list of ids costs in memory: its bytes and a string header each.
func idsCost(ids []string) int64 {
	n := int64(0)
	for _, id := range ids {
		n += int64(len(id)) + 16
	}
	return n
}

// answerBudgets holds the bytes of answers reserved per device and per user on this node
// (Config.MaxAnswerBytesPerDevice, MaxAnswerBytesPerUser); each connection keeps its own share
// (connAnswers). Safe for concurrent use; the zero value is not ready (newAnswerBudgets).
type answerBudgets struct {
	perConn, perDevice, perUser int64
	held                        atomic.Int64 // all of this node's, for the metric

	mu      sync.Mutex
	devices map[string]int64 // by session.key(); keys at zero are deleted
	users   map[string]int64
}

func newAnswerBudgets(cfg Config) *answerBudgets {
	return &answerBudgets{perConn: cfg.MaxAnswerBytesPerConn, perDevice: cfg.MaxAnswerBytesPerDevice,
		perUser: cfg.MaxAnswerBytesPerUser, devices: map[string]int64{}, users: map[string]int64{}}
}

// connAnswers is one connection's share of the answer budgets. Safe for concurrent use.
type connAnswers struct {
	b            *answerBudgets
	user, device string // device is session.key()
	held         int64  // REQUIRES: b.mu
}

// reserve takes n bytes of the connection's, the device's and the user's budgets, or none of
// them and returns why not (which budget, how much it holds). force takes them even beyond the
// budgets: an answer built already is not refused for having come out a little larger than its
// estimate.
func (c *connAnswers) reserve(n int64, force bool) (ok bool, why string) {
	b := c.b
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case force:
	case c.held+n > b.perConn:
		return false, fmt.Sprintf("answers not yet read on this connection: %d bytes held, at most %d", c.held, b.perConn)
	case b.devices[c.device]+n > b.perDevice:
		return false, fmt.Sprintf("answers not yet read by this device: %d bytes held, at most %d", b.devices[c.device], b.perDevice)
	case b.users[c.user]+n > b.perUser:
		return false, fmt.Sprintf("answers not yet read by this user's devices: %d bytes held, at most %d", b.users[c.user], b.perUser)
	}
	c.held += n
	b.devices[c.device] += n
	b.users[c.user] += n
	b.held.Add(n)
	return true, ""
}

// release gives back n bytes reserved.
func (c *connAnswers) release(n int64) {
	b := c.b
	b.mu.Lock()
	defer b.mu.Unlock()
	c.held -= n
	if b.devices[c.device] -= n; b.devices[c.device] <= 0 {
		delete(b.devices, c.device)
	}
	if b.users[c.user] -= n; b.users[c.user] <= 0 {
		delete(b.users, c.user)
	}
	b.held.Add(-n)
}

// resize changes a reservation of *n bytes to m bytes (an answer built: its encoded size), taken
// even beyond the budgets (reserve's force).
func (c *connAnswers) resize(n *int64, m int64) {
	switch {
	case m < *n:
		c.release(*n - m)
	case m > *n:
		c.reserve(m-*n, true)
	}
	*n = m
}

// encodeAnswer encodes an answer whole, so that only its bytes are held while it waits to be
// written, not the entries it was built from. An answer that would exceed max_frame is a server
// bug (pages are packed to fit): it is replaced by Internal for the same request, logged once per
// connection (session.send does the same for frames written directly).
func (ss *session) encodeAnswer(f proto.Frame) []byte {
	bp := encodeBufs.Get().(*[]byte)
	b, err := proto.AppendFrame((*bp)[:0], f)
	if maxFrame := int(ss.s.cfg.Limits.MaxFrame); err == nil && len(b)-4 > maxFrame {
		err = fmt.Errorf("%w: %s frame of %d bytes, the peer's limit is %d", proto.ErrFrameTooLarge, f.FrameType(), len(b)-4, maxFrame)
	}
	// Held in a copy of its exact size: an appended buffer may have up to twice the room, which
	// the budgets would not see.
	out := make([]byte, len(b))
	copy(out, b)
	if cap(b) <= maxPooledEncode {
		*bp = b[:0]
		encodeBufs.Put(bp)
	}
	if err == nil {
		return out
	}
	var id uint64
	if r, ok := f.(proto.Response); ok {
		id = r.RequestID()
	}
	if !ss.oversize.Swap(true) {
		ss.s.logger.Error("an answer could not be encoded within max_frame and was not sent (a server bug)", "user", ss.user,
			"device", ss.device, "frame", f.FrameType().String(), "err", err)
	}
	b, _ = proto.AppendFrame(nil, &proto.Error{ID: id, Code: proto.CodeInternal, Message: "the answer exceeds max_frame; it was logged on the server"})
	return b
}

// encodeBufs are encodeAnswer's buffers, up to maxPooledEncode bytes each.
var encodeBufs = sync.Pool{New: func() any { return new([]byte) }}

const maxPooledEncode = 2 << 20

// writeChunk is how much of a frame one write to a stream hands QUIC at a time, each under its
// own deadline: WriteTimeout bounds a write without progress, not a large frame on a slow
// network (64 KiB in 10 s is 6.5 KB/s).
const writeChunk = 64 << 10

// deadlineWriter writes to a client's stream with a deadline per chunk: now + timeout, or the
// stream's cut-off if that comes first (streamWriter.cutOff).
type deadlineWriter struct {
	st      transport.Stream
	timeout time.Duration
	until   *atomic.Int64 // Unix ns; 0: none
}

func (w deadlineWriter) Write(p []byte) (int, error) {
	n := 0
	for n < len(p) {
		d := time.Now().Add(w.timeout)
		if u := w.until.Load(); u != 0 && u < d.UnixNano() {
			d = time.Unix(0, u)
		}
		w.st.SetWriteDeadline(d)
		m, err := w.st.Write(p[n:min(len(p), n+writeChunk)])
		n += m
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// stalled reports whether err is a write that made no progress within its deadline.
func stalled(err error) bool { return errors.Is(err, os.ErrDeadlineExceeded) }
