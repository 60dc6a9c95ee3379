package bench

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/syncd-dev/syncd/proto"
)

// Target is a syncd server to load: its client address, the SHA-256 fingerprint of its
// certificate (pinned), and a way to get a token for any user's device.
//
// For a cluster, Addrs lists the client addresses of its nodes (which then share one
// certificate and one token secret): a scenario's devices are spread over them in turn, device
// k of a scenario connecting to Addrs[k mod len(Addrs)], and Addr is ignored.
type Target struct {
	Addr, Fingerprint string
	Token             func(user, device string) (string, error)
	Addrs             []string
}

// addrs returns the client addresses devices connect to: Addrs, or Addr alone.
func (t Target) addrs() []string {
	if len(t.Addrs) > 0 {
		return t.Addrs
	}
	return []string{t.Addr}
}

// device is the bench's name for every device it connects.
const device = "bench"

// dialer spreads client connections over a few UDP sockets (quic.Transports), so thousands of
// connections need neither thousands of file descriptors nor one socket for all the load.
type dialer struct {
	t      Target
	addrs  []*net.UDPAddr // the target's nodes; device k dials addrs[k mod len]
	tls    *tls.Config
	trs    []*quic.Transport
	next   atomic.Uint64
	closed sync.Once
}

func newDialer(t Target, sockets int) (*dialer, error) {
	d := &dialer{t: t, tls: proto.PinnedTLSConfig(t.Fingerprint)}
	for _, a := range t.addrs() {
		addr, err := net.ResolveUDPAddr("udp", a)
		if err != nil {
			return nil, fmt.Errorf("bench: target address: %w", err)
		}
		d.addrs = append(d.addrs, addr)
	}
	for range max(sockets, 1) {
		uc, err := net.ListenUDP("udp", &net.UDPAddr{IP: d.addrs[0].IP, Port: 0})
		if err != nil {
			d.close()
			return nil, err
		}
		d.trs = append(d.trs, &quic.Transport{Conn: uc})
	}
	return d, nil
}

func (d *dialer) close() {
	d.closed.Do(func() {
		for _, tr := range d.trs {
			tr.Close()
			tr.Conn.Close()
		}
	})
}

// client is one authenticated connection of user's device.
type client struct {
	user    string
	conn    *quic.Conn
	control *quic.Stream
	limits  proto.Limits
}

func (c *client) close() { c.conn.CloseWithError(0, "") }

// connect dials and authenticates user's device on node k mod len(d.addrs). A handshake the
// server refuses for want of room (overloaded: its handshake gate or this address's share of it;
// too many connections) is retried after the server's retry-after, from the close reason; one
// that QUIC itself refuses (CONNECTION_REFUSED: the server's accept queue is full, or it is not
// accepting yet) after a short growing pause. Both are a busy server, not a failure, so connect
// tries up to connectTries times before giving up.
func (d *dialer) connect(ctx context.Context, user string, k int) (*client, error) {
	token, err := d.t.Token(user, device)
	if err != nil {
		return nil, err
	}
	for attempt := 1; ; attempt++ {
		c, err := d.connectOnce(ctx, d.addrs[k%len(d.addrs)], user, token)
		wait, busy := refusedBusy(err, attempt)
		if err == nil || !busy || attempt >= connectTries {
			return c, err
		}
		// Up to a quarter more than asked, so that refused dials do not all come back at once.
		wait += time.Duration(rand.Int64N(int64(wait/4) + 1))
		select {
		case <-time.After(wait):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// connectTries bounds the attempts of one connect refused as busy (refusedBusy).
const connectTries = 10

// refusedBusy reports whether err is a handshake refused because the server is busy, and how
// long to wait before attempt+1: the server's retry-after when it gave one, else 100 ms doubling
// with each attempt, at most 2 s.
func refusedBusy(err error, attempt int) (time.Duration, bool) {
	backoff := min(100*time.Millisecond<<min(attempt-1, 5), 2*time.Second)
	var pe *proto.Error
	if errors.As(err, &pe) && (pe.Code == proto.CodeOverloaded || pe.Code == proto.CodeTooManyConnections) {
		if pe.RetryAfterMs > 0 {
			return pe.RetryAfter(), true
		}
		return backoff, true
	}
	var te *quic.TransportError
	if errors.As(err, &te) && te.Remote && te.ErrorCode == quic.ConnectionRefused {
		return backoff, true
	}
	return 0, false
}

func (d *dialer) connectOnce(ctx context.Context, addr *net.UDPAddr, user, token string) (*client, error) {
	tr := d.trs[d.next.Add(1)%uint64(len(d.trs))]
	dctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	conn, err := tr.Dial(dctx, addr, d.tls, &quic.Config{
		HandshakeIdleTimeout: 10 * time.Second,
		MaxIdleTimeout:       60 * time.Second,
		KeepAlivePeriod:      15 * time.Second,
	})
	if err != nil {
		return nil, asProtoError(err)
	}
	st, err := conn.OpenStreamSync(dctx)
	if err != nil {
		conn.CloseWithError(0, "")
		return nil, asProtoError(err)
	}
	if err := proto.WriteFrame(st, &proto.Hello{Token: token, Device: device, ClientVersion: "syncbench/1",
		ProtoVersion: proto.ProtoVersion}); err != nil {
		conn.CloseWithError(0, "")
		return nil, asProtoError(err)
	}
	st.SetReadDeadline(time.Now().Add(15 * time.Second))
	f, err := proto.NewReader(st, proto.DefaultMaxFrame).Next()
	st.SetReadDeadline(time.Time{})
	if err != nil {
		conn.CloseWithError(0, "")
		return nil, asProtoError(err)
	}
	switch f := f.(type) {
	case *proto.Welcome:
		return &client{user: user, conn: conn, control: st, limits: f.Limits.WithDefaults()}, nil
	case *proto.Error:
		conn.CloseWithError(0, "")
		return nil, f
	default:
		conn.CloseWithError(0, "")
		return nil, fmt.Errorf("bench: hello answered by %v", f.FrameType())
	}
}

// asProtoError turns a connection closed by the server with an application code into the
// matching *proto.Error, with the code, retry-after and message of the close (the server may
// close before its Error frame arrives; proto.ErrorFromClose).
func asProtoError(err error) error {
	var ae *quic.ApplicationError
	if errors.As(err, &ae) && ae.Remote && ae.ErrorCode != 0 {
		return proto.ErrorFromClose(uint64(ae.ErrorCode), ae.ErrorMessage)
	}
	return err
}

// connectMany connects users[i] for every i (to node i mod len(d.addrs)), at most parallel at
// once.
func (d *dialer) connectMany(ctx context.Context, users []string, parallel int) ([]*client, error) {
	out := make([]*client, len(users))
	sem := make(chan struct{}, parallel)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var first error
	for i, u := range users {
		sem <- struct{}{}
		mu.Lock()
		failed := first != nil
		mu.Unlock()
		if failed {
			<-sem
			break
		}
		wg.Go(func() {
			defer func() { <-sem }()
			c, err := d.connect(ctx, u, i)
			mu.Lock()
			defer mu.Unlock()
			if err != nil && first == nil {
				first = fmt.Errorf("bench: connect %s: %w", u, err)
			}
			out[i] = c
		})
	}
	wg.Wait()
	if first != nil {
		for _, c := range out {
			if c != nil {
				c.close()
			}
		}
		return nil, first
	}
	return out, nil
}

// reqStream is a request stream with pipelined requests, answers matched by request id.
type reqStream struct {
	st      *quic.Stream
	wmu     sync.Mutex    // serializes writes on st
	pending proto.Pending // failed, with the reason, when the reader stops
}

func (c *client) openRequests(ctx context.Context) (*reqStream, error) {
	st, err := c.conn.OpenStreamSync(ctx)
	if err != nil {
		return nil, err
	}
	rs := &reqStream{st: st}
	go rs.read(proto.NewReader(st, int(c.limits.MaxFrame)))
	return rs, nil
}

func (rs *reqStream) read(r *proto.Reader) {
	for {
		f, err := r.Next()
		if err != nil {
			if errors.Is(err, proto.ErrMalformed) || errors.Is(err, proto.ErrUnknownType) {
				continue
			}
			rs.pending.Fail(asProtoError(err))
			return
		}
		rs.pending.Deliver(f) // an error not tied to a request (id 0): nothing waits for it
	}
}

// do sends the request mk(id) and returns its answer (an Ack, a query result or an *proto.Error
// frame); err is for a dead stream, a write failure or ctx.
func (rs *reqStream) do(ctx context.Context, mk func(id uint64) proto.Frame) (proto.Frame, error) {
	id, ch, err := rs.pending.Add()
	if err != nil {
		return nil, err
	}
	rs.wmu.Lock()
	err = proto.WriteFrame(rs.st, mk(id))
	rs.wmu.Unlock()
	if err != nil {
		rs.pending.Forget(id)
		return nil, err
	}
	return rs.pending.Wait(ctx, id, ch)
}

// head asks for the user log's head.
func (rs *reqStream) head(ctx context.Context) (proto.Position, error) {
	f, err := rs.do(ctx, func(id uint64) proto.Frame { return &proto.HeadCheck{ID: id} })
	if err != nil {
		return 0, err
	}
	switch f := f.(type) {
	case *proto.Head:
		return f.Head, nil
	case *proto.Error:
		return 0, f
	}
	return 0, fmt.Errorf("bench: head check answered by %v", f.FrameType())
}

// syncStream opens the sync stream with start.
func (c *client) syncStream(ctx context.Context, start *proto.SyncStart) (*quic.Stream, *proto.Reader, error) {
	st, err := c.conn.OpenStreamSync(ctx)
	if err != nil {
		return nil, nil, err
	}
	if err := proto.WriteFrame(st, start); err != nil {
		return nil, nil, err
	}
	return st, proto.NewReader(st, int(c.limits.MaxFrame)), nil
}

// shedCode reports whether an error frame is the server shedding load (nothing applied; retry
// after its hint).
func shedCode(c proto.Code) bool { return c == proto.CodeOverloaded || c == proto.CodeRateLimited }

// retryableCode: timeouts and unavailability, to resend with the same cmid.
func retryableCode(c proto.Code) bool {
	return c == proto.CodeTimeout || c == proto.CodeUnavailable
}

// sleepCtx sleeps for d or until ctx ends.
func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}
