package raftstore

import (
	"log/slog"
	"reflect"
	"strings"
	"testing"
	"time"
)

// noDefault lists the Config fields that DefaultConfig leaves zero on purpose; every other field
// must have a default there, so a new knob cannot get its default written somewhere else.
var noDefault = map[string]bool{
	"NodeID": true, "Dir": true, "AdvertiseAddr": true, "Shards": true, "Peers": true,
	"PeerAddr": true, "App": true, "Logger": true,
	"TLS": true, "Insecure": true, // no default: one of them must be chosen (Validate)
}

func TestConfigDefaultsComeFromDefaultConfig(t *testing.T) {
	d := DefaultConfig()
	v := reflect.ValueOf(d)
	for i := range v.NumField() {
		name := v.Type().Field(i).Name
		if zero := v.Field(i).IsZero(); zero != noDefault[name] {
			t.Errorf("DefaultConfig().%s: zero is %v; give it a default there or list it in noDefault", name, zero)
		}
	}
	for _, f := range reflect.VisibleFields(reflect.TypeFor[Timing]()) {
		if reflect.ValueOf(d.Timing).FieldByIndex(f.Index).IsZero() {
			t.Errorf("DefaultConfig().Timing.%s has no default", f.Name)
		}
	}

	// A zero Config takes exactly DefaultConfig's values (and the documented Shards and Logger).
	got := Config{}.withDefaults()
	want := d
	want.Shards, want.Logger = []ShardID{1}, slog.Default()
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Config{}.withDefaults() =\n%+v\nwant DefaultConfig()\n%+v", got, want)
	}
	// An empty Shards list stays empty: a control plane places the node's shards.
	if got := (Config{Shards: []ShardID{}}).withDefaults(); got.Shards == nil || len(got.Shards) != 0 {
		t.Errorf("empty Shards = %v, want empty", got.Shards)
	}
	// Set fields are kept.
	set := Config{SnapshotThreshold: 7, Timing: Timing{CommitTimeout: time.Millisecond}, CacheSize: 1 << 20}.withDefaults()
	if set.SnapshotThreshold != 7 || set.Timing.CommitTimeout != time.Millisecond || set.CacheSize != 1<<20 ||
		set.Timing.HeartbeatTimeout != d.Timing.HeartbeatTimeout {
		t.Errorf("withDefaults replaced set fields or missed zero ones: %+v", set)
	}
}

func TestConfigValidateReportsAll(t *testing.T) {
	err := Config{NodeID: "n1", Dir: t.TempDir(), SnapshotInterval: -time.Second, CacheSize: -1}.Validate()
	for _, want := range []string{"SnapshotInterval -1s must not be negative", "CacheSize -1", "TLS is required"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate() = %v, want it to contain %q", err, want)
		}
	}
	if err := (Config{NodeID: "n1", Dir: t.TempDir(), Insecure: true}).Validate(); err != nil {
		t.Errorf("defaults do not validate: %v", err)
	}
	short := Config{NodeID: "n1", Dir: t.TempDir(), Insecure: true, Timing: Timing{StaleAfter: 900 * time.Millisecond}}
	if err := short.Validate(); err == nil || !strings.Contains(err.Error(), "StaleAfter 900ms must be at least 2 × ElectionTimeout") {
		t.Errorf("a lease shorter than two elections: Validate() = %v", err)
	}
}

// The replica lease follows the election timeout when left zero: slower timings get a longer
// lease, and DefaultTiming's is the same rule applied to its own election timeout.
func TestStaleAfterFollowsTheElectionTimeout(t *testing.T) {
	slow := Config{Timing: Timing{HeartbeatTimeout: time.Second, ElectionTimeout: 2 * time.Second}}.withDefaults()
	if slow.Timing.StaleAfter != 8*time.Second {
		t.Errorf("StaleAfter with a 2s election timeout = %v, want 8s", slow.Timing.StaleAfter)
	}
	if d := DefaultTiming(); d.StaleAfter != 4*d.ElectionTimeout {
		t.Errorf("DefaultTiming: StaleAfter %v, want 4 × ElectionTimeout %v", d.StaleAfter, d.ElectionTimeout)
	}
}
