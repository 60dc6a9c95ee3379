package proccluster

import "syscall"

// childProcAttr puts a node in its own process group, so that Ctrl-C in the terminal reaches
// the load generator alone (which then stops the nodes), and makes the kernel kill the node if
// the load generator dies first, so that no node outlives it holding its ports.
func childProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
