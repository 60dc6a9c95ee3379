//go:build unix && !linux

package proccluster

import "syscall"

// procAttr puts a node in its own process group, so that Ctrl-C in a terminal reaches the parent
// alone, which then stops the nodes in order. There is no parent-death signal here: a node of a
// parent killed with SIGKILL keeps running, and the next start finds its ports in use.
func procAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setpgid: true} }
