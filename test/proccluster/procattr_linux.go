package proccluster

import "syscall"

// procAttr puts a node in its own process group, so that Ctrl-C in a terminal reaches the parent
// alone (which then stops the nodes in order), and makes the kernel kill the node if the parent
// dies first (a kill -9, a test timeout, a crash), so that no node outlives it holding its ports.
func procAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
