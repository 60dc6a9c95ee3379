//go:build race

package proto

// raceEnabled: the race detector makes sync.Pool drop items, so allocation counts vary.
const raceEnabled = true
