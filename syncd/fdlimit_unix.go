//go:build unix

package syncd

import "syscall"

// fdLimit returns the process's soft RLIMIT_NOFILE (the runtime raised it to the hard limit at
// start), or false if it cannot be read.
func fdLimit() (uint64, bool) {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return 0, false
	}
	return uint64(lim.Cur), true
}
