package testkit

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
)

// Tmpfs mounts a tmpfs of size bytes on a new directory under t.TempDir() and returns that
// directory, unmounting it when the test ends: a real, small file system that a test can fill
// up, to see what a node does when its disk is full. Mounting needs root (CAP_SYS_ADMIN); without
// it, or off Linux, the test is skipped.
func Tmpfs(t testing.TB, size int64) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "tmpfs")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	TmpfsAt(t, dir, size)
	return dir
}

// TmpfsAt mounts a tmpfs of size bytes on dir, an existing directory (what it holds is hidden
// until the unmount), like Tmpfs: for a data directory whose path a process already has.
func TmpfsAt(t testing.TB, dir string, size int64) {
	t.Helper()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size="+strconv.FormatInt(size, 10)+",mode=0700"); err != nil {
		t.Skipf("needs a small real file system: mount a tmpfs (as root): %v", err)
	}
	t.Cleanup(func() {
		if err := syscall.Unmount(dir, syscall.MNT_DETACH); err != nil {
			t.Errorf("unmount the test's tmpfs %s: %v", dir, err)
		}
	})
}

// FreeBytes returns the bytes available to this process on the file system holding dir.
func FreeBytes(t testing.TB, dir string) uint64 {
	t.Helper()
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		t.Fatal(err)
	}
	return st.Bavail * uint64(st.Bsize)
}

// Fill writes file (created, or grown) until at most leave bytes are free on its file system, or
// the file system is full (leave 0), and returns how many bytes it wrote. Remove the file to give
// the space back.
func Fill(t testing.TB, file string, leave uint64) int64 {
	t.Helper()
	f, err := os.OpenFile(file, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	chunk := make([]byte, 64<<10)
	var wrote int64
	for {
		free := FreeBytes(t, filepath.Dir(file))
		if free <= leave {
			return wrote
		}
		n := min(uint64(len(chunk)), free-leave)
		w, err := f.Write(chunk[:n])
		wrote += int64(w)
		if errors.Is(err, syscall.ENOSPC) {
			return wrote
		}
		if err != nil {
			t.Fatal(err)
		}
	}
}
