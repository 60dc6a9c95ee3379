package test

import "syscall"

// clusterProcAttr makes the kernel kill a syncd child if the test process dies first (a test
// timeout, a crash), so no node outlives the run and holds its ports.
func clusterProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
