package main

import "syscall"

// childProcAttr puts a node in its own process group, so that Ctrl-C in the terminal reaches
// localcluster alone and the nodes stop in order, and makes the kernel kill the node if
// localcluster dies first (kill -9), so no node outlives it holding its ports.
func childProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
