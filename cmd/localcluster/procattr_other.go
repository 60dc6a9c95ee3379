//go:build !unix

package main

import "syscall"

// childProcAttr: nothing special outside Unix.
func childProcAttr() *syscall.SysProcAttr { return nil }
