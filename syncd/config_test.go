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
	"ConvRetention": true, // conversation logs are kept whole unless the operator bounds them
	"Peers":         true, "Join": true, "PeerDial": true, "TokenSecret": true, "TokenKeys": true, "CertFile": true,
	"KeyFile": true, "Logger": true, "AdminTokenFile": true, "AdminMetricsAuth": true,
	"NodeCAFile": true, "NodeCertFile": true, "NodeKeyFile": true, "InsecureNodePlane": true,
	// Derived from ListenAddr (withDefaults), or off switches.
	"WebAddr": true, "DisableWebTransport": true, "DisableWebSocket": true, "DisableDeliveryReports": true,
	"DisableDeadLetterProcess": true,
	"TraceEndpoint":            true, // tracing is off unless an operator names a collector
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
	want.Limits.SendRatePerS, want.Limits.SendBurst, want.Logger = uint32(d.SendRate), uint32(d.SendBurst), slog.Default()
	want.Limits.QueryRatePerS, want.Limits.QueryBurst = uint32(d.QueryRate), uint32(d.QueryBurst)
	want.Limits.MaxStreams, want.Limits.RequestIdleMs = uint32(d.MaxStreamsPerConn), uint32(d.RequestIdle.Milliseconds())
	want.WebAddr = "127.0.0.1:7301" // the port after ListenAddr's
	if got := (Config{}).withDefaults(); !reflect.DeepEqual(got, want) {
		t.Errorf("Config{}.withDefaults() =\n%+v\nwant DefaultConfig()\n%+v", got, want)
	}
	// So does DefaultConfig itself: filling defaults twice changes nothing.
	if got := d.withDefaults(); !reflect.DeepEqual(got, want) {
		t.Errorf("DefaultConfig().withDefaults() =\n%+v\nwant\n%+v", got, want)
	}

	// The browsers' address follows the client address unless set.
	for listen, web := range map[string]string{"0.0.0.0:9000": "0.0.0.0:9001", "[::1]:7300": "[::1]:7301", "127.0.0.1:0": "127.0.0.1:0"} {
		if got := (Config{ListenAddr: listen}).withDefaults().WebAddr; got != web {
			t.Errorf("ListenAddr %s: WebAddr %s, want %s", listen, got, web)
		}
	}
	if got := (Config{ListenAddr: "0.0.0.0:9000", WebAddr: WebOff}).withDefaults().WebAddr; got != WebOff {
		t.Errorf("WebAddr off became %s", got)
	}

	// Set fields are kept; a Retention with one bound set keeps the other off.
	set := Config{Shards: 3, SendRate: 0.5, Retention: log.Retention{MaxCount: 10}, Limits: proto.Limits{MaxBatch: 9}}.withDefaults()
	if set.Shards != 3 || set.SendRate != 0.5 || set.Retention != (log.Retention{MaxCount: 10}) ||
		set.Limits.MaxBatch != 9 || set.Limits.MaxFrame != d.Limits.MaxFrame || set.MaxConnections != d.MaxConnections {
		t.Errorf("withDefaults replaced set fields or missed zero ones: %+v", set)
	}
}

// TestConfigMaxFrameHoldsTheLargestEntry: a max_frame that could not carry the largest entry in
// a page (or is below the protocol's minimum) is refused with what to set instead; the minimum
// itself is accepted, because the largest entry fits it.
func TestConfigMaxFrameHoldsTheLargestEntry(t *testing.T) {
	err := Config{Limits: proto.Limits{MaxFrame: proto.MinFrameLimit - 1}}.Validate()
	if err == nil || !strings.Contains(err.Error(), "Limits.MaxFrame 131071 is too small") ||
		!strings.Contains(err.Error(), "set it to at least 131072") {
		t.Fatalf("Validate() = %v, want MaxFrame refused with the minimum to set", err)
	}
	if err := (Config{Limits: proto.Limits{MaxFrame: proto.MinFrameLimit}}).Validate(); err != nil {
		t.Fatalf("MaxFrame at the protocol's minimum: %v", err)
	}
}

// TestConfigAdminAddrNeedsTokenFile: an admin address other machines may reach is refused with the
// generated token (which is for loopback), saying what to do, and accepted with a token file of
// the operator's; loopback addresses need none.
func TestConfigAdminAddrNeedsTokenFile(t *testing.T) {
	for _, addr := range []string{"0.0.0.0:7380", ":7380", "[::]:7380", "192.168.1.20:7380", "10.0.0.1:0", "admin.example:7380"} {
		err := Config{AdminAddr: addr}.Validate()
		if err == nil {
			t.Errorf("AdminAddr %s without AdminTokenFile: accepted", addr)
			continue
		}
		for _, want := range []string{addr, "not loopback", "AdminTokenFile", "-admin-token-file", "openssl rand -hex 32", "127.0.0.1"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("AdminAddr %s: error %q does not say %q", addr, err, want)
			}
		}
		if err := (Config{AdminAddr: addr, AdminTokenFile: "/etc/syncd/admin.token"}).Validate(); err != nil {
			t.Errorf("AdminAddr %s with AdminTokenFile: %v", addr, err)
		}
	}
	for _, addr := range []string{"127.0.0.1:7380", "127.0.0.3:0", "[::1]:7380", "localhost:7380", "[::ffff:127.0.0.1]:1"} {
		if err := (Config{AdminAddr: addr}).Validate(); err != nil {
			t.Errorf("loopback AdminAddr %s: %v", addr, err)
		}
	}
}
