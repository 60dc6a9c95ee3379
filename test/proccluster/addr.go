package proccluster

import (
	"fmt"
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
