package proccluster

import (
	"errors"
	"fmt"
	"testing"

	"github.com/syncd-dev/syncd/test/testkit"
)

// Port offsets of the fixed layout (Config.BasePort): node i listens for clients (QUIC) on
// BasePort, for admin HTTP on BasePort+AdminPortOffset and for Raft on BasePort+RaftPortOffset,
// each on its own address NodeIP(i).
const (
	AdminPortOffset = 80
	RaftPortOffset  = 100
)

// NodeIP returns the loopback address of node i (0-based) in the fixed layout: 127.0.0.(i+1).
// Linux routes all of 127.0.0.0/8 to loopback; macOS needs an alias for every address but
// 127.0.0.1.
func NodeIP(i int) string { return fmt.Sprintf("127.0.0.%d", i+1) }

// freeAddr returns a 127.0.0.1 address whose port is free for TCP and UDP and lies below the
// kernel's ephemeral range (testkit.FreeAddr: a port from that range could be taken by an
// outgoing connection while its node is down between a kill and a restart).
//
// FreeAddr reports failure through a testing.TB, which a command such as syncbench does not have:
// errTB turns its Fatal into a panic that freeAddr recovers as an error. FreeAddr calls only
// Helper and Fatal; any other method would hit the nil embedded interface and panic for real.
func freeAddr() (addr string, err error) {
	defer func() {
		if r := recover(); r != nil {
			f, ok := r.(fatalError)
			if !ok {
				panic(r)
			}
			err = f
		}
	}()
	return testkit.FreeAddr(errTB{}), nil
}

// errTB is the testing.TB freeAddr hands to testkit.FreeAddr.
type errTB struct{ testing.TB }

// Helper does nothing: there is no test log to attribute lines in.
func (errTB) Helper() {}

// Fatal panics with a fatalError, which freeAddr recovers.
func (errTB) Fatal(args ...any) { panic(fatalError{errors.New("proccluster: " + fmt.Sprint(args...))}) }

// fatalError carries a FreeAddr failure from errTB.Fatal to freeAddr.
type fatalError struct{ error }
