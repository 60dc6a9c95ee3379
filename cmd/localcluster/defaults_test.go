package main

import (
	"testing"

	"github.com/syncd-dev/syncd/syncd"
)

// TestDefaultsFollowSyncd: a local cluster is built with the shard count a new syncd cluster gets
// by default, so that what a newcomer tries locally is what the defaults give.
func TestDefaultsFollowSyncd(t *testing.T) {
	if want := syncd.DefaultConfig().Shards; defaultShards != want {
		t.Fatalf("localcluster's default is %d shards, syncd's %d", defaultShards, want)
	}
}
