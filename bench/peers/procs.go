package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"
)

// stopGrace is how long a server has to exit after SIGTERM before it is killed.
const stopGrace = 10 * time.Second

// startWait bounds the wait for a system to answer after its processes start.
const startWait = 30 * time.Second

// server is a server process this program started, its output in a log file.
type server struct {
	name string
	cmd  *exec.Cmd
	log  string
	done chan struct{} // closed once the process has exited
	err  error         // its exit, once done is closed
}

// startServer starts bin with args as a child process writing its output to logPath. The child
// is killed if this program dies (Pdeathsig), so an interrupted bench leaves no server behind.
func startServer(name, bin, logPath string, args ...string) (*server, error) {
	f, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	defer f.Close() // the child has its own descriptor
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	s := &server{name: name, cmd: cmd, log: logPath, done: make(chan struct{})}
	go func() {
		s.err = cmd.Wait()
		close(s.done)
	}()
	return s, nil
}

// exited returns an error saying that the process has exited, with the end of its log, or nil
// while it runs.
func (s *server) exited() error {
	select {
	case <-s.done:
		return fmt.Errorf("%s exited (%v): %s", s.name, s.err, s.logTail())
	default:
		return nil
	}
}

// stop sends SIGTERM, waits up to stopGrace, then kills; it returns once the process is gone,
// with an error if it had to be killed.
func (s *server) stop() error {
	select {
	case <-s.done:
		return nil
	default:
	}
	s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.done:
		return nil
	case <-time.After(stopGrace):
		s.cmd.Process.Kill()
		<-s.done
		return fmt.Errorf("%s did not exit within %v of SIGTERM: killed", s.name, stopGrace)
	}
}

// logTail returns the last lines of the server's log, on one line.
func (s *server) logTail() string {
	b, _ := os.ReadFile(s.log)
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) > 5 {
		lines = lines[len(lines)-5:]
	}
	return strings.Join(lines, " | ")
}

// freePort returns a TCP port free on ip at the time of the call (the server binds it a moment
// later: on a machine shared with other benchmarks a clash is possible, and shows as a server
// that does not start, its log saying why).
func freePort(ip string) (int, error) {
	ln, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// waitUntil calls ready until it returns nil, for at most startWait, failing at once when one of
// servers exits; its error is ready's last, or the exit.
func waitUntil(ctx context.Context, servers []*server, ready func(context.Context) error) error {
	deadline := time.Now().Add(startWait)
	for {
		for _, s := range servers {
			if err := s.exited(); err != nil {
				return err
			}
		}
		rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		err := ready(rctx)
		cancel()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("not ready within %v: %w", startWait, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
