//go:build !unix

package proccluster

import "os"

// sigPause and sigResume are nil outside Unix: there is no SIGSTOP, and Node.Pause and
// Node.Resume fail.
var sigPause, sigResume os.Signal
