package syncd

import (
	"log/slog"
	"reflect"
	"strings"
	"testing"

	"github.com/syncd-dev/syncd/log"
	"github.com/syncd-dev/syncd/proto"
	"github.com/syncd-dev/syncd/raftstore"
)

func TestConfigPeerDial(t *testing.T) {
	peers := []raftstore.Peer{{ID: "n1", Addr: "a:1"}, {ID: "n2", Addr: "b:2"}, {ID: "n3", Addr: "c:3"}}
	if f := (Config{Peers: peers}).peerAddr(); f != nil {
		t.Error("peerAddr without PeerDial must be nil: raft dials the Peers addresses")
	}
	cfg := Config{Peers: peers, PeerDial: map[string]string{"n2": "relay:2"}}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	f := cfg.peerAddr()
	// Peers without an override get "": raftstore dials the address it knows for them.
	for id, want := range map[string]string{"n1": "", "n2": "relay:2", "n3": "", "n9": ""} {
		if got := f(id); got != want {
			t.Errorf("peerAddr(%q) = %q, want %q", id, got, want)
		}
	}

	cfg.PeerDial = map[string]string{"n9": "x:9", "n1": ""} // n9 may join later; "" is no address
	err := cfg.Validate()
	for _, want := range []string{`PeerDial gives "n1" an empty address`} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate() = %v, want it to contain %q", err, want)
		}
	}
}

// configNoDefault lists the Config fields DefaultConfig leaves zero on purpose; every other
// field must have its default there, so a new setting cannot get its default written elsewhere.
var configNoDefault = map[string]bool{
	"Peers": true, "Join": true, "PeerDial": true, "TokenSecret": true, "CertFile": true,
	"KeyFile": true, "Logger": true,
	"NodeCAFile": true, "NodeCertFile": true, "NodeKeyFile": true, "InsecureNodePlane": true,
}

func TestConfigDefaultsComeFromDefaultConfig(t *testing.T) {
	d := DefaultConfig()
	v := reflect.ValueOf(d)
	for i := range v.NumField() {
		name := v.Type().Field(i).Name
		if zero := v.Field(i).IsZero(); zero != configNoDefault[name] {
			t.Errorf("DefaultConfig().%s: zero is %v; give it a default there or list it in configNoDefault", name, zero)
		}
	}
	if err := d.Validate(); err != nil {
		t.Errorf("DefaultConfig() does not validate: %v", err)
	}

	// A zero Config runs exactly DefaultConfig, plus what is derived at start.
	want := d
	want.Limits.SendRatePerS, want.Logger = uint32(d.SendRate), slog.Default()
	if got := (Config{}).withDefaults(); !reflect.DeepEqual(got, want) {
		t.Errorf("Config{}.withDefaults() =\n%+v\nwant DefaultConfig()\n%+v", got, want)
	}
	// So does DefaultConfig itself: filling defaults twice changes nothing.
	if got := d.withDefaults(); !reflect.DeepEqual(got, want) {
		t.Errorf("DefaultConfig().withDefaults() =\n%+v\nwant\n%+v", got, want)
	}

	// Set fields are kept; a Retention with one bound set keeps the other off.
	set := Config{Shards: 3, SendRate: 0.5, Retention: log.Retention{MaxCount: 10}, Limits: proto.Limits{MaxBatch: 9}}.withDefaults()
	if set.Shards != 3 || set.SendRate != 0.5 || set.Retention != (log.Retention{MaxCount: 10}) ||
		set.Limits.MaxBatch != 9 || set.Limits.MaxFrame != d.Limits.MaxFrame || set.MaxConnections != d.MaxConnections {
		t.Errorf("withDefaults replaced set fields or missed zero ones: %+v", set)
	}
}
