package proto

import (
	"context"
	"errors"
	"sync"
)

// ErrStreamClosed is the error of [Pending.Wait] when the request stream ended and the reader
// called [Pending.Fail] without saying why.
var ErrStreamClosed = errors.New("proto: request stream closed")

// Pending matches the responses read from one request stream to the requests waiting for them,
// by request id (responses may come out of order). It is the client side of request
// pipelining:
//
//	id, ch, err := p.Add()         // a fresh id, and where its answer will arrive
//	write the request with id      // (the caller serializes writes on the stream)
//	f, err := p.Wait(ctx, id, ch)  // the answer, the stream's end, or ctx
//
// while one reader goroutine calls [Pending.Deliver] for every frame it reads and
// [Pending.Fail] once when the stream dies, which fails every waiter and every later Add.
//
// The zero value is ready to use. A Pending is safe for concurrent use; it starts no goroutine.
// Ids start at 1 (0 means "not tied to a request" on the wire) and are never reused.
type Pending struct {
	mu struct {
		sync.Mutex
		next uint64
		wait map[uint64]chan Frame
		dead chan struct{} // closed by Fail
		err  error         // why; set before dead is closed
	}
}

// deadLocked returns the channel Fail closes, creating it on first use (so the zero value works).
// REQUIRES: p.mu
func (p *Pending) deadLocked() chan struct{} {
	if p.mu.dead == nil {
		p.mu.dead = make(chan struct{})
	}
	return p.mu.dead
}

// Add registers a new request and returns its id and the channel its response will arrive on
// (buffered, so Deliver never blocks). After Fail it returns the failure's error instead: no
// answer could be read for a request sent now. The caller must end the request with Wait or
// Forget, or its entry stays until Fail.
func (p *Pending) Add() (uint64, <-chan Frame, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.mu.err != nil {
		return 0, nil, p.mu.err
	}
	if p.mu.wait == nil {
		p.mu.wait = make(map[uint64]chan Frame)
	}
	p.mu.next++
	ch := make(chan Frame, 1)
	p.mu.wait[p.mu.next] = ch
	return p.mu.next, ch, nil
}

// Wait returns the response to request id (ch is what Add returned with it), or the error given
// to Fail if the stream dies first, or ctx.Err(). A response that arrived is returned even if
// the stream died or ctx ended meanwhile. Either way id is forgotten.
func (p *Pending) Wait(ctx context.Context, id uint64, ch <-chan Frame) (Frame, error) {
	defer p.Forget(id)
	select {
	case f := <-ch:
		return f, nil
	default:
	}
	select {
	case f := <-ch:
		return f, nil
	case <-p.Done():
		select {
		case f := <-ch: // delivered just before the stream died
			return f, nil
		default:
		}
		return nil, p.Err()
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// Forget drops request id (given up on: cancelled, or its request could not be written), so a
// late response is discarded. Forgetting an unknown or answered id does nothing.
func (p *Pending) Forget(id uint64) {
	p.mu.Lock()
	delete(p.mu.wait, id)
	p.mu.Unlock()
}

// Deliver hands f to the request it answers, by its [Response.RequestID], and reports whether
// one was waiting. Frames that are not responses, carry id 0 (an Error not tied to a request),
// or answer a request that was forgotten or already answered are dropped (false). Safe to call
// after Fail, when it drops everything.
func (p *Pending) Deliver(f Frame) bool {
	r, ok := f.(Response)
	if !ok || r.RequestID() == 0 {
		return false
	}
	p.mu.Lock()
	ch := p.mu.wait[r.RequestID()]
	delete(p.mu.wait, r.RequestID())
	p.mu.Unlock()
	if ch == nil {
		return false
	}
	ch <- f // never blocks: buffered, and only one Deliver finds ch
	return true
}

// Fail records that the stream died with err (nil means [ErrStreamClosed]): every waiter and
// every later Add and Wait get it. Only the first call counts; later ones do nothing.
func (p *Pending) Fail(err error) {
	if err == nil {
		err = ErrStreamClosed
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.mu.err != nil {
		return
	}
	p.mu.err = err
	p.mu.wait = nil // nothing can be answered any more
	close(p.deadLocked())
}

// Done returns a channel closed by Fail: select on it to notice the stream's end.
func (p *Pending) Done() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.deadLocked()
}

// Err returns the error given to Fail, or nil while the stream lives.
func (p *Pending) Err() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.mu.err
}

// Len returns the number of requests waiting for an answer.
func (p *Pending) Len() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.mu.wait)
}
