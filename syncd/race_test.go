//go:build race

package syncd

// raceEnabled is set when the tests run under the race detector, which makes them 10–20 times
// slower: the largest fixtures shrink then.
const raceEnabled = true
