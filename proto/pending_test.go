package proto

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"
)

func TestPendingDeliverByID(t *testing.T) {
	var p Pending // the zero value is ready
	id1, ch1, err := p.Add()
	if err != nil {
		t.Fatal(err)
	}
	id2, ch2, err := p.Add()
	if err != nil {
		t.Fatal(err)
	}
	if id1 != 1 || id2 != 2 {
		t.Fatalf("ids %d, %d; want 1, 2 (0 is reserved for frames not tied to a request)", id1, id2)
	}
	if p.Len() != 2 {
		t.Fatalf("Len = %d, want 2", p.Len())
	}

	// Out of order, with noise: frames that are not responses, id 0, unknown ids.
	for _, f := range []Frame{&Heartbeat{}, &Error{Code: CodeInternal}, &Head{ID: 99, Head: 1}} {
		if p.Deliver(f) {
			t.Fatalf("Deliver(%#v) = true, want dropped", f)
		}
	}
	if !p.Deliver(&Head{ID: id2, Head: 7}) || !p.Deliver(&Error{ID: id1, Code: CodeNotMember}) {
		t.Fatal("Deliver to a waiting request = false")
	}
	if p.Deliver(&Head{ID: id2, Head: 8}) {
		t.Fatal("a second answer to the same id was delivered")
	}
	ctx := context.Background()
	f, err := p.Wait(ctx, id1, ch1)
	if e, ok := f.(*Error); err != nil || !ok || e.Code != CodeNotMember {
		t.Fatalf("Wait(%d) = %#v, %v; want the NotMember error frame", id1, f, err)
	}
	f, err = p.Wait(ctx, id2, ch2)
	if h, ok := f.(*Head); err != nil || !ok || h.Head != 7 {
		t.Fatalf("Wait(%d) = %#v, %v; want Head 7", id2, f, err)
	}
	if p.Len() != 0 {
		t.Fatalf("Len = %d after both answers, want 0", p.Len())
	}
}

func TestPendingCancelForgets(t *testing.T) {
	var p Pending
	id, ch, err := p.Add()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if f, err := p.Wait(ctx, id, ch); !errors.Is(err, context.Canceled) || f != nil {
		t.Fatalf("Wait with a cancelled ctx = %v, %v; want context.Canceled", f, err)
	}
	if p.Len() != 0 {
		t.Fatalf("Len = %d after a cancelled Wait, want 0", p.Len())
	}
	if p.Deliver(&Head{ID: id}) {
		t.Fatal("a late answer to a cancelled request was delivered")
	}

	// Forget without Wait (the request could not be written).
	id, _, _ = p.Add()
	p.Forget(id)
	p.Forget(id) // harmless
	if p.Len() != 0 || p.Deliver(&Head{ID: id}) {
		t.Fatal("a forgotten request still waits")
	}

	// An answer that arrived before the cancellation is still returned.
	id, ch, _ = p.Add()
	p.Deliver(&Head{ID: id, Head: 3})
	if f, err := p.Wait(ctx, id, ch); err != nil || f.(*Head).Head != 3 {
		t.Fatalf("Wait with an answer already there and ctx done = %v, %v; want the answer", f, err)
	}
}

func TestPendingFailFailsAll(t *testing.T) {
	var p Pending
	const n = 10
	errs := make(chan error, n)
	var ready sync.WaitGroup
	for range n {
		id, ch, err := p.Add()
		if err != nil {
			t.Fatal(err)
		}
		ready.Add(1)
		go func() {
			ready.Done()
			_, err := p.Wait(context.Background(), id, ch)
			errs <- err
		}()
	}
	ready.Wait()
	select {
	case <-p.Done():
		t.Fatal("Done closed before Fail")
	default:
	}
	if p.Err() != nil {
		t.Fatalf("Err before Fail = %v", p.Err())
	}
	boom := errors.New("stream reset")
	p.Fail(boom)
	p.Fail(errors.New("second failure: ignored"))
	for range n {
		select {
		case err := <-errs:
			if !errors.Is(err, boom) {
				t.Fatalf("waiter got %v, want %v", err, boom)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("a waiter was not failed")
		}
	}
	<-p.Done()
	if !errors.Is(p.Err(), boom) {
		t.Fatalf("Err = %v, want the first failure", p.Err())
	}
	if _, _, err := p.Add(); !errors.Is(err, boom) {
		t.Fatalf("Add after Fail = %v, want %v", err, boom)
	}
	if p.Len() != 0 || p.Deliver(&Head{ID: 1}) {
		t.Fatal("requests still waiting after Fail")
	}

	var q Pending
	q.Fail(nil)
	if _, _, err := q.Add(); !errors.Is(err, ErrStreamClosed) {
		t.Fatalf("Add after Fail(nil) = %v, want ErrStreamClosed", err)
	}
}

// TestPendingConcurrent runs many callers against a reader that answers in a scrambled order,
// then fails the stream while callers are still adding and waiting: every call ends with its own
// answer or the failure, never someone else's answer, and nothing is left waiting. Run with
// -race.
func TestPendingConcurrent(t *testing.T) {
	var p Pending
	requests := make(chan uint64, 64)
	stop := make(chan struct{})
	var reader sync.WaitGroup
	reader.Go(func() { // the stream's reader: answers in batches, reversed
		var batch []uint64
		flush := func() {
			for i := len(batch) - 1; i >= 0; i-- {
				p.Deliver(&Head{ID: batch[i], Head: Position(batch[i])})
			}
			batch = batch[:0]
		}
		for {
			select {
			case id := <-requests:
				if batch = append(batch, id); len(batch) == 4 {
					flush()
				}
			case <-time.After(time.Millisecond):
				flush()
			case <-stop:
				return
			}
		}
	})

	const callers, each = 16, 200
	boom := errors.New("connection lost")
	var mu sync.Mutex
	answers, failures := 0, 0
	var wg sync.WaitGroup
	for range callers {
		wg.Go(func() {
			for i := range each {
				id, ch, err := p.Add()
				if err != nil {
					if !errors.Is(err, boom) {
						t.Errorf("Add: %v", err)
					}
					return
				}
				if i%7 == 0 { // some callers give up at once
					p.Forget(id)
					continue
				}
				requests <- id
				f, err := p.Wait(context.Background(), id, ch)
				mu.Lock()
				switch {
				case err == nil && f.(*Head).Head == Position(id):
					answers++
				case err == nil:
					t.Errorf("request %d got the answer to %d", id, f.(*Head).Head)
				case errors.Is(err, boom):
					failures++
				default:
					t.Errorf("Wait(%d): %v", id, err)
				}
				mu.Unlock()
			}
		})
	}
	// Fail once a good part of the traffic has been answered.
	deadline := time.Now().Add(10 * time.Second)
	for {
		mu.Lock()
		n := answers
		mu.Unlock()
		if n >= callers*each/4 || time.Now().After(deadline) {
			break
		}
		time.Sleep(time.Millisecond)
	}
	p.Fail(boom)
	wg.Wait()
	close(stop)
	reader.Wait()
	if answers < callers*each/4 {
		t.Fatalf("only %d answers before the deadline", answers)
	}
	if p.Len() != 0 {
		t.Fatalf("Len = %d at the end, want 0", p.Len())
	}
	t.Logf("%d answered, %d failed by the stream's end", answers, failures)
}
