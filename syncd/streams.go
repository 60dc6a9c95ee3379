package syncd

import (
	"context"
	"errors"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/syncd-dev/syncd/proto"
	"github.com/syncd-dev/syncd/syncd/transport"
)

// How the server treats what a client sends on its request and sync streams (PROTOCOL §3, "A
// receiver handles bad frames"): every bad frame gets an Error, and then either the stream goes
// on, or it is reset, or the connection is closed. One table for both kinds of stream, so they
// cannot drift apart.
//
// "Reset" means: the Error frame is written, the answers to requests already received follow,
// the sending side ends normally (FIN — a QUIC RESET_STREAM would discard the Error), and the
// receiving side is stopped with STOP_SENDING carrying the Error's code, so nothing the client
// sent after the bad frame is read.

// fault is what a frame read from a client stream means for that stream.
type fault uint8

const (
	faultNone  fault = iota // a frame was read
	faultSkip               // answered; the stream goes on (the frame was consumed)
	faultReset              // answered; the stream is reset
	faultClose              // answered; the connection is closed with the code
	faultEnd                // the stream ended or failed: nothing to answer
)

// classify maps an error of proto.Reader.Next to its code and fault.
func classify(err error) (proto.Code, fault) {
	switch {
	case err == nil:
		return 0, faultNone
	case errors.Is(err, proto.ErrUnknownType):
		return proto.CodeUnknownFrame, faultSkip
	case errors.Is(err, proto.ErrMalformed):
		return proto.CodeMalformed, faultSkip
	case errors.Is(err, proto.ErrBadVersion):
		// Another frame version is another encoding: nothing else this client sends can be
		// trusted to mean what it says, on this stream or another.
		return proto.CodeUnsupportedVersion, faultClose
	case errors.Is(err, proto.ErrFrameTooLarge):
		return proto.CodeFrameTooLarge, faultReset // the next frame cannot be found
	case errors.Is(err, io.ErrUnexpectedEOF):
		return proto.CodeMalformed, faultReset // the client ended its side inside a frame
	}
	return 0, faultEnd // io.EOF, the read deadline, a reset by the client, the connection gone
}

// onFault answers a fault on a client stream: an Error (id 0) with code and msg, and for
// faultClose the connection's close. It returns what the caller does with the stream next.
func (ss *session) onFault(w *streamWriter, code proto.Code, what fault, msg string) fault {
	switch what {
	case faultSkip, faultReset:
		w.send(&proto.Error{Code: code, Message: msg})
	case faultClose:
		e := &proto.Error{Code: code, Message: msg}
		w.send(e) // best effort: the close may overtake it, and the close's reason carries it too
		ss.end(e)
	}
	return what
}

// codeForFrameError is the wire code of a framing error, as classify maps it; malformed for an
// error classify has no code for.
func codeForFrameError(err error) proto.Code {
	if code, _ := classify(err); code != 0 {
		return code
	}
	return proto.CodeMalformed
}

// streamWriter writes frames to one stream for several goroutines (a request stream's answers,
// a sync stream's batches and its answers to upstream frames). Every write must make progress
// within Config.WriteTimeout (deadlineWriter): one that does not — the client reads nothing —
// resets the stream both ways with Timeout, so the stream's reader ends and the writes waiting
// behind it fail at once, releasing what they held (answers.go). After a failed write the stream
// may hold part of a frame, so nothing more is written to it. Safe for concurrent use.
type streamWriter struct {
	ss    *session
	st    transport.Stream
	until atomic.Int64 // cutOff's deadline, Unix ns; 0: none

	mu  sync.Mutex
	err error // the first failed write
}

// send writes f within the connection's max_frame (session.send).
func (w *streamWriter) send(f proto.Frame) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err != nil {
		return w.err
	}
	err := w.ss.send(w.out(), f)
	if err != nil && !errors.Is(err, proto.ErrFrameTooLarge) { // the replacement Error was a whole frame
		w.failLocked(err)
	}
	return err
}

// sendEncoded writes a frame of type t encoded already, like send (session.sendEncoded).
func (w *streamWriter) sendEncoded(t proto.Type, frame []byte) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err != nil {
		return w.err
	}
	err := w.ss.sendEncoded(w.out(), t, frame)
	if err != nil && !errors.Is(err, proto.ErrFrameTooLarge) {
		w.failLocked(err)
	}
	return err
}

// sendAnswer writes a frame encoded already and checked against max_frame
// (session.encodeAnswer).
func (w *streamWriter) sendAnswer(frame []byte) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err != nil {
		return w.err
	}
	_, err := w.out().Write(frame)
	if err != nil {
		w.failLocked(err)
	}
	return err
}

// out is the stream under the write deadlines.
func (w *streamWriter) out() deadlineWriter {
	return deadlineWriter{st: w.st, timeout: w.ss.s.cfg.WriteTimeout, until: &w.until}
}

// cutOff gives the writes from now on, and the one in progress, d at most: an ending stream does
// not wait long for a client that does not read. (A chunk begun just before may keep its own
// deadline, at most WriteTimeout.)
func (w *streamWriter) cutOff(d time.Duration) {
	until := time.Now().Add(d)
	w.until.Store(until.UnixNano())
	w.st.SetWriteDeadline(until)
}

// failLocked records the first failed write. One that made no progress within WriteTimeout
// resets the stream both ways with Timeout: its client does not read, so nothing it sent is
// worth reading either. One cut off by cutOff is left to the stream's owner, which resets the
// stream with its own code.
//
// REQUIRES: w.mu
func (w *streamWriter) failLocked(err error) {
	w.err = err
	if stalled(err) && w.until.Load() == 0 {
		w.ss.s.metrics.writeTimedOut()
		w.st.CancelWrite(uint64(proto.CodeTimeout))
		w.st.CancelRead(uint64(proto.CodeTimeout))
	}
}

// failed reports whether a write has failed.
func (w *streamWriter) failed() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err != nil
}

// errSuperseded ends a sync stream that a newer one of the same device replaced.
var errSuperseded = errors.New("superseded by a newer sync stream of this device")

// syncStreams holds the live sync stream of each device on this node: a device has one sync
// stream (PROTOCOL §2), and a new one supersedes the old, on the same connection or another.
// Safe for concurrent use; the zero value is ready.
type syncStreams struct {
	mu sync.Mutex
	m  map[string]*liveSync
}

// liveSync is one registered sync stream; end stops it with a cause.
type liveSync struct{ end context.CancelCauseFunc }

// take registers s as key's sync stream and ends the one it replaces, with errSuperseded.
func (r *syncStreams) take(key string, s *liveSync) {
	r.mu.Lock()
	if r.m == nil {
		r.m = map[string]*liveSync{}
	}
	old := r.m[key]
	r.m[key] = s
	r.mu.Unlock()
	if old != nil {
		old.end(errSuperseded)
	}
}

// release unregisters s, unless a newer stream has taken its place already.
func (r *syncStreams) release(key string, s *liveSync) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.m[key] == s {
		delete(r.m, key)
	}
}

// resetCause ends a sync stream that is to be reset with code, its Error already sent.
type resetCause struct{ code proto.Code }

func (r *resetCause) Error() string { return "sync stream reset: " + r.code.String() }
