package conformance

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/syncd-dev/syncd/proto"
)

// peer is the kit's own client of the embedded server, over raw QUIC: it writes the messages a
// scenario needs (as the other users of the run), reads the server's truth for the verdict, and
// plays the second instance of a device that supersedes the client's sync stream. It makes one
// request at a time; it is not safe for concurrent use.
type peer struct {
	conn *quic.Conn
	req  *quic.Stream
	rd   *proto.Reader
	next uint64
}

// peerTimeout bounds each exchange of the kit with its own server.
const peerTimeout = 10 * time.Second

// dialPeer connects to the server at addr as device of the user token names and waits for Welcome.
func dialPeer(ctx context.Context, addr, fingerprint, token, device string) (*peer, error) {
	ctx, cancel := context.WithTimeout(ctx, peerTimeout)
	defer cancel()
	conn, err := quic.DialAddr(ctx, addr, proto.PinnedTLSConfig(fingerprint), &quic.Config{KeepAlivePeriod: 5 * time.Second})
	if err != nil {
		return nil, fmt.Errorf("dial the kit's server: %w", err)
	}
	p := &peer{conn: conn}
	if err := p.hello(ctx, token, device); err != nil {
		conn.CloseWithError(0, "")
		return nil, err
	}
	if p.req, err = conn.OpenStreamSync(ctx); err != nil {
		conn.CloseWithError(0, "")
		return nil, err
	}
	p.rd = proto.NewReader(p.req, proto.MaxFrameLimit)
	return p, nil
}

func (p *peer) hello(ctx context.Context, token, device string) error {
	ctl, err := p.conn.OpenStreamSync(ctx)
	if err != nil {
		return err
	}
	err = proto.WriteFrame(ctl, &proto.Hello{Token: token, Device: device, ClientVersion: "syncd-conformance-kit", ProtoVersion: proto.ProtoVersion})
	if err != nil {
		return err
	}
	ctl.SetReadDeadline(time.Now().Add(peerTimeout))
	f, err := proto.NewReader(ctl, proto.MaxFrameLimit).Next()
	if err != nil {
		return fmt.Errorf("hello: %w", err)
	}
	ctl.SetReadDeadline(time.Time{})
	if e, ok := f.(*proto.Error); ok {
		return e
	}
	if _, ok := f.(*proto.Welcome); !ok {
		return fmt.Errorf("hello answered with %T", f)
	}
	return nil // the control stream stays open for the session; nothing more is read on it
}

func (p *peer) close() { p.conn.CloseWithError(0, "") }

// call sends a request built with a fresh id and returns its answer (an *proto.Error as error).
func (p *peer) call(build func(id uint64) proto.Frame) (proto.Frame, error) {
	p.next++
	if err := proto.WriteFrame(p.req, build(p.next)); err != nil {
		return nil, err
	}
	p.req.SetReadDeadline(time.Now().Add(peerTimeout))
	for {
		f, err := p.rd.Next()
		if err != nil {
			return nil, err
		}
		if e, ok := f.(*proto.Error); ok {
			return nil, e
		}
		if r, ok := f.(interface{ RequestID() uint64 }); ok && r.RequestID() == p.next {
			return f, nil
		}
	}
}

// send posts body to conv (a direct conversation with to, created by the first send) and
// returns the server's Ack, retrying a retryable refusal with the same client_msg_id.
func (p *peer) send(conv, to, cmid string, body []byte) (*proto.Ack, error) {
	for attempt := 0; ; attempt++ {
		f, err := p.call(func(id uint64) proto.Frame {
			return &proto.Send{ID: id, Conv: conv, ClientMsgID: cmid, Body: body, Peer: to}
		})
		var e *proto.Error
		if errors.As(err, &e) && e.Code.Retryable() && attempt < 20 {
			time.Sleep(max(time.Duration(e.RetryAfterMs)*time.Millisecond, 50*time.Millisecond))
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("send to %s: %w", conv, err)
		}
		return f.(*proto.Ack), nil
	}
}

// history returns every retained entry of conv, oldest first.
func (p *peer) history(conv string) ([]proto.Entry, error) {
	var all []proto.Entry
	for before := proto.Position(0); ; {
		f, err := p.call(func(id uint64) proto.Frame { return &proto.History{ID: id, Conv: conv, Before: before} })
		if err != nil {
			return nil, fmt.Errorf("history of %s: %w", conv, err)
		}
		h := f.(*proto.HistoryResult)
		all = append(h.Entries, all...)
		if len(h.Entries) == 0 || h.Entries[0].ConvSeq <= h.First {
			return all, nil
		}
		before = h.Entries[0].ConvSeq
	}
}

// head answers HeadCheck for the peer's user.
func (p *peer) head() (*proto.Head, error) {
	f, err := p.call(func(id uint64) proto.Frame { return &proto.HeadCheck{ID: id} })
	if err != nil {
		return nil, err
	}
	return f.(*proto.Head), nil
}

// supersede opens a sync stream of the peer's device from (epoch, pos) and keeps it: a sync stream
// of the same device on the same node ends the older one with CodeSuperseded (PROTOCOL §2).
func (p *peer) supersede(ctx context.Context, epoch proto.Epoch, pos proto.Position) error {
	st, err := p.conn.OpenStreamSync(ctx)
	if err != nil {
		return err
	}
	return proto.WriteFrame(st, &proto.SyncStart{Epoch: epoch, Pos: pos, Subs: []proto.SubCursor{{Epoch: epoch, Pos: pos}}})
}

// readLog reads the first n entries of the peer's user log through a sync stream from (0, 0), as
// a new device gets them, and returns the log's epoch and the entries.
func (p *peer) readLog(ctx context.Context, n int) (proto.Epoch, []proto.Entry, error) {
	st, err := p.conn.OpenStreamSync(ctx)
	if err != nil {
		return 0, nil, err
	}
	defer st.CancelRead(0)
	defer st.Close()
	if err := proto.WriteFrame(st, &proto.SyncStart{Subs: []proto.SubCursor{{}}}); err != nil {
		return 0, nil, err
	}
	st.SetReadDeadline(time.Now().Add(peerTimeout))
	rd := proto.NewReader(st, proto.MaxFrameLimit)
	var epoch proto.Epoch
	var entries []proto.Entry
	for len(entries) < n {
		f, err := rd.Next()
		if err != nil {
			return 0, nil, fmt.Errorf("reading the log: %w", err)
		}
		switch f := f.(type) {
		case *proto.Batch:
			epoch, entries = f.Epoch, append(entries, f.Entries...)
		case *proto.Error:
			return 0, nil, f
		}
	}
	return epoch, entries[:n], nil
}
