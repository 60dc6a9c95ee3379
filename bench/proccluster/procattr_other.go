//go:build !linux

package proccluster

import "syscall"

// childProcAttr: no process group or parent-death signal outside Linux (a node outlives a
// killed load generator there).
func childProcAttr() *syscall.SysProcAttr { return nil }
