package test

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/syncd-dev/syncd/"

// rule says what a package may depend on, directly or not. repo lists the packages of this
// module it may import ("*": any); outside lists the only outside modules it may import (nil:
// any but those in deny); deny lists outside modules it must never import. The standard library
// is always allowed.
type rule struct {
	repo    []string
	outside []string
	deny    []string
}

// Outside modules named by the rules.
const (
	msgpack   = "github.com/vmihailenco/"
	raft      = "github.com/hashicorp/raft"
	hashicorp = "github.com/hashicorp/"
	quic      = "github.com/quic-go/"
	webtrans  = "github.com/quic-go/webtransport-go"
	websocket = "github.com/coder/websocket"
	otel      = "go.opentelemetry.io/"
)

// serverOnly are the outside modules only the server side may import. (Prometheus cannot be
// among them: Pebble, the SDK's store, depends on its client library.)
var serverOnly = []string{hashicorp, webtrans, websocket, otel}

// rules is the package map of the design (DESIGN §6, STYLE "Layout") as a test: every package of
// the module must have one, so a new package fails CI until someone decides where it sits. The
// arrows run downward only: log and proto stand alone, client sees only proto, and nothing
// imports the server, commands, benchmarks or tests, except test/testkit (the network fakes and
// wait helper every tier's tests share, so it imports nothing here) and test/proccluster (the
// process harness, which talks to nodes over their admin API).
var rules = map[string]rule{
	"proto/ident": {outside: []string{}},
	"proto":       {repo: []string{"proto/ident"}, outside: []string{msgpack}},
	"log":         {repo: []string{"proto/ident"}, deny: []string{msgpack, hashicorp, quic}},
	// raftstore replicates; what the cluster looks like (the map, users' and conversations'
	// placement, moves, revocations) is the control plane's, above it: raftstore never imports it.
	"raftstore":         {repo: []string{"proto/ident", "log", "raftstore/nodecert"}, deny: []string{msgpack, quic}},
	"raftstore/cluster": {repo: []string{"proto/ident", "log", "raftstore", "raftstore/nodecert"}, deny: []string{msgpack, quic}},
	// The node plane's certificates, beside raftstore's TLS that verifies them: a leaf, so that
	// syncctl and syncd/auth (which writes its files with its helpers) import it without raftstore.
	"raftstore/nodecert":      {repo: []string{"proto/ident"}, outside: []string{}},
	"raftstore/raftstoretest": {repo: []string{"proto/ident", "log", "proto", "raftstore", "raftstore/nodecert", "test/testkit"}},
	"proto/prototest":         {repo: []string{"proto/ident", "proto", "test/testkit"}, deny: serverOnly},
	"client":                  {repo: []string{"proto/ident", "proto", "client/internal/store"}, deny: serverOnly},
	"client/internal/store":   {repo: []string{"proto/ident", "proto"}, deny: append([]string{quic}, serverOnly...)},
	// Damages a closed device store on purpose, for the SDK's repair tests.
	"client/internal/store/storetest": {repo: []string{"proto/ident", "proto", "client/internal/store"}, deny: append([]string{quic}, serverOnly...)},
	"bench/peerresult":                {outside: []string{}},
	"bench/procstat":                  {outside: []string{}},
	"bench":                           {repo: []string{"proto/ident", "client", "client/internal/store", "proto", "test/testkit"}, deny: serverOnly},
	"syncd/adminapi":                  {outside: []string{}},
	"syncd/buildinfo":                 {outside: []string{}}, // the build's version: syncd and syncctl print it
	"syncd/auth":                      {repo: []string{"proto/ident", "proto", "raftstore/nodecert", "syncd/adminapi"}, outside: []string{msgpack}},
	"syncd/peer":                      {repo: []string{"proto/ident", "log", "proto", "raftstore", "raftstore/nodecert", "syncd/adminapi"}},
	"syncd/fanout":                    {repo: []string{"proto/ident", "log", "raftstore", "raftstore/nodecert", "syncd/adminapi", "syncd/tracing"}},
	// Tracing glue: spans of a message's steps, exported over OTLP; it knows the stored types
	// (log) and nothing above them.
	"syncd/tracing":   {repo: []string{"proto/ident", "log"}, deny: []string{msgpack, hashicorp, quic}},
	"syncd/transport": {repo: []string{"proto/ident", "proto"}, deny: []string{hashicorp}},
	"syncd/admin": {repo: []string{"proto/ident", "log", "proto", "raftstore", "raftstore/cluster", "raftstore/nodecert", "syncd/adminapi", "syncd/fanout",
		"syncd/peer", "syncd/tracing"}},
	"syncd": {repo: []string{"proto/ident", "log", "proto", "raftstore", "raftstore/cluster", "raftstore/nodecert", "syncd/admin", "syncd/adminapi", "syncd/auth", "syncd/buildinfo",
		"syncd/fanout", "syncd/peer", "syncd/tracing", "syncd/transport"}},
	// The conformance kit embeds a whole server and sits beside it: only commands and tests import it.
	"syncd/conformance": {repo: []string{"proto/ident", "log", "proto", "raftstore", "raftstore/cluster", "raftstore/nodecert", "syncd", "syncd/admin", "syncd/adminapi",
		"syncd/auth", "syncd/buildinfo", "syncd/fanout", "syncd/peer", "syncd/tracing", "syncd/transport"}},
	"syncd/syncdtest": {repo: []string{"proto/ident", "log", "proto", "raftstore", "raftstore/cluster", "raftstore/nodecert", "syncd", "syncd/admin", "syncd/adminapi",
		"syncd/auth", "syncd/buildinfo", "syncd/fanout", "syncd/peer", "syncd/tracing", "syncd/transport", "test/testkit"}},
	"test/testkit":     {outside: []string{}},
	"test/browser":     {repo: []string{}, outside: []string{}}, // runs the TypeScript SDK's journeys with Node
	"test/proccluster": {repo: []string{"proto/ident", "proto", "raftstore", "raftstore/nodecert", "log", "syncd/adminapi", "syncd/auth", "test/testkit"}},
	// syncctl is a user's and operator's tool: it speaks the protocol (client) and the admin API
	// (adminapi, auth), issues node certificates (raftstore/nodecert, a leaf), and links none of
	// the server, not even the state machine (log) or raftstore.
	"cmd/syncctl": {repo: []string{"proto/ident", "client", "client/internal/store", "proto", "raftstore/nodecert", "syncd/adminapi", "syncd/auth", "syncd/buildinfo"},
		deny: []string{raft, otel}},
	// Commands, benchmarks' runner and tests put the pieces together: anything.
	"cmd/syncd":        {repo: []string{"*"}},
	"cmd/syncbench":    {repo: []string{"*"}},
	"cmd/localcluster": {repo: []string{"*"}},
	"test":             {repo: []string{"*"}},
}

// TestDependencyDirection enforces the rules with go list -deps, so a wrong import fails CI
// instead of waiting for a reviewer.
func TestDependencyDirection(t *testing.T) {
	out, err := exec.Command("go", "list", "-f", `{{.ImportPath}} {{join .Deps " "}}`, "../...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	checked := 0
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		fields := strings.Fields(line)
		pkg := strings.TrimPrefix(fields[0], module)
		r, ok := rules[pkg]
		if !ok {
			t.Errorf("package %s has no dependency rule: add one to test/deps_test.go saying what it may import", pkg)
			continue
		}
		checked++
		for _, dep := range fields[1:] {
			if err := r.check(dep); err != "" {
				t.Errorf("%s imports %s: %s", pkg, dep, err)
			}
		}
	}
	if checked < len(rules)/2 {
		t.Fatalf("checked %d packages: go list output not understood", checked)
	}
}

// check returns why r forbids dep, or "".
func (r rule) check(dep string) string {
	if rest, ok := strings.CutPrefix(dep, module); ok {
		if !slices.Contains(r.repo, "*") && !slices.Contains(r.repo, rest) {
			return "it may import only " + strings.Join(r.repo, ", ") + " from this module"
		}
		return ""
	}
	if first, _, _ := strings.Cut(dep, "/"); !strings.Contains(first, ".") {
		return "" // the standard library
	}
	for _, d := range r.deny {
		if strings.HasPrefix(dep, d) {
			return "it must not depend on " + d
		}
	}
	if r.outside != nil && !slices.ContainsFunc(r.outside, func(m string) bool { return strings.HasPrefix(dep, m) }) {
		return "its only outside dependencies may be " + strings.Join(r.outside, ", ")
	}
	return ""
}

// TestDependencyRulesBite checks that the rules fail what they should: a test of the test.
func TestDependencyRulesBite(t *testing.T) {
	for _, c := range []struct {
		pkg, dep string
		bad      bool
	}{
		{"proto", "github.com/vmihailenco/msgpack/v5", false},
		{"proto", "github.com/quic-go/quic-go", true},
		{"proto", module + "log", true},
		{"client", "github.com/hashicorp/raft", true},
		{"client", module + "syncd", true},
		{"client", "go.opentelemetry.io/otel/trace", true},
		{"proto", "go.opentelemetry.io/otel", true},
		{"cmd/syncctl", "go.opentelemetry.io/otel/sdk", true},
		{"syncd/tracing", module + "raftstore", true},
		{"cmd/syncctl", "github.com/hashicorp/raft", true},
		{"cmd/syncctl", module + "raftstore", true},
		{"cmd/syncctl", module + "log", true},
		{"cmd/syncctl", module + "syncd/adminapi", false},
		{"cmd/syncctl", module + "raftstore/nodecert", false},
		{"raftstore/nodecert", module + "raftstore", true},
		{"raftstore/nodecert", module + "proto", true},
		{"syncd/adminapi", "github.com/vmihailenco/msgpack/v5", true},
		{"syncd/adminapi", "encoding/json", false},
		{"test", module + "syncd", false},
	} {
		if got := rules[c.pkg].check(c.dep) != ""; got != c.bad {
			t.Errorf("%s → %s: refused %v, want %v", c.pkg, c.dep, got, c.bad)
		}
	}
}
