package testkit

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"time"
)

// Mesh holds one Relay per ordered pair of nodes, so every node-to-node connection of a cluster
// passes through a relay the test controls: node from dials DialMap(from)[to] instead of to's
// address. The set of relays is fixed at NewMesh, so a Mesh is safe for concurrent use.
type Mesh struct {
	relays map[[2]string]*Relay // (from, to) → relay
}

// NewMesh creates a relay for every ordered pair of the nodes of addrs (node id → the address
// its peers dial), forwarding to addrs[to]. On error it closes what it had created.
func NewMesh(addrs map[string]string) (*Mesh, error) {
	m := &Mesh{relays: map[[2]string]*Relay{}}
	for from := range addrs {
		for to, target := range addrs {
			if from == to {
				continue
			}
			r, err := NewRelay(target)
			if err != nil {
				m.Close()
				return nil, err
			}
			m.relays[[2]string{from, to}] = r
		}
	}
	return m, nil
}

// Relay returns the relay carrying from's connections to to, or nil if either is not a node of
// the mesh. Blocking only it is an asymmetric fault: to's connections to from keep working.
func (m *Mesh) Relay(from, to string) *Relay { return m.relays[[2]string{from, to}] }

// DialMap returns, for node from, every other node's id with the address of the relay
// from → that node: what from dials instead of the node's own address. The map is the caller's.
func (m *Mesh) DialMap(from string) map[string]string {
	out := map[string]string{}
	for k, r := range m.relays {
		if k[0] == from {
			out[k[1]] = r.Addr()
		}
	}
	return out
}

// Partition cuts node off from every other node, in both directions.
func (m *Mesh) Partition(node string) { m.setBlocked(node, true) }

// Reconnect unblocks every link of node, in both directions (a link to another node that is
// partitioned itself is unblocked too). Delays stay.
func (m *Mesh) Reconnect(node string) { m.setBlocked(node, false) }

// setBlocked blocks or unblocks every relay to or from node.
func (m *Mesh) setBlocked(node string, blocked bool) {
	for k, r := range m.relays {
		if k[0] == node || k[1] == node {
			if blocked {
				r.Block()
			} else {
				r.Unblock()
			}
		}
	}
}

// Heal unblocks every relay and removes every delay.
func (m *Mesh) Heal() {
	for _, r := range m.relays {
		r.SetDelay(0)
		r.Unblock()
	}
}

// SetDelay delays every direction by d (see Relay.SetDelay).
func (m *Mesh) SetDelay(d time.Duration) {
	for _, r := range m.relays {
		r.SetDelay(d)
	}
}

// Summary describes every relay's counters in a stable order, for the test log.
func (m *Mesh) Summary() string {
	keys := slices.SortedFunc(maps.Keys(m.relays), func(a, b [2]string) int {
		return cmp.Or(cmp.Compare(a[0], b[0]), cmp.Compare(a[1], b[1]))
	})
	var b []byte
	for _, k := range keys {
		s := m.relays[k].Stats()
		b = fmt.Appendf(b, "%s→%s: %d conns, %d refused, %d bytes; ", k[0], k[1], s.Accepted, s.Refused, s.Bytes)
	}
	return string(b)
}

// Close closes every relay and waits for their goroutines.
func (m *Mesh) Close() {
	for _, r := range m.relays {
		r.Close()
	}
}
