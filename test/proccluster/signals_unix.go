//go:build unix

package proccluster

import (
	"os"
	"syscall"
)

// sigPause and sigResume are the signals of Node.Pause and Node.Resume.
var sigPause, sigResume os.Signal = syscall.SIGSTOP, syscall.SIGCONT
