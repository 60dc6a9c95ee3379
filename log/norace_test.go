//go:build !race

package log

// raceEnabled is set when the tests run under the race detector (race_test.go).
const raceEnabled = false
