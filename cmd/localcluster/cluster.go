package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// stopGrace is how long the nodes get to stop after SIGTERM before they are killed.
const stopGrace = 10 * time.Second

// config is what run starts. Zero Nodes, BasePort and Shards mean what Dir was created with, else
// the defaults.
type config struct {
	Dir          string        // cluster directory; created on first start
	Nodes        int           // number of nodes
	BasePort     int           // client (QUIC) port; admin and Raft ports are offset from it
	Shards       int           // number of shards
	Syncd        string        // syncd binary; "" builds ./cmd/syncd and ./cmd/syncctl into Dir/bin
	SyncdArgs    []string      // extra flags for every node, after localcluster's own
	ReadyTimeout time.Duration // how long to wait for every /readyz (0: defaultReadyTimeout)

	Stdout io.Writer // the node table and the commands to try (nil: discarded)
	Stderr io.Writer // progress, node exits and errors (nil: discarded)

	// OnReady, if set, is called once every node is ready and the table has been printed.
	OnReady func(readyInfo)
}

// readyInfo describes a cluster whose nodes are all ready.
type readyInfo struct {
	Nodes       []nodeInfo
	Fingerprint string // of the certificate every node serves
	SecretFile  string // the token secret every node uses
}

// nodeInfo is one running node.
type nodeInfo struct {
	ID     string
	Client string // QUIC host:port
	Admin  string // admin HTTP host:port
	Raft   string // Raft host:port
	PID    int
	Log    string // file with the node's stdout and stderr
}

// node is one syncd child process. After start, done is closed once the process has been waited
// for; err is then its exit.
type node struct {
	nodeInfo
	dir  string
	cmd  *exec.Cmd
	done chan struct{}
	err  error
}

// exited reports whether the process has been waited for.
func (n *node) exited() bool {
	select {
	case <-n.done:
		return true
	default:
		return false
	}
}

// run starts the cluster described by c, waits until every node is ready, prints how to use it,
// and keeps it running until ctx is done; then it stops every node and returns once all have
// exited. It returns nil after a clean stop, and an error if the cluster could not be set up or
// started, or a node had to be killed or failed while stopping. A node that exits on its own
// while the cluster runs is reported on c.Stderr; the others keep running.
func run(ctx context.Context, c config) error {
	if c.Stdout == nil {
		c.Stdout = io.Discard
	}
	if c.Stderr == nil {
		c.Stderr = io.Discard
	}
	if c.ReadyTimeout <= 0 {
		c.ReadyTimeout = defaultReadyTimeout
	}
	dir, err := filepath.Abs(c.Dir)
	if err != nil {
		return err
	}
	lay, existing, err := resolveLayout(dir, c)
	if err != nil {
		return err
	}
	if err := checkAddrs(lay); err != nil {
		return err
	}
	if !existing {
		if err := initDir(dir, lay); err != nil {
			return err
		}
	}

	bin, syncctl := c.Syncd, "syncctl"
	if bin == "" {
		wd, err := os.Getwd()
		if err != nil {
			return err
		}
		root, err := findModuleRoot(wd)
		if err != nil {
			return err
		}
		binDir := filepath.Join(dir, "bin")
		fmt.Fprintf(c.Stderr, "localcluster: building syncd and syncctl from %s into %s\n", root, binDir)
		if err := build(ctx, root, binDir); err != nil {
			if ctx.Err() != nil {
				return errors.New("interrupted while building")
			}
			return err
		}
		bin, syncctl = filepath.Join(binDir, "syncd"), filepath.Join(binDir, "syncctl")
	} else {
		if bin, err = filepath.Abs(bin); err != nil {
			return err
		}
		if st, err := os.Stat(bin); err != nil || st.IsDir() {
			return fmt.Errorf("-syncd %s is not a syncd binary", c.Syncd)
		}
		if p := filepath.Join(filepath.Dir(bin), "syncctl"); fileExists(p) {
			syncctl = p
		}
	}

	secretFile, certFile, keyFile, fp, err := sharedCredentials(dir, lay.Nodes)
	if err != nil {
		return err
	}

	var peers []string
	nodes := make([]*node, lay.Nodes)
	for i := range nodes {
		ip := nodeIP(i + 1)
		n := &node{nodeInfo: nodeInfo{ID: fmt.Sprintf("n%d", i+1),
			Client: net.JoinHostPort(ip, strconv.Itoa(lay.BasePort)),
			Admin:  net.JoinHostPort(ip, strconv.Itoa(lay.BasePort+adminOffset)),
			Raft:   net.JoinHostPort(ip, strconv.Itoa(lay.BasePort+raftOffset))}}
		n.dir = filepath.Join(dir, n.ID)
		n.Log = filepath.Join(n.dir, "syncd.log")
		nodes[i] = n
		peers = append(peers, n.ID+"="+n.Raft)
	}
	cl := &cluster{nodes: nodes, exits: make(chan *node, len(nodes)), stderr: c.Stderr,
		http: &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}}
	for _, n := range nodes {
		args := []string{"-data-dir", n.dir, "-node-id", n.ID, "-listen", n.Client, "-admin", n.Admin,
			"-raft-addr", n.Raft, "-peers", strings.Join(peers, ","), "-shards", strconv.Itoa(lay.Shards),
			"-token-secret-file", secretFile, "-cert", certFile, "-key", keyFile}
		if err := cl.start(n, bin, append(args, c.SyncdArgs...)); err != nil {
			return errors.Join(err, cl.stop())
		}
	}
	verb := "starting"
	if existing {
		verb = "restarting"
	}
	fmt.Fprintf(c.Stderr, "localcluster: %s %d nodes in %s; waiting for every /readyz (up to %v)\n", verb, len(nodes), dir, c.ReadyTimeout)

	began := time.Now()
	if err := cl.waitReady(ctx, c.ReadyTimeout); err != nil {
		if errors.Is(err, context.Canceled) && ctx.Err() != nil {
			return cl.stop() // interrupted during startup
		}
		return errors.Join(err, cl.stop())
	}
	info := readyInfo{Fingerprint: fp, SecretFile: secretFile}
	for _, n := range nodes {
		info.Nodes = append(info.Nodes, n.nodeInfo)
	}
	printReady(c.Stdout, dir, syncctl, info, time.Since(began))
	if c.OnReady != nil {
		c.OnReady(info)
	}
	cl.watch(ctx)
	return cl.stop()
}

// cluster is the set of started nodes.
type cluster struct {
	nodes  []*node
	exits  chan *node // each started node once, when it has exited; buffered for every node
	stderr io.Writer
	http   *http.Client
}

// start starts n's process with its output appended to n.Log, and a goroutine that waits for it.
func (cl *cluster) start(n *node, bin string, args []string) error {
	if err := os.MkdirAll(n.dir, 0o700); err != nil {
		return err
	}
	logf, err := os.OpenFile(n.Log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	defer logf.Close() // the child has its own descriptor
	fmt.Fprintf(logf, "=== localcluster: starting %s at %s: %s %s\n", n.ID, time.Now().Format(time.RFC3339), bin, strings.Join(args, " "))
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = childProcAttr()
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", n.ID, err)
	}
	n.cmd, n.PID, n.done = cmd, cmd.Process.Pid, make(chan struct{})
	go func() {
		n.err = cmd.Wait()
		close(n.done)
		cl.exits <- n
	}()
	return nil
}

// waitReady polls every node's /readyz until all answer 200. It fails, naming the node and
// showing the tail of its log, if a node exits or timeout passes first, and returns ctx's error
// if ctx is done first.
func (cl *cluster) waitReady(ctx context.Context, timeout time.Duration) error {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	status := map[string]string{} // last /readyz answer of each node not yet ready
	for {
		for _, n := range cl.nodes {
			if s := cl.ready(ctx, n); s == "" {
				delete(status, n.ID)
			} else {
				status[n.ID] = s
			}
		}
		if len(status) == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case n := <-cl.exits:
			tail := logTail(n.Log, 30)
			msg := fmt.Sprintf("%s (pid %d) exited during startup (%v); last lines of %s:\n%s", n.ID, n.PID, exitText(n.err), n.Log, indent(tail))
			if hint := bindHint(tail, strings.Split(n.Client, ":")[0]); hint != "" {
				msg += "\n" + hint
			}
			return errors.New(msg)
		case <-deadline.C:
			var lines []string
			for _, n := range cl.nodes {
				if s, ok := status[n.ID]; ok {
					lines = append(lines, fmt.Sprintf("%s (admin %s): %s; last lines of %s:\n%s", n.ID, n.Admin, s, n.Log, indent(logTail(n.Log, 20))))
				}
			}
			return fmt.Errorf("not every node was ready after %v:\n%s", timeout, strings.Join(lines, "\n"))
		case <-tick.C:
		}
	}
}

// ready asks n's /readyz and returns "" if it answered 200, else what went wrong.
func (cl *cluster) ready(ctx context.Context, n *node) string {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+n.Admin+"/readyz", nil)
	if err != nil {
		return err.Error()
	}
	resp, err := cl.http.Do(req)
	if err != nil {
		return err.Error()
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
	if resp.StatusCode == http.StatusOK {
		return ""
	}
	return fmt.Sprintf("/readyz %d %s", resp.StatusCode, strings.TrimSpace(string(body)))
}

// watch reports nodes that exit on their own until ctx is done or no node is left.
func (cl *cluster) watch(ctx context.Context) {
	for alive := len(cl.nodes); alive > 0; alive-- {
		select {
		case <-ctx.Done():
			return
		case n := <-cl.exits:
			fmt.Fprintf(cl.stderr, "localcluster: %s (pid %d) exited: %v; the other nodes keep running "+
				"(stop with Ctrl-C and run localcluster again to bring it back). Last lines of %s:\n%s\n",
				n.ID, n.PID, exitText(n.err), n.Log, indent(logTail(n.Log, 10)))
		}
	}
	fmt.Fprintln(cl.stderr, "localcluster: every node has exited")
}

// stop sends SIGTERM to every node still running, kills those still running stopGrace later,
// and returns once every started node has exited. Its error names the nodes that had to be
// killed or exited with an error after SIGTERM.
func (cl *cluster) stop() error {
	var running []*node
	for _, n := range cl.nodes {
		if n.cmd != nil && !n.exited() {
			running = append(running, n)
			if err := n.cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
				fmt.Fprintf(cl.stderr, "localcluster: SIGTERM %s: %v\n", n.ID, err)
			}
		}
	}
	if len(running) == 0 {
		return nil
	}
	fmt.Fprintf(cl.stderr, "localcluster: stopping %d nodes (SIGTERM; SIGKILL after %v)\n", len(running), stopGrace)
	deadline := time.NewTimer(stopGrace)
	defer deadline.Stop()
	expired := false
	var errs []error
	for _, n := range running {
		if !expired {
			select {
			case <-n.done:
			case <-deadline.C:
				expired = true
			}
		}
		if expired && !n.exited() {
			_ = n.cmd.Process.Kill() // may race with its exit; either way it is waited for below
			errs = append(errs, fmt.Errorf("%s did not stop within %v and was killed; see %s", n.ID, stopGrace, n.Log))
		}
		<-n.done
		if !expired && n.err != nil {
			errs = append(errs, fmt.Errorf("%s stopped with %v; see %s", n.ID, exitText(n.err), n.Log))
		}
	}
	if len(errs) == 0 {
		fmt.Fprintln(cl.stderr, "localcluster: every node stopped; the data stays for the next start")
	}
	return errors.Join(errs...)
}

// exitText describes a process exit: "exit status 0", "exit status 1", "signal: killed".
func exitText(err error) string {
	if err == nil {
		return "exit status 0"
	}
	return err.Error()
}

// logTail returns the last lines lines of the file at path (at most its last 64 KiB), or a note
// saying why it cannot.
func logTail(path string, lines int) string {
	f, err := os.Open(path)
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

// indent prefixes every line of s with two spaces.
func indent(s string) string { return "  " + strings.ReplaceAll(s, "\n", "\n  ") }

// fileExists reports whether path names an existing file.
func fileExists(path string) bool {
	st, err := os.Stat(path)
	return err == nil && !st.IsDir()
}
