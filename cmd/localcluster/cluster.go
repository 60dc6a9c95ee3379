package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/syncd-dev/syncd/test/proccluster"
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
	Nodes          []nodeInfo
	Fingerprint    string // of the certificate every node serves
	SecretFile     string // the token secret every node uses
	AdminTokenFile string // the admin token every node requires
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
		bins, err := proccluster.Build(ctx, proccluster.BuildConfig{Dir: binDir, Root: root, Syncctl: true})
		if err != nil {
			if ctx.Err() != nil {
				return errors.New("interrupted while building")
			}
			return err
		}
		bin, syncctl = bins.Syncd, bins.Syncctl
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

	// Nothing restarts a node here, so each exits at most once: the buffer holds every exit and
	// OnExit never blocks the harness.
	exits := make(chan nodeExit, lay.Nodes)
	cl, err := proccluster.New(proccluster.Config{Syncd: bin, Dir: dir, Nodes: lay.Nodes, Shards: lay.Shards,
		BasePort: lay.BasePort, Args: c.SyncdArgs,
		OnExit: func(n *proccluster.Node, err error, expected bool) {
			if !expected {
				exits <- nodeExit{node: n, pid: n.PID(), err: err}
			}
		}})
	if err != nil {
		return err
	}
	if err := cl.Start(); err != nil {
		return errors.Join(err, stop(cl, c.Stderr))
	}
	verb := "starting"
	if existing {
		verb = "restarting"
	}
	fmt.Fprintf(c.Stderr, "localcluster: %s %d nodes in %s; waiting for every /readyz (up to %v)\n", verb, cl.Size(), dir, c.ReadyTimeout)

	began := time.Now()
	if err := cl.WaitReady(ctx, c.ReadyTimeout); err != nil {
		if errors.Is(err, context.Canceled) && ctx.Err() != nil {
			return stop(cl, c.Stderr) // interrupted during startup
		}
		var exit *proccluster.ExitError
		if errors.As(err, &exit) {
			err = startupExit(exit)
		}
		return errors.Join(err, stop(cl, c.Stderr))
	}
	info := readyInfo{Fingerprint: cl.Fingerprint(), SecretFile: cl.SecretFile(), AdminTokenFile: cl.AdminTokenFile()}
	for _, n := range cl.Nodes() {
		info.Nodes = append(info.Nodes, nodeInfo{ID: n.ID, Client: n.ClientAddr, Admin: n.AdminAddr, Raft: n.RaftAddr,
			PID: n.PID(), Log: n.Log})
	}
	printReady(c.Stdout, dir, syncctl, info, time.Since(began))
	if c.OnReady != nil {
		c.OnReady(info)
	}
	watch(ctx, exits, cl.Size(), c.Stderr)
	return stop(cl, c.Stderr)
}

// nodeExit is an exit of a node localcluster did not cause.
type nodeExit struct {
	node *proccluster.Node
	pid  int
	err  error // exec.Cmd.Wait's
}

// startupExit describes a node that exited before every node was ready, with the tail of its
// log and, if the log shows a failed bind, what to do about it.
func startupExit(e *proccluster.ExitError) error {
	n := e.Node
	tail := n.LogTail(30)
	msg := fmt.Sprintf("%s (pid %d) exited during startup (%v); last lines of %s:\n%s", n.ID, e.PID, exitText(e.Err), n.Log, indent(tail))
	if hint := bindHint(tail, strings.Split(n.ClientAddr, ":")[0]); hint != "" {
		msg += "\n" + hint
	}
	return errors.New(msg)
}

// watch reports nodes that exit on their own until ctx is done or none of the nodes is left.
func watch(ctx context.Context, exits <-chan nodeExit, nodes int, stderr io.Writer) {
	for alive := nodes; alive > 0; alive-- {
		select {
		case <-ctx.Done():
			return
		case e := <-exits:
			fmt.Fprintf(stderr, "localcluster: %s (pid %d) exited: %v; the other nodes keep running "+
				"(stop with Ctrl-C and run localcluster again to bring it back). Last lines of %s:\n%s\n",
				e.node.ID, e.pid, exitText(e.err), e.node.Log, indent(e.node.LogTail(10)))
		}
	}
	fmt.Fprintln(stderr, "localcluster: every node has exited")
}

// stop sends SIGTERM to every node still running, kills those still running stopGrace later,
// and returns once every started node has exited. Its error names the nodes that had to be
// killed or exited with an error after SIGTERM.
func stop(cl *proccluster.Cluster, stderr io.Writer) error {
	running := 0
	for _, n := range cl.Nodes() {
		if n.Running() {
			running++
		}
	}
	if running == 0 {
		return nil
	}
	fmt.Fprintf(stderr, "localcluster: stopping %d nodes (SIGTERM; SIGKILL after %v)\n", running, stopGrace)
	err := cl.Stop(stopGrace)
	if err == nil {
		fmt.Fprintln(stderr, "localcluster: every node stopped; the data stays for the next start")
	}
	return err
}

// exitText describes a process exit: "exit status 0", "exit status 1", "signal: killed".
func exitText(err error) string {
	if err == nil {
		return "exit status 0"
	}
	return err.Error()
}

// indent prefixes every line of s with two spaces.
func indent(s string) string { return "  " + strings.ReplaceAll(s, "\n", "\n  ") }

// fileExists reports whether path names an existing file.
func fileExists(path string) bool {
	st, err := os.Stat(path)
	return err == nil && !st.IsDir()
}
