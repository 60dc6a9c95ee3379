//go:build !linux

package test

import "syscall"

// clusterProcAttr: no parent-death signal outside Linux (the cluster suite skips there anyway).
func clusterProcAttr() *syscall.SysProcAttr { return nil }
