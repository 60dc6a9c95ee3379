//go:build !linux

package testkit

import "testing"

// Tmpfs skips the test: mounting a tmpfs is Linux's (see tmpfs_linux.go).
func Tmpfs(t testing.TB, size int64) string {
	t.Helper()
	t.Skip("needs a small real file system: a tmpfs, which this test mounts on Linux only")
	return ""
}

// TmpfsAt skips the test: mounting a tmpfs is Linux's (see tmpfs_linux.go).
func TmpfsAt(t testing.TB, dir string, size int64) {
	t.Helper()
	t.Skip("needs a small real file system: a tmpfs, which this test mounts on Linux only")
}

// FreeBytes is not used off Linux, where Tmpfs skips the test first.
func FreeBytes(t testing.TB, dir string) uint64 {
	t.Helper()
	t.Skip("measures free space on Linux only")
	return 0
}

// Fill is not used off Linux, where Tmpfs skips the test first.
func Fill(t testing.TB, file string, leave uint64) int64 {
	t.Helper()
	t.Skip("fills file systems on Linux only")
	return 0
}
