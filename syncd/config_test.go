package syncd

import (
	"strings"
	"testing"

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
