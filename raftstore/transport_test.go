package raftstore

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/syncd-dev/syncd/test/testkit"
)

// The mux tests here run plain TCP (a nil *TLS): they are about the header, routing, backlogs and
// raft over bare layers, which dial bare addresses (no "id@" target, so no certificate to
// expect). The same mux with TLS is tested in tls_internal_test.go and under every node test.

// testLogWriter forwards log output to t.Log until the test's cleanups run,
// so a straggling goroutine can never log into a finished test.
type testLogWriter struct {
	mu   sync.Mutex
	t    testing.TB
	done bool
}

func (w *testLogWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.done {
		w.t.Log(strings.TrimRight(string(p), "\n"))
	}
	return len(p), nil
}

// testSlog returns a logger that writes to t.Log (shown on failure or -v).
func testSlog(t testing.TB) *slog.Logger {
	w := &testLogWriter{t: t}
	// Registered first, so it runs after every later cleanup.
	t.Cleanup(func() {
		w.mu.Lock()
		w.done = true
		w.mu.Unlock()
	})
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelInfo}))
}

// listenLoopback opens a TCP listener on a random loopback port.
func listenLoopback(t testing.TB) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return ln
}

// recordingFSM records the data of every applied command, in order.
type recordingFSM struct {
	mu      sync.Mutex
	applied []string
}

func (f *recordingFSM) Apply(l *raft.Log) any {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.applied = append(f.applied, string(l.Data))
	return len(f.applied)
}

func (f *recordingFSM) entries() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.applied)
}

func (f *recordingFSM) Snapshot() (raft.FSMSnapshot, error) {
	return &recordingSnapshot{entries: f.entries()}, nil
}

func (f *recordingFSM) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		return err
	}
	var entries []string
	if len(b) > 0 {
		entries = strings.Split(string(b), "\n")
	}
	f.mu.Lock()
	f.applied = entries
	f.mu.Unlock()
	return nil
}

type recordingSnapshot struct{ entries []string }

func (s *recordingSnapshot) Persist(sink raft.SnapshotSink) error {
	if _, err := sink.Write([]byte(strings.Join(s.entries, "\n"))); err != nil {
		sink.Cancel()
		return err
	}
	return sink.Close()
}

func (s *recordingSnapshot) Release() {}

// testRaftConfig is a raft config with timeouts short enough for tests but
// long enough to keep leadership stable under -race.
func testRaftConfig(id string, logger hclog.Logger) *raft.Config {
	c := raft.DefaultConfig()
	c.LocalID = raft.ServerID(id)
	c.HeartbeatTimeout = 300 * time.Millisecond
	c.ElectionTimeout = 300 * time.Millisecond
	c.LeaderLeaseTimeout = 150 * time.Millisecond
	c.CommitTimeout = 5 * time.Millisecond
	c.Logger = logger
	return c
}

// waitLeader returns the index of the single node of rafts that is leader.
func waitLeader(t testing.TB, rafts []*raft.Raft) int {
	t.Helper()
	leader := -1
	testkit.WaitTrue(t, 15*time.Second, "a leader", func() bool {
		leader = -1
		for i, r := range rafts {
			if r.State() == raft.Leader {
				leader = i
				return true
			}
		}
		return false
	})
	return leader
}

// TestTransportTwoShardsThreeNodes runs two independent 3-voter raft
// groups (shards 1 and 2) over three muxes, one listener per node, and
// checks every shard's FSMs received exactly that shard's commands.
func TestTransportTwoShardsThreeNodes(t *testing.T) {
	logger := testSlog(t)
	const nodes = 3
	shards := []ShardID{1, 2}

	muxes := make([]*Mux, nodes)
	for i := range muxes {
		muxes[i] = newMux(listenLoopback(t), nil, logger.With("node", i))
	}
	var servers []raft.Server
	for i, m := range muxes {
		servers = append(servers, raft.Server{
			Suffrage: raft.Voter,
			ID:       raft.ServerID(fmt.Sprintf("n%d", i)),
			Address:  raft.ServerAddress(m.Addr().String()),
		})
	}

	type shardGroup struct {
		rafts  []*raft.Raft
		fsms   []*recordingFSM
		transp []*raft.NetworkTransport
	}
	groups := map[ShardID]*shardGroup{}
	t.Cleanup(func() {
		// Stop every raft first so nobody redials, then drop pooled
		// streams (which ends the peers' inbound handlers), then muxes.
		for _, g := range groups {
			for _, r := range g.rafts {
				if err := r.Shutdown().Error(); err != nil {
					t.Errorf("raft shutdown: %v", err)
				}
			}
		}
		for _, g := range groups {
			for _, tr := range g.transp {
				tr.CloseStreams()
			}
		}
		for _, m := range muxes {
			if err := m.Close(); err != nil {
				t.Errorf("mux close: %v", err)
			}
		}
	})

	for _, shard := range shards {
		g := &shardGroup{}
		groups[shard] = g
		for i, m := range muxes {
			layer, err := m.Layer(shard)
			if err != nil {
				t.Fatal(err)
			}
			nodeLog := logger.With("node", i)
			tr := newShardTransport(layer, nodeLog)
			g.transp = append(g.transp, tr)
			if got, want := string(tr.LocalAddr()), m.Addr().String(); got != want {
				t.Fatalf("transport addr = %s, want mux addr %s", got, want)
			}
			store := raft.NewInmemStore()
			fsm := &recordingFSM{}
			conf := testRaftConfig(fmt.Sprintf("n%d", i), newRaftLogger(nodeLog, shard))
			r, err := raft.NewRaft(conf, fsm, store, store, raft.NewInmemSnapshotStore(), tr)
			if err != nil {
				t.Fatal(err)
			}
			g.rafts = append(g.rafts, r)
			g.fsms = append(g.fsms, fsm)
			if err := r.BootstrapCluster(raft.Configuration{Servers: servers}).Error(); err != nil {
				t.Fatalf("bootstrap shard %d node %d: %v", shard, i, err)
			}
		}
	}

	const perShard = 50
	want := map[ShardID][]string{}
	for _, shard := range shards {
		g := groups[shard]
		leader := g.rafts[waitLeader(t, g.rafts)]
		for i := range perShard {
			cmd := fmt.Sprintf("shard-%d-cmd-%d", shard, i)
			want[shard] = append(want[shard], cmd)
			if err := leader.Apply([]byte(cmd), 5*time.Second).Error(); err != nil {
				t.Fatalf("shard %d apply %d: %v", shard, i, err)
			}
		}
	}
	for _, shard := range shards {
		for i, fsm := range groups[shard].fsms {
			testkit.WaitTrue(t, 15*time.Second, fmt.Sprintf("shard %d node %d to apply %d entries", shard, i, perShard), func() bool {
				return len(fsm.entries()) >= perShard
			})
			if got := fsm.entries(); !slices.Equal(got, want[shard]) {
				t.Errorf("shard %d node %d FSM = %q, want %q", shard, i, got, want[shard])
			}
		}
	}
}

// rawDial connects to addr and writes payload without any framing.
func rawDial(t testing.TB, addr net.Addr, payload []byte) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr.String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if len(payload) > 0 {
		if _, err := c.Write(payload); err != nil {
			t.Fatal(err)
		}
	}
	return c
}

// expectServerClose asserts the server closes c (read yields EOF or reset)
// well before the client-side deadline.
func expectServerClose(t testing.TB, c net.Conn, within time.Duration) {
	t.Helper()
	if err := c.SetReadDeadline(time.Now().Add(within)); err != nil {
		t.Fatal(err)
	}
	var buf [1]byte
	_, err := c.Read(buf[:])
	var ne net.Error
	if err == nil || (errors.As(err, &ne) && ne.Timeout()) {
		t.Fatalf("connection not closed by server within %v (err=%v)", within, err)
	}
}

func muxHeader(shard ShardID) []byte {
	return binary.BigEndian.AppendUint32([]byte(muxMagic), uint32(shard))
}

// checkLayerRoundTrip dials shard through layer and checks bytes arrive on
// the connection the layer accepts.
func checkLayerRoundTrip(t testing.TB, layer raft.StreamLayer) {
	t.Helper()
	out, err := layer.Dial(raft.ServerAddress(layer.Addr().String()), 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	in, err := layer.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	if _, err := out.Write([]byte("ping")); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 4)
	in.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.ReadFull(in, got); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, []byte("ping")) {
		t.Fatalf("got %q, want ping", got)
	}
}

// TestMuxBadHeader checks garbage, unknown shards and silent clients are
// disconnected and that the mux keeps serving afterwards.
func TestMuxBadHeader(t *testing.T) {
	m := startMux(listenLoopback(t), nil, testSlog(t), 200*time.Millisecond, 200*time.Millisecond)
	defer m.Close()
	layer, err := m.Layer(7)
	if err != nil {
		t.Fatal(err)
	}
	defer layer.Close()

	t.Run("garbage", func(t *testing.T) {
		expectServerClose(t, rawDial(t, m.Addr(), []byte("GARBAGE!")), 3*time.Second)
	})
	t.Run("short garbage then hang up", func(t *testing.T) {
		c := rawDial(t, m.Addr(), []byte("SY"))
		c.Close()
	})
	t.Run("unregistered shard", func(t *testing.T) {
		expectServerClose(t, rawDial(t, m.Addr(), muxHeader(99)), 3*time.Second)
	})
	t.Run("silent client hits header deadline", func(t *testing.T) {
		expectServerClose(t, rawDial(t, m.Addr(), nil), 3*time.Second)
	})
	t.Run("still serving", func(t *testing.T) {
		checkLayerRoundTrip(t, layer)
	})
}

// TestMuxLayerLifecycle covers registration, Accept after Close and
// re-registration of a shard.
func TestMuxLayerLifecycle(t *testing.T) {
	m := newMux(listenLoopback(t), nil, testSlog(t))
	defer m.Close()

	l1, err := m.Layer(1)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Layer(1); err == nil {
		t.Fatal("second Layer(1) succeeded, want error")
	}
	if l1.Addr().String() != m.Addr().String() {
		t.Fatalf("layer addr %v != mux addr %v", l1.Addr(), m.Addr())
	}
	checkLayerRoundTrip(t, l1)

	// A blocked Accept must return net.ErrClosed when the layer closes.
	acceptErr := make(chan error, 1)
	go func() {
		_, err := l1.Accept()
		acceptErr <- err
	}()
	if err := l1.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-acceptErr; !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Accept after Close = %v, want net.ErrClosed", err)
	}
	if _, err := l1.Accept(); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("second Accept after Close = %v, want net.ErrClosed", err)
	}
	// The shard is unregistered: its connections are refused...
	conn, err := l1.Dial(raft.ServerAddress(m.Addr().String()), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	expectServerClose(t, conn, 3*time.Second)
	// ...and it can be registered again.
	l2, err := m.Layer(1)
	if err != nil {
		t.Fatalf("re-register after Close: %v", err)
	}
	defer l2.Close()
	checkLayerRoundTrip(t, l2)
}

// TestMuxBacklogFull checks a shard that stops accepting makes the mux drop
// extra connections instead of blocking.
func TestMuxBacklogFull(t *testing.T) {
	m := startMux(listenLoopback(t), nil, testSlog(t), time.Second, 100*time.Millisecond)
	defer m.Close()
	layer, err := m.Layer(3)
	if err != nil {
		t.Fatal(err)
	}
	defer layer.Close()
	sl := layer.(*shardLayer)

	for range layerBacklog {
		c, err := layer.Dial(raft.ServerAddress(m.Addr().String()), time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
	}
	testkit.WaitTrue(t, 5*time.Second, "backlog to fill", func() bool { return len(sl.conns) == layerBacklog })
	extra, err := layer.Dial(raft.ServerAddress(m.Addr().String()), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer extra.Close()
	expectServerClose(t, extra, 3*time.Second)
}

// TestMuxCloseClosesPending checks Mux.Close is prompt with a client stuck
// mid-header, closes routed-but-unaccepted conns, fails the layers' Accept
// and refuses new layers.
func TestMuxCloseClosesPending(t *testing.T) {
	m := newMux(listenLoopback(t), nil, testSlog(t)) // 5 s header timeout
	layer, err := m.Layer(5)
	if err != nil {
		t.Fatal(err)
	}
	sl := layer.(*shardLayer)
	queued, err := layer.Dial(raft.ServerAddress(m.Addr().String()), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer queued.Close()
	testkit.WaitTrue(t, 5*time.Second, "conn to be queued", func() bool { return len(sl.conns) == 1 })

	stuck := rawDial(t, m.Addr(), []byte("SYR")) // partial header
	testkit.WaitTrue(t, 5*time.Second, "conn to be handshaking", func() bool {
		m.mu.Lock()
		defer m.mu.Unlock()
		return len(m.handshaking) == 1
	})

	start := time.Now()
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("Mux.Close took %v; it must not wait for header deadlines", d)
	}
	expectServerClose(t, queued, 3*time.Second)
	expectServerClose(t, stuck, 3*time.Second)
	if _, err := layer.Accept(); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Accept after Mux.Close = %v, want net.ErrClosed", err)
	}
	if err := layer.Close(); err != nil {
		t.Fatalf("layer Close after Mux.Close: %v", err)
	}
	if _, err := m.Layer(6); err == nil {
		t.Fatal("Layer after Mux.Close succeeded, want error")
	}
	if err := m.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

// TestTransportHclogAdapter checks raft's hclog lines reach slog at the
// right level, tagged with component and shard.
func TestTransportHclogAdapter(t *testing.T) {
	var buf bytes.Buffer
	var mu sync.Mutex
	w := writerFunc(func(p []byte) (int, error) {
		mu.Lock()
		defer mu.Unlock()
		return buf.Write(p)
	})
	logger := slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug}))
	hl := newRaftLogger(logger, 42)
	hl.Warn("something odd", "peer", "n2")
	hl.Error("it broke")
	hl.Debug("details")
	hl.Trace("dropped: below debug")
	hl.Named("sub").Info("from sub-logger")

	mu.Lock()
	out := buf.String()
	mu.Unlock()
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 4 {
		t.Fatalf("got %d lines, want 4:\n%s", len(lines), out)
	}
	checks := []struct{ level, msg string }{
		{"level=WARN", `something odd: peer=n2`},
		{"level=ERROR", "it broke"},
		{"level=DEBUG", "details"},
		{"level=DEBUG", "sub: from sub-logger"}, // raft's info is per-shard chatter (newRaftLogger)
	}
	for i, c := range checks {
		for _, s := range []string{c.level, c.msg, "component=raft", "shard=42"} {
			if !strings.Contains(lines[i], s) {
				t.Errorf("line %d %q lacks %q", i, lines[i], s)
			}
		}
		if strings.Contains(lines[i], "[") {
			t.Errorf("line %d %q still has the hclog level bracket", i, lines[i])
		}
	}

	// The plain Write fallback parses the bracket itself.
	buf.Reset()
	a := &hclogAdapter{logger: logger}
	a.Write([]byte("[WARN]  a: x=1\n[ERROR] b\nno prefix\n"))
	got := buf.String()
	for _, s := range []string{`level=WARN msg="a: x=1"`, "level=ERROR msg=b", `level=DEBUG msg="no prefix"`} {
		if !strings.Contains(got, s) {
			t.Errorf("fallback output %q lacks %q", got, s)
		}
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }
