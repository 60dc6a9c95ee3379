package main

import (
	"bytes"
	"context"
	"encoding/pem"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"runtime/debug"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/BurntSushi/toml"
	"go.uber.org/goleak"

	"github.com/syncd-dev/syncd/proto"
	"github.com/syncd-dev/syncd/raftstore"
	"github.com/syncd-dev/syncd/raftstore/nodecert"
	"github.com/syncd-dev/syncd/syncd"
	"github.com/syncd-dev/syncd/syncd/adminapi"
	"github.com/syncd-dev/syncd/syncd/auth"
	"github.com/syncd-dev/syncd/syncd/buildinfo"
	"github.com/syncd-dev/syncd/test/testkit"
)

// TestMain fails the package if a goroutine outlives the tests.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const exampleFile = "../../docs/syncd.example.toml"

// writeFile writes a config file into a fresh temporary directory and returns its path.
func writeFile(t *testing.T, text string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "syncd.toml")
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// mustLoad is loadConfig without the Logger, which no two calls share.
func mustLoad(t *testing.T, args ...string) syncd.Config {
	t.Helper()
	cfg, err := loadConfig(args)
	if err != nil {
		t.Fatalf("loadConfig(%q): %v", args, err)
	}
	cfg.Logger = nil
	return cfg
}

// loadErr returns the error of loadConfig(args), failing the test if there is none.
func loadErr(t *testing.T, args ...string) string {
	t.Helper()
	_, err := loadConfig(args)
	if err == nil {
		t.Fatalf("loadConfig(%q) succeeded, want an error", args)
	}
	return err.Error()
}

// tomlKeys returns the toml tags of fileConfig, in order.
func tomlKeys() []string {
	var keys []string
	ty := reflect.TypeFor[fileConfig]()
	for i := range ty.NumField() {
		keys = append(keys, ty.Field(i).Tag.Get("toml"))
	}
	return keys
}

var update = flag.Bool("update", false, "rewrite docs/syncd.example.toml from syncd -print-config")

// docs/syncd.example.toml is exactly what syncd -print-config prints with no flags and no file,
// so that it cannot drift from the defaults (syncd.DefaultConfig) or the documentation of the
// keys (the table settings). go test ./cmd/syncd -run ExampleFile -update rewrites it.
func TestExampleFileIsPrintConfig(t *testing.T) {
	var out, errOut bytes.Buffer
	if rc := run(context.Background(), []string{"-print-config"}, &out, &errOut); rc != 0 {
		t.Fatalf("-print-config: exit %d: %s", rc, errOut.String())
	}
	if *update {
		if err := os.WriteFile(exampleFile, out.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	file, err := os.ReadFile(exampleFile)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(file, out.Bytes()) {
		t.Errorf("%s differs from syncd -print-config; rewrite it with go test ./cmd/syncd -run ExampleFile -update "+
			"and review the diff.\nfirst difference at line %d:\n file: %q\nprint: %q",
			exampleFile, firstDiffLine(file, out.Bytes())+1, lineAt(file, firstDiffLine(file, out.Bytes())),
			lineAt(out.Bytes(), firstDiffLine(file, out.Bytes())))
	}

	// And it is a config file that runs the no-flag node, with every key set.
	if got, want := mustLoad(t, "-config", exampleFile), mustLoad(t); !reflect.DeepEqual(got, want) {
		t.Errorf("example file config\n%+v\ndiffers from the no-flag config\n%+v", got, want)
	}
	var c fileConfig
	md, err := toml.DecodeFile(exampleFile, &c)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range tomlKeys() {
		if !md.IsDefined(k) {
			t.Errorf("example file lacks key %q", k)
		}
	}
}

// firstDiffLine returns the index of the first line where a and b differ.
func firstDiffLine(a, b []byte) int {
	la, lb := strings.Split(string(a), "\n"), strings.Split(string(b), "\n")
	for i := range min(len(la), len(lb)) {
		if la[i] != lb[i] {
			return i
		}
	}
	return min(len(la), len(lb))
}

// lineAt returns line i of b, or "" past its end.
func lineAt(b []byte, i int) string {
	if l := strings.Split(string(b), "\n"); i < len(l) {
		return l[i]
	}
	return ""
}

// With no flags and no file the Config is syncd.DefaultConfig spelled out (so that -print-config
// shows real values): cmd/syncd adds no default of its own, and fromConfig and toConfig agree.
func TestNoFlagConfig(t *testing.T) {
	if got, want := mustLoad(t), syncd.DefaultConfig(); !reflect.DeepEqual(got, want) {
		t.Errorf("no-flag config\n%+v\nwant syncd.DefaultConfig()\n%+v", got, want)
	}
	// The inverse holds for settings defaults() does not show: peers, dial overrides, TLS files.
	cfg := syncd.DefaultConfig()
	cfg.Peers = []raftstore.Peer{{ID: "n1", Addr: "a:1"}, {ID: "n2", Addr: "b:2"}}
	cfg.PeerDial = map[string]string{"n2": "relay:2", "n1": "relay:1"}
	cfg.CertFile, cfg.KeyFile, cfg.Shards, cfg.SendRate = "c.pem", "k.pem", 3, 0.5
	cfg.NodeCAFile, cfg.NodeCertFile, cfg.NodeKeyFile = "ca.pem", "node.pem", "node-key.pem"
	o := options{settings: fromConfig(cfg)}
	o.settings.LogLevel, o.settings.LogFormat, o.settings.MemoryLimit = defaultLogLevel, defaultLogFormat, defaultMemoryLimit
	got, err := o.toConfig(io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if got.Logger = nil; !reflect.DeepEqual(got, cfg) {
		t.Errorf("toConfig(fromConfig(cfg)) =\n%+v\nwant\n%+v", got, cfg)
	}
}

// Every file key has a flag of the same name in kebab-case, and every flag but -config and
// -print-config has a key.
func TestEveryKeyHasAFlag(t *testing.T) {
	fs := flag.NewFlagSet("syncd", flag.ContinueOnError)
	var c fileConfig
	bindFlags(fs, &c)
	keys := map[string]bool{}
	for _, k := range tomlKeys() {
		keys[k] = true
		if fs.Lookup(strings.ReplaceAll(k, "_", "-")) == nil {
			t.Errorf("key %q has no flag", k)
		}
	}
	fs.VisitAll(func(f *flag.Flag) {
		if !keys[strings.ReplaceAll(f.Name, "-", "_")] {
			t.Errorf("flag -%s has no key", f.Name)
		}
	})
}

// The table settings has one entry per field of fileConfig, under the field's toml key and
// pointing at that field, with a flag help and a comment.
func TestSettingsTable(t *testing.T) {
	var c fileConfig
	v := reflect.ValueOf(&c).Elem()
	fields := map[string]reflect.Value{}
	for i := range v.NumField() {
		fields[v.Type().Field(i).Tag.Get("toml")] = v.Field(i)
	}
	seen := map[string]bool{}
	for _, s := range settings {
		f, ok := fields[s.key]
		switch {
		case !ok:
			t.Errorf("setting %s is no key of fileConfig", s.key)
		case seen[s.key]:
			t.Errorf("setting %s is listed twice", s.key)
		case reflect.ValueOf(s.field(&c)).Pointer() != f.Addr().Pointer():
			t.Errorf("setting %s points at another field", s.key)
		}
		seen[s.key] = true
		if s.usage == "" || s.doc == "" {
			t.Errorf("setting %s lacks a flag help or a comment", s.key)
		}
	}
	for k := range fields {
		if !seen[k] {
			t.Errorf("key %s has no setting", k)
		}
	}
}

func TestPrecedence(t *testing.T) {
	file := writeFile(t, `
shards = 4
listen = "0.0.0.0:9300"
dedup_window = "48h"
send_rate = 5
`)
	cfg := mustLoad(t, "-config", file, "-shards", "16")
	if cfg.Shards != 16 {
		t.Errorf("Shards %d: a flag must override the file", cfg.Shards)
	}
	if cfg.ListenAddr != "0.0.0.0:9300" || cfg.DedupWindow != 48*time.Hour || cfg.SendRate != 5 {
		t.Errorf("file settings not applied: %+v", cfg)
	}
	if d := syncd.DefaultConfig(); cfg.NodeID != d.NodeID || cfg.MaxConnections != d.MaxConnections {
		t.Errorf("settings in neither file nor flags must keep their defaults: %+v", cfg)
	}
	// A flag set to the default value still overrides the file: set means given, not changed.
	def := syncd.DefaultConfig()
	if cfg := mustLoad(t, "-shards", fmt.Sprint(def.Shards), "-config", file); cfg.Shards != def.Shards {
		t.Errorf("Shards %d: -shards %d given on the command line must override the file's 4", cfg.Shards, def.Shards)
	}
	// Without the file, the flag alone.
	if cfg := mustLoad(t, "-shards", "2"); cfg.Shards != 2 || cfg.ListenAddr != def.ListenAddr {
		t.Errorf("flags alone: %+v", cfg)
	}
}

func TestUnknownKey(t *testing.T) {
	file := writeFile(t, "shards = 4\nshard = 5\n[tls]\ncert = \"x\"\n")
	msg := loadErr(t, "-config", file)
	for _, want := range []string{`unknown key "shard"`, `unknown key "tls"`} {
		if !strings.Contains(msg, want) {
			t.Errorf("error %q does not contain %q", msg, want)
		}
	}
	if strings.Contains(msg, "tls.cert") {
		t.Errorf("error %q reports a key inside an unknown table as well as the table", msg)
	}
}

func TestBadDuration(t *testing.T) {
	file := writeFile(t, "\nretention_max_age = \"30d\"\n")
	msg := loadErr(t, "-config", file)
	for _, want := range []string{"line 2", "retention_max_age", `"30d" is not a duration`} {
		if !strings.Contains(msg, want) {
			t.Errorf("error %q does not contain %q", msg, want)
		}
	}
	msg = loadErr(t, "-request-timeout", "10")
	if !strings.Contains(msg, "-request-timeout") || !strings.Contains(msg, "not a duration") {
		t.Errorf("error %q does not name the flag and the problem", msg)
	}
}

func TestUnreadableFile(t *testing.T) {
	msg := loadErr(t, "-config", filepath.Join(t.TempDir(), "missing.toml"))
	if !strings.Contains(msg, "-config") || !strings.Contains(msg, "missing.toml") {
		t.Errorf("error %q does not name the flag and the file", msg)
	}
	msg = loadErr(t, "-config", writeFile(t, "shards = \n"))
	if !strings.Contains(msg, "syncd.toml") || !strings.Contains(msg, "line 1") {
		t.Errorf("error %q does not name the file and the line", msg)
	}
}

func TestValidation(t *testing.T) {
	file := writeFile(t, "shards = 5000\n")
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"-shards", "0"}, []string{"-shards must be between 1 and 4096"}},
		{[]string{"-config", file}, []string{"syncd.toml: shards must be between 1 and 4096"}},
		{[]string{"-peers", "x"}, []string{`-peers "x" is not id=host:port`}},
		{[]string{"-peers", "n2=h:1"}, []string{fmt.Sprintf(`-peers must include this node (-node-id %q)`, syncd.DefaultConfig().NodeID)}},
		{[]string{"-peers", "n1=h:1,n1=h:2"}, []string{`-peers names "n1" twice`}},
		{[]string{"-listen", "7300"}, []string{`-listen "7300" is not host:port`}},
		{[]string{"-node-id", "a b"}, []string{"-node-id"}},
		{[]string{"-cert", "c.pem"}, []string{"-cert and -key go together"}},
		{[]string{"-node-cert", "n.crt", "-node-key", "n.key"}, []string{"-node-ca, -node-cert and -node-key go together"}},
		{[]string{"-insecure-node-plane", "-node-ca", "a", "-node-cert", "b", "-node-key", "c"}, []string{"-insecure-node-plane turns the node plane's TLS off"}},
		{[]string{"-dedup-window", "30s"}, []string{"-dedup-window 30s must be at least 1m"}},
		{[]string{"-retention-max-age", "0"}, []string{"-retention-max-age and -retention-max-count are both 0"}},
		{[]string{"-heartbeat-interval", "1500us"}, []string{"-heartbeat-interval 1.5ms must be a positive whole number of milliseconds"}},
		{[]string{"-max-frame", "1000"}, []string{"-max-frame must be between 131072"}},
		{[]string{"-max-streams-per-conn", "1"}, []string{"-max-streams-per-conn must be at least 2"}},
		{[]string{"-send-rate", "0"}, []string{"-send-rate must be a positive number"}},
		{[]string{"-min-free-disk", "-1"}, []string{"-min-free-disk -1 must not be negative (0 turns the watermark off)"}},
		{[]string{"-min-free-disk", "lots"}, []string{`"lots" is not a size such as 900MiB`}},
		{[]string{"-log-level", "loud"}, []string{`-log-level "loud" must be debug, info, warn or error`}},
		{[]string{"-log-format", "xml"}, []string{`-log-format "xml" must be text or json`}},
		{[]string{"-memory-limit", "lots"}, []string{`-memory-limit "lots" must be auto, off, or a size`}},
		{[]string{"-memory-limit", "100MiB"}, []string{`-memory-limit "100MiB" is less than 256 MiB`}},
		{[]string{"-token-secret-file", filepath.Join(t.TempDir(), "none")}, []string{"-token-secret-file", "copy token.key"}},
		{[]string{"-token-keys", filepath.Join(t.TempDir(), "none")}, []string{"-token-keys", "copy token.key"}},
		{[]string{"-max-token-lifetime", "500ms"}, []string{"-max-token-lifetime 500ms must be at least 1s"}},
		{[]string{"-hello-timeout", "10ms"}, []string{"-hello-timeout 10ms must be between 100ms and 1m"}},
		{[]string{"-max-handshakes-per-source", "0"}, []string{"-max-handshakes-per-source must be at least 1"}},
		{[]string{"-admin", "0.0.0.0:7380"}, []string{"0.0.0.0:7380 is not loopback", "-admin-token-file", "openssl rand -hex 32"}},
		{[]string{"-admin", ":7380"}, []string{"not loopback", "-admin-token-file"}},
		// Every problem at once.
		{[]string{"-shards", "0", "-log-format", "xml"}, []string{"-shards", "-log-format"}},
		{[]string{"extra"}, []string{`unexpected argument "extra"`}},
		{[]string{"-bogus"}, []string{"-bogus", "syncd -h"}},
	} {
		msg := loadErr(t, tc.args...)
		for _, want := range tc.want {
			if !strings.Contains(msg, want) {
				t.Errorf("%q: error %q does not contain %q", tc.args, msg, want)
			}
		}
	}
}

// TestAdminTokenFile: the admin settings reach syncd.Config; a non-loopback admin address is
// accepted once a token file is named (the file itself is read at start).
func TestAdminTokenFile(t *testing.T) {
	cfg := mustLoad(t, "-admin", "0.0.0.0:7380", "-admin-token-file", "/etc/syncd/admin.token", "-admin-metrics-auth")
	if cfg.AdminAddr != "0.0.0.0:7380" || cfg.AdminTokenFile != "/etc/syncd/admin.token" || !cfg.AdminMetricsAuth {
		t.Errorf("config %+v", cfg)
	}
	file := writeFile(t, "admin = \"10.0.0.1:7380\"\nadmin_token_file = \"/etc/syncd/admin.token\"\nadmin_metrics_auth = true\n")
	if cfg := mustLoad(t, "-config", file); cfg.AdminAddr != "10.0.0.1:7380" || cfg.AdminTokenFile != "/etc/syncd/admin.token" || !cfg.AdminMetricsAuth {
		t.Errorf("config from file %+v", cfg)
	}
	var out, errOut bytes.Buffer
	if rc := run(context.Background(), []string{"-admin", "0.0.0.0:0"}, &out, &errOut); rc != 2 || !strings.Contains(errOut.String(), "-admin-token-file") {
		t.Errorf("-admin 0.0.0.0:0 without a token file: exit %d, stderr %q; want 2 saying what to do", rc, errOut.String())
	}
}

func TestTokenSecretFile(t *testing.T) {
	secret := bytes.Repeat([]byte{0xab}, 32)
	path := filepath.Join(t.TempDir(), "token.key")
	if err := os.WriteFile(path, []byte(strings.Repeat("ab", 32)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if cfg := mustLoad(t, "-token-secret-file", path); !bytes.Equal(cfg.TokenSecret, secret) {
		t.Errorf("TokenSecret %x, want %x", cfg.TokenSecret, secret)
	}
	if err := os.WriteFile(path, []byte("not hex"), 0o600); err != nil {
		t.Fatal(err)
	}
	if msg := loadErr(t, "-token-secret-file", path); !strings.Contains(msg, "is not a token secret") {
		t.Errorf("error %q", msg)
	}
	// token_keys: more accepted keys, in the same format, in the order given.
	dir := t.TempDir()
	var files []string
	for i, b := range []byte{0x01, 0x02} {
		f := filepath.Join(dir, fmt.Sprintf("k%d.key", i))
		if err := os.WriteFile(f, []byte(strings.Repeat(fmt.Sprintf("%02x", b), 32)), 0o600); err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}
	cfg := mustLoad(t, "-token-keys", strings.Join(files, ","), "-max-token-lifetime", "48h")
	if len(cfg.TokenKeys) != 2 || !bytes.Equal(cfg.TokenKeys[1], bytes.Repeat([]byte{2}, 32)) || cfg.MaxTokenLifetime != 48*time.Hour {
		t.Errorf("TokenKeys %x, MaxTokenLifetime %v", cfg.TokenKeys, cfg.MaxTokenLifetime)
	}
}

func TestPeerDial(t *testing.T) {
	peers := "n1=10.0.0.1:7400, n2=10.0.0.2:7400,n3=10.0.0.3:7400"
	cfg := mustLoad(t, "-peers", peers, "-peer-dial", "n2=127.0.0.1:17402,n3=relay.test:9")
	wantPeers := []raftstore.Peer{{ID: "n1", Addr: "10.0.0.1:7400"}, {ID: "n2", Addr: "10.0.0.2:7400"}, {ID: "n3", Addr: "10.0.0.3:7400"}}
	if !reflect.DeepEqual(cfg.Peers, wantPeers) {
		t.Errorf("Peers %v, want %v", cfg.Peers, wantPeers)
	}
	wantDial := map[string]string{"n2": "127.0.0.1:17402", "n3": "relay.test:9"}
	if !reflect.DeepEqual(cfg.PeerDial, wantDial) {
		t.Errorf("PeerDial %v, want %v", cfg.PeerDial, wantDial)
	}
	if cfg := mustLoad(t, "-peers", peers); cfg.PeerDial != nil {
		t.Errorf("PeerDial %v without -peer-dial, want nil", cfg.PeerDial)
	}
	// The file spells it as a list of the same strings; a flag replaces the file's list.
	file := writeFile(t, `peers = ["n1=10.0.0.1:7400", "n2=10.0.0.2:7400"]`+"\n"+`peer_dial = ["n2=nat:1"]`+"\n")
	if cfg := mustLoad(t, "-config", file); !reflect.DeepEqual(cfg.PeerDial, map[string]string{"n2": "nat:1"}) {
		t.Errorf("PeerDial from the file: %v", cfg.PeerDial)
	}
	if cfg := mustLoad(t, "-config", file, "-peer-dial", ""); cfg.PeerDial != nil {
		t.Errorf("-peer-dial \"\" must clear the file's overrides, got %v", cfg.PeerDial)
	}

	for _, tc := range []struct {
		dial, want string
	}{
		{"n2", `-peer-dial "n2" is not id=host:port`},
		{"n2=nohost", `-peer-dial "n2=nohost" is not id=host:port`},
		{"n2=h:1,n2=h:2", `-peer-dial names "n2" twice`},
	} {
		if msg := loadErr(t, "-peers", peers, "-peer-dial", tc.dial); !strings.Contains(msg, tc.want) {
			t.Errorf("-peer-dial %s: error %q does not contain %q", tc.dial, msg, tc.want)
		}
	}
	// A node that joins later may be named: its address is known only from the dial override
	// until it registers.
	if cfg := mustLoad(t, "-peers", peers, "-peer-dial", "n9=h:1"); cfg.PeerDial["n9"] != "h:1" {
		t.Errorf("-peer-dial for a node not in -peers: %v", cfg.PeerDial)
	}
}

// -print-config prints TOML that, loaded as a config file, gives the same configuration.
func TestPrintConfigRoundTrip(t *testing.T) {
	secret := filepath.Join(t.TempDir(), "token.key")
	if err := os.WriteFile(secret, []byte(strings.Repeat("0f", 32)), 0o600); err != nil {
		t.Fatal(err)
	}
	file := writeFile(t, "shards = 3\nretention_max_count = 1000\nretention_max_age = \"0s\"\nlog_format = \"json\"\n")
	for _, args := range [][]string{
		nil,
		{"-config", exampleFile},
		{"-config", file, "-node-id", "n2", "-peers", "n1=a:1,n2=b:2,n3=c:3", "-peer-dial", "n3=relay:3,n1=relay:1",
			"-cert", "tls.crt", "-key", "tls.key", "-token-secret-file", secret, "-heartbeat-interval", "2500ms",
			"-send-rate", "0.5", "-recall-window", "90s", "-max-frame", "4194304", "-log-level", "debug"},
		{"-min-free-disk", "0"},
		{"-min-free-disk", "1073741824"},
	} {
		var out, errOut bytes.Buffer
		if rc := run(context.Background(), append(args, "-print-config"), &out, &errOut); rc != 0 {
			t.Fatalf("%q -print-config: exit %d: %s", args, rc, errOut.String())
		}
		printed := writeFile(t, out.String())
		if got, want := mustLoad(t, "-config", printed), mustLoad(t, args...); !reflect.DeepEqual(got, want) {
			t.Errorf("%q: the printed config\n%s\nloads as\n%+v\nwant\n%+v", args, out.String(), got, want)
		}
		// Printing the printed file prints it again, byte for byte.
		var again bytes.Buffer
		if rc := run(context.Background(), []string{"-config", printed, "-print-config"}, &again, &errOut); rc != 0 || again.String() != out.String() {
			t.Errorf("%q: printing the printed config (exit %d) gave\n%s\nwant\n%s", args, rc, again.String(), out.String())
		}
	}
}

func TestExitCodes(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want int
	}{
		{[]string{"-h"}, 0},
		{[]string{"-print-config"}, 0},
		{[]string{"-bogus"}, 2},
		{[]string{"-shards", "0"}, 2},
		{[]string{"-config", "/nonexistent/syncd.toml"}, 2},
		{[]string{"-shards", "0", "-print-config"}, 2},
	} {
		var out, errOut bytes.Buffer
		if rc := run(context.Background(), tc.args, &out, &errOut); rc != tc.want {
			t.Errorf("%q: exit %d, want %d (stderr %q)", tc.args, rc, tc.want, errOut.String())
		}
		if tc.want == 2 && !strings.HasPrefix(errOut.String(), "syncd: ") {
			t.Errorf("%q: stderr %q does not start with \"syncd: \"", tc.args, errOut.String())
		}
	}
	var errOut bytes.Buffer
	run(context.Background(), []string{"-h"}, &bytes.Buffer{}, &errOut)
	if !strings.Contains(errOut.String(), "-config file") || !strings.Contains(errOut.String(), "-peer-dial") {
		t.Errorf("-h output lacks the flags:\n%s", errOut.String())
	}
}

// A node of a cluster (-peers naming others, or -join) without node certificates does not start:
// every node of a cluster must hold a certificate of the same CA, which syncd cannot make up on
// its own. The error says how to make them; once they are in the data directory it starts (and
// is refused only later, for want of its peers). -insecure-node-plane is the explicit way out.
func TestClusterNodeNeedsNodeCerts(t *testing.T) {
	for _, cluster := range [][]string{
		{"-peers", "n1=127.0.0.1:1,n2=127.0.0.1:2"},
		{"-join", "127.0.0.1:1"},
	} {
		dir := filepath.Join(t.TempDir(), "data")
		args := append([]string{"-data-dir", dir, "-listen", "127.0.0.1:0", "-admin", "127.0.0.1:0", "-raft-addr", "127.0.0.1:0"}, cluster...)
		var stderr bytes.Buffer
		if rc := run(context.Background(), args, io.Discard, &stderr); rc != 1 {
			t.Fatalf("%q: exit %d, want 1:\n%s", cluster, rc, stderr.String())
		}
		for _, want := range []string{"no node certificates", "syncctl cert create-ca", "syncctl cert create-node -dir " + dir} {
			if !strings.Contains(stderr.String(), want) {
				t.Errorf("%q: error lacks %q:\n%s", cluster, want, stderr.String())
			}
		}
		if _, err := os.Stat(filepath.Join(dir, nodecert.CAFile)); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%q: a cluster node made a CA of its own (%v)", cluster, err)
		}
	}
}

// runOnFreePorts runs syncd (run, as main does) on dir with ports the system picks and the extra
// flags, until cancel; done gets its exit code, stderr its log.
func runOnFreePorts(t *testing.T, dir string, extra ...string) (cancel context.CancelFunc, done <-chan int, stderr *testkit.Buffer) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	stderr = new(testkit.Buffer)
	exit := make(chan int, 1)
	args := append([]string{"-data-dir", dir, "-listen", "127.0.0.1:0", "-admin", "127.0.0.1:0", "-raft-addr", "127.0.0.1:0"}, extra...)
	go func() { exit <- run(ctx, args, io.Discard, stderr) }()
	return cancel, exit, stderr
}

// -insecure-node-plane starts a node without TLS on the Raft port, and says so loudly: a warning
// at start, and the raft line names it.
func TestInsecureNodePlaneIsLoud(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	cancel, done, stderr := runOnFreePorts(t, dir, "-insecure-node-plane")
	defer cancel()
	testkit.WaitTrue(t, 20*time.Second, "the start to be logged", func() bool { return strings.Contains(stderr.String(), "syncd serving") })
	cancel()
	if rc := <-done; rc != 0 {
		t.Fatalf("exit %d:\n%s", rc, stderr.String())
	}
	out := stderr.String()
	if !regexp.MustCompile(`level=WARN msg="node plane: TLS is OFF`).MatchString(out) || !strings.Contains(out, `security="plain TCP, INSECURE"`) {
		t.Errorf("an insecure node plane was not announced loudly:\n%s", out)
	}
	if _, err := os.Stat(filepath.Join(dir, nodecert.CertFile)); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("an insecure node made node certificates (%v)", err)
	}
}

func TestDurationFormat(t *testing.T) {
	for d, want := range map[time.Duration]string{
		10 * time.Minute: "10m", 720 * time.Hour: "720h", 90 * time.Second: "1m30s", 0: "0s",
		time.Hour + time.Second: "1h0m1s", 2500 * time.Millisecond: "2.5s", 3 * time.Hour: "3h",
	} {
		if got := duration(d).String(); got != want {
			t.Errorf("duration(%v) = %q, want %q", d, got, want)
		}
		var back duration
		if err := back.UnmarshalText([]byte(duration(d).String())); err != nil || time.Duration(back) != d {
			t.Errorf("%q parses back as %v, %v", duration(d).String(), time.Duration(back), err)
		}
	}
}

// A first start at the default log level prints a handful of lines, with what a newcomer needs:
// the addresses, the fingerprint to pin, where the data and the token secret are, how to stop.
// Raft's per-shard narrative of the first elections is not among them.
func TestFirstStartIsQuiet(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	cancel, done, stderr := runOnFreePorts(t, dir)
	defer cancel()

	// attr returns the value of key on the first line logged with msg, polling until it is there.
	attr := func(msg, key string) string {
		t.Helper()
		re := regexp.MustCompile(`msg="?` + regexp.QuoteMeta(msg) + `.*? ` + key + `=(\S+)`)
		for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
			if m := re.FindStringSubmatch(stderr.String()); m != nil {
				return m[1]
			}
			select {
			case rc := <-done:
				t.Fatalf("syncd exited %d:\n%s", rc, stderr.String())
			default:
			}
		}
		t.Fatalf("no %s= on a %q line:\n%s", key, msg, stderr.String())
		return ""
	}
	admin, raft := attr("admin:", "addr"), attr("raft:", "addr")
	clients, fp := attr("clients:", "addr"), attr("clients:", "cert_sha256")
	secret := attr("data directory", "token_secret")
	adminToken := attr("data directory", "admin_token")
	nodeCert, security := attr("data directory", "node_cert"), attr("raft:", "security")
	// The default memory limit was derived and applied to this (the test's) runtime.
	if lim, from := attr("syncd serving", "memory_limit_mib"), attr("syncd serving", "memory_limit_from"); os.Getenv("GOMEMLIMIT") == "" &&
		(lim != strconv.FormatInt(debug.SetMemoryLimit(-1)>>20, 10) || !strings.Contains(from, "auto")) {
		t.Errorf("memory_limit_mib=%s memory_limit_from=%s, the runtime's limit is %d MiB", lim, from, debug.SetMemoryLimit(-1)>>20)
	}

	// Wait until every shard has elected its leader, so that the first elections had their
	// chance to be logged.
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		resp, err := http.Get("http://" + admin + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("not ready after 20s (last: %v):\n%s", err, stderr.String())
		}
	}
	cancel()
	if rc := <-done; rc != 0 {
		t.Fatalf("exit %d after cancel:\n%s", rc, stderr.String())
	}
	out := stderr.String()
	t.Logf("first start:\n%s", out)

	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) > 10 {
		t.Errorf("first start logged %d lines at the default level, want at most 10:\n%s", len(lines), out)
	}
	for _, l := range lines {
		if !strings.Contains(l, "level=INFO") {
			t.Errorf("a clean first start logged %q", l)
		}
	}
	for _, want := range []string{"Ctrl-C", "SIGTERM", "dir=" + dir, "created=", "msg=stopped"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	// The logged facts are the real ones.
	der, err := os.ReadFile(filepath.Join(dir, auth.TLSCertFile))
	if err != nil {
		t.Fatal(err)
	}
	if block, _ := pem.Decode(der); block == nil || fp != proto.Fingerprint(block.Bytes) {
		t.Errorf("cert_sha256=%s is not the fingerprint of %s", fp, auth.TLSCertFile)
	}
	if secret != filepath.Join(dir, auth.TokenKeyFile) {
		t.Errorf("token_secret=%s, want %s", secret, filepath.Join(dir, auth.TokenKeyFile))
	} else if _, err := os.Stat(secret); err != nil {
		t.Errorf("token_secret: %v", err)
	}
	if adminToken != filepath.Join(dir, adminapi.TokenFile) {
		t.Errorf("admin_token=%s, want %s", adminToken, filepath.Join(dir, adminapi.TokenFile))
	} else if fi, err := os.Stat(adminToken); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("admin_token: %v %v, want a file of mode 0600", fi, err)
	}
	// The node plane got its CA and certificate, keys private, like the token secret.
	if nodeCert != filepath.Join(dir, nodecert.CertFile) || !strings.Contains(security, "mutual") {
		t.Errorf("node_cert=%s security=%s, want %s under mutual TLS", nodeCert, security, filepath.Join(dir, nodecert.CertFile))
	}
	if _, err := nodecert.Load(filepath.Join(dir, nodecert.CAFile), nodeCert, filepath.Join(dir, nodecert.KeyFile)); err != nil {
		t.Errorf("node certificates: %v", err)
	}
	for _, key := range []string{nodecert.KeyFile, nodecert.CAKeyFile, auth.TokenKeyFile} {
		if fi, err := os.Stat(filepath.Join(dir, key)); err != nil || fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: %v, mode %v, want 0600", key, err, fi.Mode().Perm())
		}
	}
	for name, addr := range map[string]string{"clients": clients, "admin": admin, "raft": raft} {
		if host, port, err := net.SplitHostPort(addr); err != nil || host != "127.0.0.1" || port == "0" {
			t.Errorf("%s addr=%s is not the bound loopback address", name, addr)
		}
	}
}

// TestMinFreeDiskOff: min_free_disk = 0 turns the watermark off (a negative syncd.Config
// value: its zero would mean the default), and a value is passed through in bytes, whether it is
// given in bytes or with a unit, as a flag or in the file (a TOML integer or string).
func TestMinFreeDiskOff(t *testing.T) {
	for _, v := range []string{"1GiB", "1024MiB", "1073741824", "0.5GiB"} {
		want := int64(1 << 30)
		if v == "0.5GiB" {
			want = 512 << 20
		}
		if got := mustLoad(t, "-min-free-disk", v).MinFreeDisk; got != want {
			t.Errorf("-min-free-disk %s gives MinFreeDisk %d, want %d", v, got, want)
		}
	}
	for _, line := range []string{`min_free_disk = "1GiB"`, `min_free_disk = 1073741824`} {
		file := filepath.Join(t.TempDir(), "syncd.toml")
		if err := os.WriteFile(file, []byte(line+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		if got := mustLoad(t, "-config", file).MinFreeDisk; got != 1<<30 {
			t.Errorf("%s in the file gives MinFreeDisk %d", line, got)
		}
	}
	if s := byteSize(256 << 20).String(); s != "256MiB" {
		t.Errorf("256 MiB prints as %q", s)
	}
	if s := byteSize(1000).String(); s != "1000" {
		t.Errorf("1000 bytes print as %q", s)
	}
	if got := mustLoad(t, "-min-free-disk", "0").MinFreeDisk; got >= 0 {
		t.Errorf("-min-free-disk 0 gives MinFreeDisk %d, want negative (off)", got)
	}
	if got := mustLoad(t, "-min-free-disk", "1073741824").MinFreeDisk; got != 1<<30 {
		t.Errorf("-min-free-disk 1073741824 gives MinFreeDisk %d", got)
	}
	if got := mustLoad(t).MinFreeDisk; got != syncd.DefaultConfig().MinFreeDisk {
		t.Errorf("default MinFreeDisk %d, want %d", got, syncd.DefaultConfig().MinFreeDisk)
	}
}

// TestVersion: -version prints the build on one line and exits 0, whatever else the command
// line says, and reads no configuration.
func TestVersion(t *testing.T) {
	var out, errOut bytes.Buffer
	if rc := run(context.Background(), []string{"-version", "-config", "/nonexistent.toml"}, &out, &errOut); rc != 0 {
		t.Fatalf("syncd -version: exit %d, %s", rc, errOut.String())
	}
	if got := out.String(); !strings.HasPrefix(got, "syncd "+buildinfo.Get().Version+" (") || strings.Count(got, "\n") != 1 {
		t.Errorf("syncd -version printed %q", got)
	}
}

// TestEnvironment: SYNCD_<KEY> sets a setting over the file, a flag on the command line over
// both; SYNCD_CONFIG names the file when -config is not given; a value that does not parse is an
// error naming the variable; a bad value's error names where it came from; other SYNCD_
// variables (syncctl's) are not syncd's business.
func TestEnvironment(t *testing.T) {
	file := writeFile(t, "shards = 3\nrecall_window = \"90s\"\nmax_group_size = 500\n")
	t.Setenv("SYNCD_CONFIG", file)
	t.Setenv("SYNCD_RECALL_WINDOW", "5m")
	t.Setenv("SYNCD_MAX_GROUP_SIZE", "700")
	t.Setenv("SYNCD_PEERS", "n1=a:1, n2=b:2")
	t.Setenv("SYNCD_TOKEN", "syncctl's, not a setting")
	cfg := mustLoad(t, "-max-group-size", "900")
	if cfg.Shards != 3 || cfg.RecallWindow != 5*time.Minute || cfg.MaxGroupSize != 900 || len(cfg.Peers) != 2 || cfg.Peers[1].Addr != "b:2" {
		t.Errorf("file < environment < flags: shards %d (file: 3), recall window %v (environment: 5m), max group size %d (flag: 900), peers %+v",
			cfg.Shards, cfg.RecallWindow, cfg.MaxGroupSize, cfg.Peers)
	}
	// -config beats SYNCD_CONFIG.
	if cfg := mustLoad(t, "-config", writeFile(t, "shards = 5\n")); cfg.Shards != 5 {
		t.Errorf("-config over SYNCD_CONFIG: shards %d, want 5", cfg.Shards)
	}
	t.Setenv("SYNCD_RECALL_WINDOW", "soon")
	if _, err := loadConfig(nil); err == nil || !strings.Contains(err.Error(), `SYNCD_RECALL_WINDOW="soon"`) {
		t.Errorf("an unparsable value: %v, want an error naming SYNCD_RECALL_WINDOW", err)
	}
	t.Setenv("SYNCD_RECALL_WINDOW", "5m")
	t.Setenv("SYNCD_MAX_FRAME", "10")
	if _, err := loadConfig(nil); err == nil || !strings.Contains(err.Error(), "SYNCD_MAX_FRAME") {
		t.Errorf("a value out of range: %v, want an error naming SYNCD_MAX_FRAME", err)
	}
}
