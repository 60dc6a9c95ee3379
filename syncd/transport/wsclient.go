package transport

import (
	"context"
	"errors"
	"net/http"

	"github.com/coder/websocket"
)

// WSClient is the client's side of the WebSocket mapping (PROTOCOL §2.4): it opens the streams.
// The Go SDK speaks raw QUIC; this is how Go code — tests, tools — reaches a node the way a
// browser that cannot use WebTransport does.
type WSClient struct {
	c    *wsConn
	done chan struct{} // serve returned
}

// DialWebSocket opens a session's WebSocket to url (ws:// or wss://, path Path), sending origin
// as the page's Origin ("" for none); client may be nil.
func DialWebSocket(ctx context.Context, url, origin string, client *http.Client) (*WSClient, error) {
	h := http.Header{}
	if origin != "" {
		h.Set("Origin", origin)
	}
	ws, resp, err := websocket.Dial(ctx, url, &websocket.DialOptions{HTTPClient: client, HTTPHeader: h})
	if err != nil {
		if resp != nil {
			return nil, &HTTPStatusError{Status: resp.StatusCode, Err: err}
		}
		return nil, err
	}
	c := newWSConn(ws, nil, 1<<20, nil)
	c.client = true
	w := &WSClient{c: c, done: make(chan struct{})}
	go func() {
		defer close(w.done)
		c.serve()
	}()
	return w, nil
}

// HTTPStatusError is a refused upgrade, with the server's HTTP status.
type HTTPStatusError struct {
	Status int
	Err    error
}

func (e *HTTPStatusError) Error() string { return e.Err.Error() }
func (e *HTTPStatusError) Unwrap() error { return e.Err }

// OpenStream opens the next stream. It sends nothing: the server learns of the stream from its
// first record, and PROTOCOL §2.4 wants the ids of first records consecutive, so a stream must
// be written in the order streams were opened (a test's client opens and writes one at a time).
func (w *WSClient) OpenStream() (Stream, error) {
	c := w.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ctx.Err() != nil {
		return nil, context.Cause(c.ctx)
	}
	c.highest++
	st := newWSStream(c, c.highest)
	c.streams[st.id] = st
	return st, nil
}

// Close closes the WebSocket (status 1000) and waits until nothing of it runs.
func (w *WSClient) Close() error {
	w.c.CloseWithError(0, "bye")
	<-w.done
	return nil
}

// Done ends when the connection has closed; Err then says how.
func (w *WSClient) Done() <-chan struct{} { return w.c.ctx.Done() }

// CloseError returns the server's close of the connection as PROTOCOL §2.4 gives it: the
// WebSocket status less 4000 as the error code, and the reason; ok false if the connection is
// open or ended otherwise.
func (w *WSClient) CloseError() (code uint64, reason string, ok bool) {
	var ce websocket.CloseError
	if !errors.As(context.Cause(w.c.ctx), &ce) {
		return 0, "", false
	}
	if ce.Code == websocket.StatusNormalClosure {
		return 0, ce.Reason, true
	}
	if ce.Code < 4000 || ce.Code > 4999 {
		return 0, "", false
	}
	return uint64(ce.Code - 4000), ce.Reason, true
}
