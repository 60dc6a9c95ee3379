package proccluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Node is one syncd process of a Cluster. Its exported fields are set by New and never change;
// its methods are safe for concurrent use, except that Start, Kill and Stop of the same node must
// not overlap.
type Node struct {
	ID         string // n1, n2, …
	Dir        string // data directory (-data-dir), kept across restarts
	Log        string // file holding the stdout and stderr of every run, appended
	ClientAddr string // QUIC, for devices (-listen)
	WebAddr    string // WebTransport (UDP) and WebSocket (TCP), for browsers (-web-listen)
	AdminAddr  string // admin HTTP (-admin)
	RaftAddr   string // Raft (-raft-addr)
	// Spare is set for the nodes of Config.Spares: not in the founding nodes' -peers and not
	// started by Cluster.Start.
	Spare bool

	c *Cluster

	mu       sync.Mutex
	extra    []string      // flags after the cluster's, from SetArgs
	syncd    string        // the binary of the next start, from SetSyncd; "": Config.Syncd
	cmd      *exec.Cmd     // the current (or last) run; nil before the first start
	done     chan struct{} // closed once cmd has been waited for (and OnExit has returned)
	exitErr  error         // cmd's Wait error, once done is closed
	expected bool          // the harness stopped or killed the current run on purpose
	paused   bool          // SIGSTOPped and not resumed
	starts   int
}

// SetArgs sets extra flags for n, after the cluster's own and Config.Args; they take effect at
// n's next start. The fault suite gives each node its -peer-dial map (and a spare its -join)
// this way.
func (n *Node) SetArgs(args ...string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.extra = slices.Clone(args)
}

// SetSyncd sets the binary n's next start runs, for a rolling upgrade (a node stopped and
// started again on a new build); "" means the cluster's (Config.Syncd).
func (n *Node) SetSyncd(path string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.syncd = path
}

// Args returns the flags n's next start runs syncd with. The caller owns the slice.
func (n *Node) Args() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.argsLocked()
}

// argsLocked returns the flags of n's next start.
// REQUIRES: n.mu
func (n *Node) argsLocked() []string {
	c := n.c
	args := []string{"-data-dir", n.Dir, "-node-id", n.ID, "-listen", n.ClientAddr, "-web-listen", n.WebAddr, "-admin", n.AdminAddr,
		"-raft-addr", n.RaftAddr, "-shards", fmt.Sprint(c.cfg.Shards),
		"-token-secret-file", c.cred.secretFile, "-cert", c.cred.certFile, "-key", c.cred.keyFile,
		"-admin-token-file", c.cred.adminTokenFile}
	args = append(args, c.nodeCertArgs(n.ID)...)
	// One founding node gets no -peers: it then runs exactly as a lone syncd does (raftstore
	// bootstraps a node without peers as a cluster of itself, the same as -peers naming it alone).
	if !n.Spare && len(c.peers) > 1 {
		args = append(args, "-peers", strings.Join(c.peers, ","))
	}
	args = append(args, c.cfg.Args...)
	return append(args, n.extra...)
}

// Start starts n's process: the first time, or again after it exited (Kill, Stop, a crash) on the
// same data directory, addresses and flags. It returns once the process runs, not once it is
// ready (see Cluster.WaitReady). It fails if n is running.
func (n *Node) Start() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.runningLocked() {
		return fmt.Errorf("proccluster: %s is already running", n.ID)
	}
	args := n.argsLocked()
	bin := n.c.cfg.Syncd
	if n.syncd != "" {
		bin = n.syncd
	}
	logf, err := os.OpenFile(n.Log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	defer logf.Close() // the child has its own descriptor
	n.starts++
	fmt.Fprintf(logf, "=== proccluster: start #%d of %s at %s: %s %s\n", n.starts, n.ID, time.Now().Format(time.RFC3339Nano),
		bin, strings.Join(args, " "))
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = procAttr()
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("proccluster: start %s: %w", n.ID, err)
	}
	done := make(chan struct{})
	n.cmd, n.done, n.exitErr, n.expected, n.paused = cmd, done, nil, false, false
	go n.wait(cmd, done)
	return nil
}

// wait waits for cmd, the run of n that done belongs to, reports the exit to Config.OnExit and
// closes done. It is the only goroutine a run has; it ends with the process.
func (n *Node) wait(cmd *exec.Cmd, done chan struct{}) {
	err := cmd.Wait()
	n.mu.Lock()
	n.exitErr = err
	expected := n.expected
	n.mu.Unlock()
	if f := n.c.cfg.OnExit; f != nil {
		f(n, err, expected)
	}
	close(done)
}

// runningLocked reports whether the current run has not been waited for yet.
// REQUIRES: n.mu
func (n *Node) runningLocked() bool {
	if n.done == nil {
		return false
	}
	select {
	case <-n.done:
		return false
	default:
		return true
	}
}

// Running reports whether n's process is alive (a paused one counts).
func (n *Node) Running() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.runningLocked()
}

// Serving reports whether n's process is alive and not paused: whether it can answer.
func (n *Node) Serving() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.runningLocked() && !n.paused
}

// Starts returns how many times n has been started; 0 for a spare not started yet.
func (n *Node) Starts() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.starts
}

// PID returns the process id of n's current or last run, or 0 before the first start.
func (n *Node) PID() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cmd == nil {
		return 0
	}
	return n.cmd.Process.Pid
}

// exitState returns whether n ever started, whether its current run has exited, and if so
// whether on purpose and its Wait error.
func (n *Node) exitState() (started, exited, expected bool, err error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.done == nil {
		return false, false, false, nil
	}
	return true, !n.runningLocked(), n.expected, n.exitErr
}

// signal sends sig to n's current run and returns the run's done channel. expect marks an exit
// it causes as caused by the harness. A process that has already exited is not an error.
func (n *Node) signal(sig os.Signal, expect bool) (chan struct{}, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cmd == nil {
		return nil, fmt.Errorf("proccluster: %s was never started", n.ID)
	}
	if expect {
		n.expected = true
	}
	if err := n.cmd.Process.Signal(sig); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return nil, fmt.Errorf("proccluster: signal %s: %w", n.ID, err)
	}
	return n.done, nil
}

// Kill sends SIGKILL to n and returns once the process is gone (at once if it had already
// exited). It fails if n was never started.
func (n *Node) Kill() error {
	done, err := n.signal(syscall.SIGKILL, true)
	if err != nil {
		return err
	}
	<-done
	return nil
}

// Pause stops n with SIGSTOP: it keeps its sockets but does nothing, as a node in a long GC pause
// or on a frozen VM would. It fails if n is not running, or outside Unix.
func (n *Node) Pause() error { return n.pauseOrResume(sigPause, true) }

// Resume continues a paused n (SIGCONT). It fails if n is not running, or outside Unix.
func (n *Node) Resume() error { return n.pauseOrResume(sigResume, false) }

func (n *Node) pauseOrResume(sig os.Signal, pause bool) error {
	if sig == nil {
		return errors.New("proccluster: pausing a process needs SIGSTOP and SIGCONT (Unix)")
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if !n.runningLocked() {
		return fmt.Errorf("proccluster: %s is not running", n.ID)
	}
	if err := n.cmd.Process.Signal(sig); err != nil {
		return fmt.Errorf("proccluster: signal %s: %w", n.ID, err)
	}
	n.paused = pause
	return nil
}

// Stop asks n to stop with SIGTERM (resuming it first if paused, since a stopped process cannot
// act on it) and waits up to timeout for it to exit; then it kills it. It returns nil if n is not
// running or exited with status 0; otherwise an error naming n and its log: that n did not stop
// within timeout and was killed, or how it exited.
func (n *Node) Stop(timeout time.Duration) error {
	if !n.Running() {
		return nil
	}
	if sigResume != nil {
		if _, err := n.signal(sigResume, true); err != nil {
			return err
		}
	}
	done, err := n.signal(syscall.SIGTERM, true)
	if err != nil {
		return err
	}
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
		if err := n.Kill(); err != nil {
			return err
		}
		return fmt.Errorf("%s did not stop within %v and was killed; see %s", n.ID, timeout, n.Log)
	}
	if _, _, _, err := n.exitState(); err != nil {
		return fmt.Errorf("%s stopped with %v; see %s", n.ID, err, n.Log)
	}
	return nil
}

// Ready asks n's /readyz (200 once every shard has a known leader) and returns nil if it
// answered 200, else what went wrong.
func (n *Node) Ready(ctx context.Context) error {
	code, body, err := n.AdminDo(ctx, http.MethodGet, "/readyz")
	if err != nil {
		return err
	}
	if code != http.StatusOK {
		return fmt.Errorf("/readyz %d %s", code, strings.TrimSpace(body[:min(len(body), 1024)]))
	}
	return nil
}

// LogTail returns the last lines lines of n's log (at most its last 64 KiB), or a note in
// parentheses saying why it cannot.
func (n *Node) LogTail(lines int) string {
	f, err := os.Open(n.Log)
	if err != nil {
		return "(" + err.Error() + ")"
	}
	defer f.Close()
	const window = 64 << 10
	if st, err := f.Stat(); err == nil && st.Size() > window {
		if _, err := f.Seek(-window, io.SeekEnd); err != nil {
			return "(" + err.Error() + ")"
		}
	}
	b, err := io.ReadAll(f)
	if err != nil {
		return "(" + err.Error() + ")"
	}
	all := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	return strings.Join(all[max(0, len(all)-lines):], "\n")
}
