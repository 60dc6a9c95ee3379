//go:build unix && !linux

package main

import "syscall"

// childProcAttr puts a node in its own process group, so that Ctrl-C in the terminal reaches
// localcluster alone and the nodes stop in order. (There is no parent-death signal here: if
// localcluster is killed with SIGKILL its nodes keep running; the next start reports their ports
// in use.)
func childProcAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setpgid: true} }
