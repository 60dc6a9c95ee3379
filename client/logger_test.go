package client

import (
	"context"
	"crypto/tls"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/syncd-dev/syncd/proto"
	"github.com/syncd-dev/syncd/test/testkit"
)

// recordHandler is a slog.Handler that keeps the message of every record, at every level.
type recordHandler struct {
	mu   *sync.Mutex
	msgs *[]string
}

func newRecordHandler() recordHandler { return recordHandler{mu: new(sync.Mutex), msgs: new([]string)} }

func (recordHandler) Enabled(context.Context, slog.Level) bool { return true }

func (h recordHandler) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	*h.msgs = append(*h.msgs, r.Message)
	h.mu.Unlock()
	return nil
}

func (h recordHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h recordHandler) WithGroup(string) slog.Handler      { return h }

// messages returns a copy of the messages recorded so far.
func (h recordHandler) messages() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(*h.msgs)
}

// fakeServer is just enough of syncd for a client to connect: it answers Hello with Welcome
// and ignores every other stream. It presents a fresh self-signed certificate, pinned by
// fingerprint.
type fakeServer struct {
	ln          *quic.Listener
	fingerprint string
	conns       chan *quic.Conn
	wg          sync.WaitGroup
}

func startFakeServer(t *testing.T) *fakeServer {
	t.Helper()
	cert, err := testkit.SelfSignedCert()
	if err != nil {
		t.Fatal(err)
	}
	ln, err := quic.ListenAddr("127.0.0.1:0", &tls.Config{MinVersion: tls.VersionTLS13, NextProtos: []string{proto.ALPN},
		Certificates: []tls.Certificate{cert}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	s := &fakeServer{ln: ln, fingerprint: proto.Fingerprint(cert.Certificate[0]), conns: make(chan *quic.Conn, 4)}
	s.wg.Go(func() {
		for {
			q, err := ln.Accept(context.Background())
			if err != nil {
				return // the listener closed
			}
			st, err := q.AcceptStream(context.Background())
			if err != nil {
				continue
			}
			if _, err := proto.NewReader(st, proto.DefaultMaxFrame).Next(); err != nil {
				q.CloseWithError(1, "no hello")
				continue
			}
			if err := proto.WriteFrame(st, &proto.Welcome{User: "alice", Device: "phone", ProtoVersion: proto.ProtoVersion}); err != nil {
				continue
			}
			s.conns <- q
		}
	})
	t.Cleanup(s.stop)
	return s
}

// stop closes the listener: from now on the address answers nothing.
func (s *fakeServer) stop() {
	s.ln.Close()
	s.wg.Wait()
}

// TestConfigLoggerGetsSDKLogs checks that the SDK logs through Config.Logger, not the default
// logger: a server that goes away makes the SDK fail to reconnect, and says so there.
func TestConfigLoggerGetsSDKLogs(t *testing.T) {
	// Anything the SDK sent to the process-wide default instead would land here.
	def := newRecordHandler()
	old := slog.Default()
	slog.SetDefault(slog.New(def))
	t.Cleanup(func() { slog.SetDefault(old) })

	srv := startFakeServer(t)
	mine := newRecordHandler()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := Dial(ctx, Config{Addr: srv.ln.Addr().String(), Token: "t", Device: "phone", StoreDir: t.TempDir(),
		Fingerprint: srv.fingerprint, RequestTimeout: 300 * time.Millisecond, Logger: slog.New(mine)})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if c.User() != "alice" {
		t.Fatalf("User = %q, want alice (from Welcome)", c.User())
	}

	// The server goes away: the connection is closed and nothing listens any more.
	q := <-srv.conns
	srv.stop()
	q.CloseWithError(0, "going away")

	deadline := time.Now().Add(20 * time.Second)
	for !slices.Contains(mine.messages(), "reconnect failed") {
		if time.Now().After(deadline) {
			t.Fatalf("Config.Logger got %q; want a %q line", mine.messages(), "reconnect failed")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if got := def.messages(); len(got) > 0 {
		t.Fatalf("the default logger got %q: every SDK line must go to Config.Logger", got)
	}
}
