package transport

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/coder/websocket"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// listenWS starts a WebSocket listener on loopback whose sessions serve is given, each in a
// goroutine; it returns the ws:// URL.
func listenWS(t *testing.T, maxStreams int, serve func(Conn)) string {
	t.Helper()
	origins, _ := ParseOrigins([]string{"*"})
	l, err := ListenWeb(WebConfig{Addr: "127.0.0.1:0", WebSocket: true, Origins: origins, MaxStreams: maxStreams,
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := l.Accept(ctx)
			if err != nil {
				return
			}
			go func() {
				serve(c)
				c.CloseWithError(0, "done")
			}()
		}
	}()
	t.Cleanup(func() {
		cancel()
		<-done
		l.Close()
	})
	return "ws://" + l.TCPAddr().String() + Path
}

func record(id uint32, kind byte, payload []byte) []byte {
	b := binary.BigEndian.AppendUint32(nil, id)
	return append(append(b, kind), payload...)
}

// A record that breaks PROTOCOL §2.4 closes the connection with malformed (status 4001), the
// reason saying what was wrong.
func TestWebSocketMalformedRecords(t *testing.T) {
	url := listenWS(t, 4, func(c Conn) { <-c.Context().Done() }) // accepts, never reads
	big := bytes.Repeat([]byte{'x'}, wsMaxPayload)
	for _, tc := range []struct {
		name    string
		typ     websocket.MessageType
		records [][]byte
	}{
		{"a text message", websocket.MessageText, [][]byte{record(1, recData, []byte("hi"))}},
		{"a record shorter than its header", websocket.MessageBinary, [][]byte{{0, 0, 1}}},
		{"an unknown kind", websocket.MessageBinary, [][]byte{record(1, 9, nil)}},
		{"stream id 0", websocket.MessageBinary, [][]byte{record(0, recData, []byte("x"))}},
		{"an empty DATA", websocket.MessageBinary, [][]byte{record(1, recData, nil)}},
		{"a FIN with a payload", websocket.MessageBinary, [][]byte{record(1, recFin, []byte("x"))}},
		{"a RESET without its code", websocket.MessageBinary, [][]byte{record(1, recReset, []byte{1})}},
		{"a stream id that skips one", websocket.MessageBinary, [][]byte{record(1, recData, []byte("x")), record(3, recData, []byte("y"))}},
		{"DATA after FIN", websocket.MessageBinary, [][]byte{record(1, recData, []byte("x")), record(1, recFin, nil), record(1, recData, []byte("y"))}},
		{"DATA beyond the credit", websocket.MessageBinary, [][]byte{record(1, recData, big), record(1, recData, big),
			record(1, recData, big), record(1, recData, big), record(1, recData, []byte("one byte too many"))}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			ws, _, err := websocket.Dial(ctx, url, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer ws.CloseNow()
			for _, r := range tc.records {
				if err := ws.Write(ctx, tc.typ, r); err != nil {
					break // closed already
				}
			}
			_, _, err = ws.Read(ctx)
			var ce websocket.CloseError
			if !errors.As(err, &ce) || ce.Code != 4000+codeMalformed || ce.Reason == "" {
				t.Fatalf("got %v, want a close with status %d and a reason", err, 4000+codeMalformed)
			}
		})
	}
}

// A stream whose reader grants no credit holds only its own writes: they wait, then fail past
// their deadline, while another stream of the same connection keeps flowing both ways.
func TestWebSocketCreditHoldsOneStreamOnly(t *testing.T) {
	stalled := make(chan error, 1)
	url := listenWS(t, 4, func(c Conn) {
		ctx := c.Context()
		a, err := c.AcceptStream(ctx)
		if err != nil {
			return
		}
		b, err := c.AcceptStream(ctx)
		if err != nil {
			return
		}
		go func() { // b echoes
			io.Copy(b, b)
			b.Close()
		}()
		a.SetWriteDeadline(time.Now().Add(time.Second))
		_, err = a.Write(make([]byte, 4*wsWindow))
		stalled <- err
		<-ctx.Done()
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := DialWebSocket(ctx, url, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	a, _ := c.OpenStream()
	a.Write([]byte("a")) // opens it; never read
	b, _ := c.OpenStream()
	msg := bytes.Repeat([]byte("echo "), 100_000) // 500 KB: more than a window, so credit must flow
	go func() {
		b.Write(msg)
		b.Close()
	}()
	b.SetReadDeadline(time.Now().Add(10 * time.Second))
	got, err := io.ReadAll(b)
	if err != nil || !bytes.Equal(got, msg) {
		t.Fatalf("the echo stream: %d of %d bytes, %v", len(got), len(msg), err)
	}
	select {
	case err := <-stalled:
		if !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("the write nobody reads ended with %v, want its deadline", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the write nobody reads did not give up at its deadline")
	}
}

// FIN, RESET and STOP carry what QUIC's carry: the reader sees the end or the code, a STOP makes
// the other side's writes fail with it, and a connection close gives its code to the client.
func TestWebSocketStreamEnds(t *testing.T) {
	results := make(chan error, 3)
	url := listenWS(t, 4, func(c Conn) {
		ctx := c.Context()
		fin, _ := c.AcceptStream(ctx)
		_, err := io.ReadAll(fin) // the client's FIN: a clean end
		results <- err
		reset, _ := c.AcceptStream(ctx)
		_, err = io.ReadAll(reset) // the client's RESET 7
		results <- err
		stop, _ := c.AcceptStream(ctx)
		stop.CancelRead(9) // STOP 9: the client's writes fail with 9
		stop.Write([]byte("bye"))
		stop.Close()
		<-time.After(100 * time.Millisecond)
		c.CloseWithError(43, "retry_after_ms=5000; too many connections")
		results <- nil
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := DialWebSocket(ctx, url, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fin, _ := c.OpenStream()
	fin.Write([]byte("data"))
	fin.Close()
	if err := <-results; err != nil {
		t.Errorf("after FIN the server read %v, want a clean end", err)
	}
	reset, _ := c.OpenStream()
	reset.Write([]byte("data"))
	reset.CancelWrite(7)
	var se *StreamError
	if err := <-results; !errors.As(err, &se) || se.Code != 7 || !se.Remote {
		t.Errorf("after RESET 7 the server read %v", err)
	}
	stop, _ := c.OpenStream()
	stop.Write([]byte("x"))
	stop.SetReadDeadline(time.Now().Add(5 * time.Second))
	if got, err := io.ReadAll(stop); err != nil || string(got) != "bye" {
		t.Errorf("the stopped stream's server side: %q, %v", got, err)
	}
	var werr error
	for deadline := time.Now().Add(5 * time.Second); werr == nil && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		_, werr = stop.Write([]byte("more"))
	}
	if !errors.As(werr, &se) || se.Code != 9 || !se.Remote {
		t.Errorf("writing after the server's STOP 9: %v", werr)
	}
	<-results
	select {
	case <-c.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the connection did not close")
	}
	if code, reason, ok := c.CloseError(); !ok || code != 43 || reason != "retry_after_ms=5000; too many connections" {
		t.Errorf("close: %d %q %v", code, reason, ok)
	}
}

// Origins: exact ones, any port, the default loopback list, and what is not an origin.
func TestOrigins(t *testing.T) {
	def, err := ParseOrigins(DefaultOrigins)
	if err != nil {
		t.Fatal(err)
	}
	custom, err := ParseOrigins([]string{"https://chat.example.com", "http://dev.example.com:*"})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		o      *Origins
		origin string
		want   bool
	}{
		{def, "", true}, {def, "http://localhost:3000", true}, {def, "http://localhost", true},
		{def, "https://127.0.0.1:8443", true}, {def, "http://[::1]:8080", true}, {def, "HTTP://LOCALHOST:1", true},
		{def, "https://evil.example", false}, {def, "http://localhost.evil.example", false}, {def, "null", false},
		{custom, "https://chat.example.com", true}, {custom, "https://chat.example.com:443", false},
		{custom, "http://chat.example.com", false}, {custom, "http://dev.example.com:5173", true},
		{custom, "http://localhost:3000", false},
	} {
		if got := c.o.Allow(c.origin); got != c.want {
			t.Errorf("Allow(%q) = %v, want %v", c.origin, got, c.want)
		}
	}
	for _, bad := range []string{"chat.example.com", "ftp://x", "https://x/path", "https://u@x"} {
		if _, err := ParseOrigins([]string{bad}); err == nil {
			t.Errorf("ParseOrigins(%q) accepted it", bad)
		}
	}
}
