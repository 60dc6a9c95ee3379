package conformance

import (
	"cmp"
	"context"
	"crypto/rand"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/syncd-dev/syncd/log"
	"github.com/syncd-dev/syncd/proto"
	"github.com/syncd-dev/syncd/syncd"
	"github.com/syncd-dev/syncd/syncd/auth"
	"github.com/syncd-dev/syncd/syncd/transport"
)

// Config configures a Kit. Every field has a default.
type Config struct {
	// Listen is the UDP address clients connect to over QUIC (ALPN syncd/1). Default
	// "127.0.0.1:7600".
	Listen string
	// Control is the TCP address of the HTTP API drivers use (GET /v1/scenarios, POST /v1/runs,
	// …). Default "127.0.0.1:7601". It has no authentication: keep it on loopback.
	Control string
	// Web is the host:port browsers connect to (PROTOCOL §2.3, §2.4, path /syncd/1):
	// WebTransport on its UDP port with short-lived certificates pages pin, plain WebSocket on
	// its TCP port. Default "127.0.0.1:7602"; "off" serves no browser. Pages of loopback
	// origins only.
	Web string
	// Dir holds the embedded server's data. Default: a temporary directory removed by Close.
	Dir string
	// RunTimeout is how long a run may take before it fails. Default 60s.
	RunTimeout time.Duration
	// Logger gets the kit's and its server's logs (the server's at Warn and above). Default
	// slog.Default().
	Logger *slog.Logger
	// Out gets one line per finished run (PASSED/FAILED, scenario, reasons). Default none.
	Out io.Writer
}

// Kit is a running conformance kit: an embedded syncd server with its data on disk, the relay
// clients connect through, and the control API.
type Kit struct {
	cfg     Config
	srv     *syncd.Server
	srvDone chan error
	stop    context.CancelFunc
	ctx     context.Context
	tmpDir  string
	dir     string // the kit's data: its server's, the relay's, and the runs' restores
	secret  []byte // the token secret of all its servers
	ln      *quic.Listener
	web     *transport.WebListener
	webCert *auth.BrowserCerts
	httpLn  net.Listener
	http    *http.Server
	cert    string // the relay's certificate fingerprint, which clients pin
	wg      sync.WaitGroup
	seq     atomic.Int64

	mu      sync.Mutex
	runs    map[string]*run
	tokens  map[string]*run
	closed  bool           // Close has begun: no new scenario action starts
	actions sync.WaitGroup // the scenarios' actions under way (run.later), added under mu
}

// Start starts a kit: its server, the relay and the control API.
func Start(cfg Config) (*Kit, error) {
	cfg.Listen = cmp.Or(cfg.Listen, "127.0.0.1:7600")
	cfg.Control = cmp.Or(cfg.Control, "127.0.0.1:7601")
	cfg.Web = cmp.Or(cfg.Web, "127.0.0.1:7602")
	if cfg.RunTimeout == 0 {
		cfg.RunTimeout = time.Minute
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Out == nil {
		cfg.Out = io.Discard
	}
	k := &Kit{cfg: cfg, runs: map[string]*run{}, tokens: map[string]*run{}}
	k.ctx, k.stop = context.WithCancel(context.Background())
	if err := k.start(); err != nil {
		k.Close()
		return nil, err
	}
	return k, nil
}

func (k *Kit) start() error {
	dir := k.cfg.Dir
	if dir == "" {
		tmp, err := os.MkdirTemp("", "syncd-conformance-")
		if err != nil {
			return err
		}
		k.tmpDir, dir = tmp, tmp
	}
	k.dir = dir
	// One token secret for the kit's server and the servers restored for runs (restore.go): a
	// run's tokens are good on both, as an operator restoring a cluster keeps its token secret.
	k.secret = make([]byte, 32)
	rand.Read(k.secret)
	srv, done, err := k.startServer(k.ctx, k.serverConfig(filepath.Join(dir, "server")))
	if err != nil {
		return err
	}
	k.srv, k.srvDone = srv, done

	relayDir := filepath.Join(dir, "relay")
	if err := os.MkdirAll(relayDir, 0o700); err != nil {
		return err
	}
	cert, fp, err := auth.SelfSignedCert(relayDir, []string{"127.0.0.1", "localhost"})
	if err != nil {
		return err
	}
	k.cert = fp
	k.ln, err = quic.ListenAddr(k.cfg.Listen, auth.ServerTLSConfig(cert, proto.ALPN),
		&quic.Config{MaxIdleTimeout: 30 * time.Second, KeepAlivePeriod: 5 * time.Second})
	if err != nil {
		return fmt.Errorf("conformance kit: listen for clients: %w", err)
	}
	if k.cfg.Web != "off" {
		if err := k.listenWeb(relayDir); err != nil {
			return err
		}
	}
	k.httpLn, err = net.Listen("tcp", k.cfg.Control)
	if err != nil {
		return fmt.Errorf("conformance kit: listen for drivers: %w", err)
	}
	k.http = &http.Server{Handler: k.routes(), ReadHeaderTimeout: 10 * time.Second}
	k.wg.Go(func() { k.http.Serve(k.httpLn) })
	k.wg.Go(func() { k.accept(func(ctx context.Context) (transport.Conn, error) { return acceptQUIC(ctx, k.ln) }) })
	if k.web != nil {
		k.wg.Go(func() { k.accept(k.web.Accept) })
	}
	return nil
}

// serverConfig is the configuration of the kit's server, and of the servers restored for runs:
// in dir, on free loopback ports.
func (k *Kit) serverConfig(dir string) syncd.Config {
	return syncd.Config{
		Dir: dir, ListenAddr: "127.0.0.1:0", WebAddr: "off", AdminAddr: "127.0.0.1:0",
		NodeID: "n1", RaftAddr: freeTCP(), Shards: 2, TokenSecret: k.secret,
		Logger: slog.New(leveled{k.cfg.Logger.Handler(), slog.LevelWarn}),
		Limits: proto.Limits{HeartbeatMs: uint32(heartbeat / time.Millisecond)},
		// too_old needs retention to trim a log; no other scenario writes 64 entries to one.
		Retention: log.Retention{MaxCount: 64}, RetentionInterval: 300 * time.Millisecond,
		// The source scenarios' groups of four are large (read diffusion); the others' direct
		// conversations are not concerned.
		LargeGroupThreshold: 3,
	}
}

// startServer starts a server of cfg, running until ctx ends, and waits until it is ready. done
// gets what its Run returned.
func (k *Kit) startServer(ctx context.Context, cfg syncd.Config) (srv *syncd.Server, done chan error, err error) {
	srv, err = syncd.NewServer(cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("conformance kit: its server: %w", err)
	}
	for deadline := time.Now().Add(20 * time.Second); srv.Ready() != nil; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			err := fmt.Errorf("conformance kit: its server is not ready: %w", srv.Ready())
			ended, cancel := context.WithCancel(ctx)
			cancel()
			srv.Run(ended) // closes what NewServer opened: a Run that ends at once
			return nil, nil, err
		}
	}
	done = make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	return srv, done, nil
}

// listenWeb serves browsers as a loopback syncd node does (syncd/web.go): the same transports,
// certificates and origin rules.
func (k *Kit) listenWeb(dir string) error {
	var err error
	if k.webCert, err = auth.NewBrowserCerts(dir, k.cfg.Logger); err != nil {
		return err
	}
	origins, err := transport.ParseOrigins(transport.DefaultOrigins)
	if err != nil {
		return err
	}
	k.web, err = transport.ListenWeb(transport.WebConfig{Addr: k.cfg.Web, WebSocket: true, Origins: origins, MaxStreams: 16,
		WebTransportTLS: &tls.Config{MinVersion: tls.VersionTLS13, GetCertificate: k.webCert.GetCertificate},
		Logger:          k.cfg.Logger})
	if err != nil {
		return fmt.Errorf("conformance kit: listen for browsers: %w", err)
	}
	return nil
}

func acceptQUIC(ctx context.Context, ln *quic.Listener) (transport.Conn, error) {
	c, err := ln.Accept(ctx)
	if err != nil {
		return nil, err
	}
	return transport.FromQUIC(c), nil
}

// Addr is the QUIC address clients connect to.
func (k *Kit) Addr() string { return k.ln.Addr().String() }

// Fingerprint is the SHA-256 fingerprint of the relay's certificate, which clients pin.
func (k *Kit) Fingerprint() string { return k.cert }

// ControlURL is the base URL of the control API.
func (k *Kit) ControlURL() string { return "http://" + k.httpLn.Addr().String() }

// Close stops the relay, the control API and the server, and removes a temporary data directory.
func (k *Kit) Close() error {
	k.stop()
	if k.ln != nil {
		k.ln.Close()
	}
	if k.web != nil {
		k.web.Close()
	}
	if k.http != nil {
		k.http.Close()
	}
	k.wg.Wait()
	k.mu.Lock()
	k.closed = true
	k.mu.Unlock()
	k.actions.Wait() // each ends with k.ctx or within peerTimeout
	k.mu.Lock()
	runs := slices.Collect(maps.Values(k.runs))
	k.mu.Unlock()
	for _, r := range runs {
		r.dropPeers()
		r.retire()
	}
	var err error
	if k.srvDone != nil {
		if err = <-k.srvDone; errors.Is(err, context.Canceled) {
			err = nil
		}
	}
	if k.tmpDir != "" {
		os.RemoveAll(k.tmpDir)
	}
	return err
}

func (k *Kit) accept(next func(context.Context) (transport.Conn, error)) {
	for {
		c, err := next(k.ctx)
		if err != nil {
			return
		}
		k.wg.Go(func() { k.serveConn(k.ctx, c) })
	}
}

// runOf returns the run a token was issued for.
func (k *Kit) runOf(token string) *run {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.tokens[token]
}

// RunInfo is what a driver needs to play a run: where to connect, as whom, what to send, where
// to report.
type RunInfo struct {
	Run         string `json:"run"`
	Scenario    string `json:"scenario"`
	Section     string `json:"section"`
	Summary     string `json:"summary"`
	Correct     string `json:"correct"`
	Addr        string `json:"addr"`        // QUIC, ALPN syncd/1
	Fingerprint string `json:"fingerprint"` // pin it: SHA-256 of the certificate
	// Web is the host:port of browsers' transports (WebTransport on UDP, plain WebSocket on
	// TCP, path /syncd/1), and CertHashes the SHA-256 hashes (hex) of the WebTransport
	// certificates a page pins (serverCertificateHashes). Absent when the kit serves no browser.
	Web        string   `json:"web,omitempty"`
	CertHashes []string `json:"cert_hashes,omitempty"`
	User       string   `json:"user"`
	Device     string   `json:"device"`
	Token      string   `json:"token"`
	TokenURL   string   `json:"token_url"`  // POST: a fresh token for the same device
	ReportURL  string   `json:"report_url"` // POST a Report: the verdict so far
	Conv       string   `json:"conv"`       // the conversation the kit fills
	Peer       string   `json:"peer"`       // the other user of Conv
	Sends      []Send   `json:"sends"`      // messages the driver sends, in order, after opening its client
	TimeoutMs  int64    `json:"timeout_ms"` // the run fails if not complete by then
}

// Send is a message a driver sends through its client.
type Send struct {
	Conv string `json:"conv"`
	Peer string `json:"peer"`
	Body string `json:"body"`
}

// newRun creates a run of sc: its users, its seeded conversation, its first token.
func (k *Kit) newRun(sc *scenario) (*run, error) {
	n := k.seq.Add(1)
	id := fmt.Sprintf("r%d", n)
	// Unique per kit and per process start, so that runs against a kit with a kept Dir never
	// meet an earlier run's users either.
	tag := strconv.FormatInt(time.Now().UnixMilli()%1e9, 36) + "-" + strconv.FormatInt(n, 10)
	user, other := "cf-"+tag+"-u", "cf-"+tag+"-p"
	r := &run{id: id, sc: sc, k: k, user: user, device: "d1", other: other, conv: proto.DirectConv(user, other),
		created: time.Now(), tokens: map[string]time.Time{}, sent: map[string]bool{}}
	if sc.largeGroup {
		// A group of four, large for the kit's server: the client reads it as a source.
		r.conv = "g:cf-" + tag
		if err := k.createGroup(r, user, "cf-"+tag+"-x1", "cf-"+tag+"-x2"); err != nil {
			return nil, err
		}
	}
	if sc.name == "retry_after" {
		for i := range 5 {
			r.sends = append(r.sends, Send{Conv: r.conv, Peer: r.other, Body: fmt.Sprintf("driver message %d", i+1)})
		}
	}
	if err := k.post(r, sc.seeds, sc.bodySize); err != nil {
		return nil, err
	}
	if _, err := k.issue(r, cmp.Or(sc.tokenTTL, time.Hour)); err != nil {
		return nil, err
	}
	if sc.setup != nil {
		if err := sc.setup(k, r); err != nil {
			return nil, fmt.Errorf("conformance kit: setting up %s: %w", sc.name, err)
		}
	}
	r.deadline = time.Now().Add(k.cfg.RunTimeout)
	k.mu.Lock()
	k.runs[id] = r
	k.mu.Unlock()
	return r, nil
}

// issue mints a token for the run's device and registers it.
func (k *Kit) issue(r *run, ttl time.Duration) (string, error) {
	tok, err := k.srv.MintToken(r.user, r.device, ttl)
	if err != nil {
		return "", err
	}
	k.mu.Lock()
	k.tokens[tok] = r
	k.mu.Unlock()
	r.mu.Lock()
	if r.firstToken == "" {
		r.firstToken = tok
	}
	r.tokens[tok] = time.Now().Add(ttl).Truncate(time.Second)
	r.mu.Unlock()
	return tok, nil
}

// createGroup has the run's other user create the run's conversation as a group with members.
func (k *Kit) createGroup(r *run, members ...string) error {
	p, err := r.writer()
	if err != nil {
		return err
	}
	r.writerMu.Lock()
	defer r.writerMu.Unlock()
	_, err = p.call(func(id uint64) proto.Frame {
		return &proto.CreateGroup{ID: id, Conv: r.conv, ClientMsgID: "kit-group", Members: members}
	})
	return err
}

// post writes n messages from the run's other user to its conversation, of size bytes each (0:
// a short text).
func (k *Kit) post(r *run, n, size int) error {
	p, err := r.writer()
	if err != nil {
		return err
	}
	r.writerMu.Lock()
	defer r.writerMu.Unlock()
	for range n {
		i := k.seq.Add(1)
		body := []byte(fmt.Sprintf("conformance %s message %d", r.sc.name, i))
		if size > len(body) {
			body = append(body, strings.Repeat(".", size-len(body))...)
		}
		if _, err := p.send(r.conv, r.user, "kit-"+strconv.FormatInt(i, 10), body); err != nil {
			return err
		}
	}
	return nil
}

// supersede7 has the run's other user write, after the seeds, what the server folds in the run
// user's log (scenario folded): two edits of the first message (the first folded by the second),
// a reaction put on and taken off (the first folded), and two receipts (the first folded).
func (k *Kit) supersede7(r *run) error {
	truth, err := k.history(r)
	if err != nil {
		return err
	}
	if len(truth) == 0 {
		return errors.New("no seeded message to edit")
	}
	target := truth[0].MsgID
	p, err := r.writer()
	if err != nil {
		return err
	}
	r.writerMu.Lock()
	defer r.writerMu.Unlock()
	for i, build := range []func(id uint64) proto.Frame{
		func(id uint64) proto.Frame {
			return &proto.Edit{ID: id, Conv: r.conv, ClientMsgID: "kit-e1", Target: target, Body: []byte("edited once")}
		},
		func(id uint64) proto.Frame {
			return &proto.React{ID: id, Conv: r.conv, ClientMsgID: "kit-x1", Target: target, Reaction: "👍"}
		},
		func(id uint64) proto.Frame {
			return &proto.Edit{ID: id, Conv: r.conv, ClientMsgID: "kit-e2", Target: target, Body: []byte("edited twice")}
		},
		func(id uint64) proto.Frame {
			return &proto.React{ID: id, Conv: r.conv, ClientMsgID: "kit-x2", Target: target, Reaction: "👍", Remove: true}
		},
		func(id uint64) proto.Frame {
			return &proto.MarkRead{ID: id, Conv: r.conv, ClientMsgID: "kit-r1", UpTo: 6}
		},
		func(id uint64) proto.Frame {
			return &proto.MarkRead{ID: id, Conv: r.conv, ClientMsgID: "kit-r2", UpTo: 10}
		},
	} {
		if _, err := p.call(build); err != nil {
			return fmt.Errorf("step %d: %w", i+1, err)
		}
	}
	return nil
}

// history reads the run's conversation from the server, as the run's user on the kit's own device.
func (k *Kit) history(r *run) ([]proto.Entry, error) {
	p, err := r.reader()
	if err != nil {
		return nil, err
	}
	r.readerMu.Lock()
	defer r.readerMu.Unlock()
	return p.history(r.conv)
}

// waitTrimmed waits until retention has trimmed the run's user log (too_old).
func (k *Kit) waitTrimmed(r *run) error {
	p, err := r.reader()
	if err != nil {
		return err
	}
	r.readerMu.Lock()
	defer r.readerMu.Unlock()
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		h, err := p.head()
		if err != nil {
			return err
		}
		if h.First > 1 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("retention did not trim the log of %s (head %d) in 20s", r.user, h.Head)
		}
	}
}

// frameAtLimit reads the run's three seeded entries as a sync stream delivers them and keeps the
// Batch of all three and its bytes, whose length becomes the announced max_frame (max_frame).
func (k *Kit) frameAtLimit(r *run) error {
	p, err := r.reader()
	if err != nil {
		return err
	}
	r.readerMu.Lock()
	defer r.readerMu.Unlock()
	epoch, entries, err := p.readLog(k.ctx, 3)
	if err != nil {
		return err
	}
	b := &proto.Batch{Epoch: epoch, Entries: entries, Head: entries[len(entries)-1].Seq}
	f := encode(b)
	if n := len(f) - 4; n < proto.MinFrameLimit || n > proto.DefaultMaxFrame {
		return fmt.Errorf("a batch of %d bytes: not a max_frame a server may announce", n)
	}
	r.s.frame, r.s.batch = f, b
	return nil
}

// resetUser resets the user's log through the admin API, as `syncctl reset-user` does, and
// returns the new epoch.
func (k *Kit) resetUser(uid string) (proto.Epoch, error) {
	var out struct {
		Epoch uint64 `json:"epoch"`
	}
	if err := k.admin().Call(k.ctx, http.MethodPost, "/v1/users/"+url.PathEscape(uid)+"/reset", &out); err != nil {
		return 0, err
	}
	return proto.Epoch(out.Epoch), nil
}

// supersede opens a sync stream of the run's device from the kit itself and keeps it for
// 3 × heartbeat and a second, the time the client is watched.
func (k *Kit) supersede(r *run, epoch proto.Epoch) error {
	tok, err := k.srv.MintToken(r.user, r.device, time.Hour)
	if err != nil {
		return err
	}
	p, err := dialPeer(k.ctx, k.srv.Addr().String(), k.srv.Fingerprint(), tok, r.device)
	if err != nil {
		return err
	}
	defer p.close()
	r.mu.Lock()
	pos := r.acked
	r.mu.Unlock()
	if err := p.supersede(k.ctx, epoch, pos); err != nil {
		return err
	}
	select {
	case <-time.After(3*heartbeat + time.Second):
	case <-k.ctx.Done():
	}
	return nil
}

// later runs fn in its own goroutine: the part of a scenario that takes time. The run is not
// done while one runs; an error fails the run as the kit's own.
func (r *run) later(fn func(k *Kit) error) {
	r.k.mu.Lock()
	defer r.k.mu.Unlock()
	if r.k.closed {
		return
	}
	r.pending.Add(1)
	r.k.actions.Add(1)
	go func() {
		defer r.k.actions.Done()
		defer r.pending.Add(-1)
		if err := fn(r.k); err != nil {
			r.mu.Lock()
			r.fail("the kit failed (not the client): %v", err)
			r.mu.Unlock()
		}
	}()
}

// writer and reader are the run's two connections to the server: its other user, who writes the
// messages, and the run's user on the kit's own device, which reads the truth.
func (r *run) writer() (*peer, error) {
	return r.dial(&r.writerMu, &r.writerPeer, r.other, "kit")
}

func (r *run) reader() (*peer, error) {
	return r.dial(&r.readerMu, &r.readerPeer, r.user, "conformance-kit")
}

func (r *run) dial(mu *sync.Mutex, p **peer, uid, device string) (*peer, error) {
	mu.Lock()
	defer mu.Unlock()
	if *p != nil {
		return *p, nil
	}
	srv := r.server()
	tok, err := srv.MintToken(uid, device, 24*time.Hour)
	if err != nil {
		return nil, err
	}
	np, err := dialPeer(r.k.ctx, srv.Addr().String(), srv.Fingerprint(), tok, device)
	if err != nil {
		return nil, err
	}
	*p = np
	return np, nil
}

// dropPeers closes the run's two connections to the server; the next request dials again.
func (r *run) dropPeers() {
	for _, p := range []struct {
		mu *sync.Mutex
		p  **peer
	}{{&r.writerMu, &r.writerPeer}, {&r.readerMu, &r.readerPeer}} {
		p.mu.Lock()
		if *p.p != nil {
			(*p.p).close()
			*p.p = nil
		}
		p.mu.Unlock()
	}
}

// firstExpiry is when the run's first token expires.
func (r *run) firstExpiry() time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.tokens[r.firstToken]
}

// leveled is a slog handler that drops records below a level (the embedded server's chatter).
type leveled struct {
	slog.Handler
	min slog.Level
}

func (h leveled) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= h.min && h.Handler.Enabled(ctx, l)
}
func (h leveled) WithAttrs(a []slog.Attr) slog.Handler { return leveled{h.Handler.WithAttrs(a), h.min} }
func (h leveled) WithGroup(g string) slog.Handler      { return leveled{h.Handler.WithGroup(g), h.min} }

// freeTCP returns a free loopback TCP address (the embedded server's Raft port, which must be
// known before it listens).
func freeTCP() string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "127.0.0.1:0"
	}
	defer l.Close()
	return l.Addr().String()
}
