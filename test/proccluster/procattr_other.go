//go:build !unix

package proccluster

import "syscall"

// procAttr: nothing special outside Unix (nodes are stopped with signals, so the harness is of
// little use there anyway).
func procAttr() *syscall.SysProcAttr { return nil }
