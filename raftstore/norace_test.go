//go:build !race

package raftstore_test

const raceEnabled = false
