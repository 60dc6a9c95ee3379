//go:build !race

package syncd

// raceEnabled: see race_test.go.
const raceEnabled = false
