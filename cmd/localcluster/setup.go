package main

// Everything before the nodes start that is localcluster's own: the cluster's layout (recorded in
// the directory so a later start finds it), the checks that its addresses can be bound, and the
// advice when the build cannot run. Building, the shared token secret and certificate, and the
// nodes themselves are the harness's (test/proccluster).

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/syncd-dev/syncd/test/proccluster"
)

// stateFile, in the cluster directory, records the layout the cluster was created with.
const stateFile = "localcluster.json"

// layout is what a cluster directory was created with. The nodes' Raft configurations name the
// nodes and their addresses, so a later start must use the same.
type layout struct {
	Nodes    int `json:"nodes"`
	BasePort int `json:"base_port"`
	Shards   int `json:"shards"`
}

// resolveLayout returns the layout to start: the one recorded in dir if there is one (flags that
// contradict it are an error), else the flags with the defaults. It also reports whether dir
// already holds a cluster. A non-empty dir that localcluster did not create is refused, so a
// mistyped -dir does not scatter nodes into someone's data.
func resolveLayout(dir string, c config) (layout, bool, error) {
	want := layout{Nodes: c.Nodes, BasePort: c.BasePort, Shards: c.Shards}
	raw, err := os.ReadFile(filepath.Join(dir, stateFile))
	switch {
	case err == nil:
		var have layout
		if err := json.Unmarshal(raw, &have); err != nil || have.Nodes < 1 || have.BasePort < 1 || have.Shards < 1 {
			return layout{}, false, fmt.Errorf("%s is damaged; delete %s for a fresh cluster", filepath.Join(dir, stateFile), dir)
		}
		var diffs []string
		if want.Nodes != 0 && want.Nodes != have.Nodes {
			diffs = append(diffs, fmt.Sprintf("-nodes %d", have.Nodes))
		}
		if want.BasePort != 0 && want.BasePort != have.BasePort {
			diffs = append(diffs, fmt.Sprintf("-base-port %d", have.BasePort))
		}
		if want.Shards != 0 && want.Shards != have.Shards {
			diffs = append(diffs, fmt.Sprintf("-shards %d", have.Shards))
		}
		if len(diffs) > 0 {
			return layout{}, false, fmt.Errorf("%s holds a cluster created with %s: a static cluster cannot change them; "+
				"leave those flags out to restart it, or use another -dir (or delete this one) for a new cluster",
				dir, strings.Join(diffs, " "))
		}
		return have, true, nil
	case errors.Is(err, fs.ErrNotExist):
		entries, err := os.ReadDir(dir)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return layout{}, false, err
		}
		if len(entries) > 0 {
			return layout{}, false, fmt.Errorf("%s exists, is not empty and was not created by localcluster (no %s); "+
				"pick another -dir", dir, stateFile)
		}
		if want.Nodes == 0 {
			want.Nodes = defaultNodes
		}
		if want.BasePort == 0 {
			want.BasePort = defaultBasePort
		}
		if want.Shards == 0 {
			want.Shards = defaultShards
		}
		return want, false, nil
	default:
		return layout{}, false, err
	}
}

// initDir creates dir for a new cluster: the layout file, and a .gitignore that keeps git from
// ever adding the secret, the keys or the data (the default -dir is inside the repository).
func initDir(dir string, l layout) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, ".gitignore"), []byte("# created by localcluster: nothing here belongs in git\n*\n"), 0o644); err != nil {
		return err
	}
	raw, err := json.MarshalIndent(l, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, stateFile), append(raw, '\n'), 0o644)
}

// Errors of checkAddrs, wrapped with the addresses and what to do.
var (
	errNoLoopback = errors.New("this machine has no loopback address")
	errInUse      = errors.New("in use")
)

// checkAddrs binds, and releases at once, every address the nodes of l will listen on, so that an
// address this machine lacks or a port in use is reported before anything starts, with what to
// do about it.
func checkAddrs(l layout) error {
	var missing []string
	for i := range l.Nodes {
		ip := proccluster.NodeIP(i)
		for _, a := range []struct{ network, addr string }{
			{"udp", net.JoinHostPort(ip, fmt.Sprint(l.BasePort))},
			{"tcp", net.JoinHostPort(ip, fmt.Sprint(l.BasePort+adminOffset))},
			{"tcp", net.JoinHostPort(ip, fmt.Sprint(l.BasePort+raftOffset))},
		} {
			err := tryBind(a.network, a.addr)
			switch {
			case err == nil:
			case errors.Is(err, syscall.EADDRNOTAVAIL):
				missing = append(missing, ip)
			case errors.Is(err, syscall.EADDRINUSE):
				return fmt.Errorf("%s %s is %w: is another localcluster or syncd running (pgrep -fl syncd)? "+
					"Stop it, or give a second cluster its own -dir and -base-port", a.network, a.addr, errInUse)
			default:
				return fmt.Errorf("cannot listen on %s %s: %w", a.network, a.addr, err)
			}
			if len(missing) > 0 && missing[len(missing)-1] == ip {
				break // one report per address is enough
			}
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("%w %s; %s", errNoLoopback, strings.Join(missing, ", "), aliasHint(missing))
	}
	return nil
}

// tryBind listens on addr and closes the listener.
func tryBind(network, addr string) error {
	if network == "udp" {
		c, err := net.ListenPacket(network, addr)
		if err != nil {
			return err
		}
		return c.Close()
	}
	ln, err := net.Listen(network, addr)
	if err != nil {
		return err
	}
	return ln.Close()
}

// aliasHint tells how to add loopback addresses: needed on macOS, where only 127.0.0.1 is
// configured, while Linux routes all of 127.0.0.0/8 to loopback.
func aliasHint(ips []string) string {
	var cmds []string
	for _, ip := range ips {
		cmds = append(cmds, "sudo ifconfig lo0 alias "+ip+" up")
	}
	return "on macOS add them with: " + strings.Join(cmds, "; ") + " (they last until reboot)"
}

// bindHint returns advice for a node log that shows a failed bind, or "".
func bindHint(logTail, ip string) string {
	switch {
	case strings.Contains(logTail, "assign requested address"):
		return aliasHint([]string{ip})
	case strings.Contains(logTail, "address already in use"):
		return "a port of " + ip + " is in use: is another localcluster or syncd running? (see pgrep -fl syncd)"
	}
	return ""
}

// findModuleRoot walks up from dir to the go.mod of the syncd module and returns its directory
// (proccluster.ModuleRoot), or an error saying what to do when dir is not inside it.
func findModuleRoot(dir string) (string, error) {
	root, err := proccluster.ModuleRoot(dir)
	var nim *proccluster.NotInModuleError
	if errors.As(err, &nim) {
		return "", fmt.Errorf("localcluster builds syncd from source, so it must run inside the syncd repository (%s): "+
			"cd into it, or pass -syncd <path to a syncd binary>", nim.Why)
	}
	return root, err
}
