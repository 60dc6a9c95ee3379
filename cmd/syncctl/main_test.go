package main

import (
	"bufio"
	"crypto/rand"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/syncd-dev/syncd/proto"
	"github.com/syncd-dev/syncd/syncd"
	"github.com/syncd-dev/syncd/syncd/auth"
	"github.com/syncd-dev/syncd/syncd/buildinfo"
	"github.com/syncd-dev/syncd/syncd/syncdtest"
	"github.com/syncd-dev/syncd/test/testkit"
)

// TestMain fails the tests if a goroutine outlives them (a client, a server or a store left open).
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// startServer runs a real two-shard syncd on loopback until the test ends, and returns it with
// its data directory.
func startServer(t *testing.T) (*syncd.Server, string) {
	t.Helper()
	var dir string
	srv := syncdtest.Start(t, func(c *syncd.Config) { c.Shards = 2; dir = c.Dir })
	return srv, dir
}

// syncctl runs the command and returns its exit code, stdout and stderr.
func syncctl(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var stdout, stderr testkit.Buffer
	code := run(args, &stdout, &stderr)
	t.Logf("syncctl %s → %d\nstdout:\n%sstderr:\n%s", strings.Join(args, " "), code, stdout.String(), stderr.String())
	return code, stdout.String(), stderr.String()
}

// mustToken mints a token with `syncctl token`.
func mustToken(t *testing.T, dataDir, user, device string) string {
	t.Helper()
	code, out, _ := syncctl(t, "token", "-data-dir", dataDir, "-user", user, "-device", device, "-ttl", "1h")
	if code != 0 {
		t.Fatalf("token: exit %d", code)
	}
	return strings.TrimSpace(out)
}

func decodeJSON[T any](t *testing.T, line string) T {
	t.Helper()
	var v T
	if err := json.Unmarshal([]byte(line), &v); err != nil {
		t.Fatalf("output %q is not JSON: %v", line, err)
	}
	return v
}

// lines returns the non-empty lines of s.
func lines(s string) []string {
	var out []string
	sc := bufio.NewScanner(strings.NewReader(s))
	for sc.Scan() {
		if l := strings.TrimSpace(sc.Text()); l != "" {
			out = append(out, l)
		}
	}
	return out
}

// pullUntil pulls (with the same store, so each pull prints only new entries) until n entries
// were printed in all, and returns them. Fan-out to the user's log is asynchronous, so one pull
// may end before everything arrived.
func pullUntil(t *testing.T, n int, args ...string) []entryJSON {
	t.Helper()
	return pullKept(t, n, func(entryJSON) bool { return true }, args...)
}

// pullUntilIgnoringReports is pullUntil leaving delivery reports (kind delivered) out, neither
// counted nor returned: the server writes one when a device acks what a pull stored, in report
// rounds of its own, so how many a pull prints, and which pull, depends on timing.
func pullUntilIgnoringReports(t *testing.T, n int, args ...string) []entryJSON {
	t.Helper()
	return pullKept(t, n, func(en entryJSON) bool { return en.Kind != "delivered" }, args...)
}

// pullKept pulls like pullUntil until n entries that keep accepts were printed in all, and
// returns them; other entries are dropped.
func pullKept(t *testing.T, n int, keep func(entryJSON) bool, args ...string) []entryJSON {
	t.Helper()
	var got []entryJSON
	deadline := time.Now().Add(20 * time.Second)
	for len(got) < n {
		if time.Now().After(deadline) {
			t.Fatalf("pulled %d entries, want %d: %+v", len(got), n, got)
		}
		code, out, _ := syncctl(t, append([]string{"pull", "-wait", "300ms"}, args...)...)
		if code != 0 {
			t.Fatalf("pull: exit %d", code)
		}
		for _, l := range lines(out) {
			if en := decodeJSON[entryJSON](t, l); keep(en) {
				got = append(got, en)
			}
		}
	}
	if len(got) != n {
		t.Fatalf("pulled %d entries, want %d: %+v", len(got), n, got)
	}
	return got
}

func TestSyncctl(t *testing.T) {
	t.Setenv("SYNCD_TOKEN", "")
	t.Setenv("SYNCD_ADMIN_TOKEN", "")
	// Delivery reports off: this test checks what each pull prints of bob's log, entry by entry,
	// and a delivered entry written when his laptop's ack reaches a report round would land in
	// whichever pull comes next (TestPullPrintsDeliveryReports checks how one is printed).
	var dataDir string
	srv := syncdtest.Start(t, func(c *syncd.Config) { c.Shards, c.DisableDeliveryReports = 2, true; dataDir = c.Dir })
	addr := srv.Addr().String()

	// token: signed with the server's secret, naming the user and device.
	aliceTok := mustToken(t, dataDir, "alice", "phone")
	if _, err := auth.VerifyToken(mustSecret(t, dataDir), aliceTok, time.Now()); err != nil {
		t.Fatalf("minted token does not verify: %v", err)
	}
	bobTok := mustToken(t, dataDir, "bob", "laptop")
	bobPhoneTok := mustToken(t, dataDir, "bob", "phone")
	aliceStore, bobStore := t.TempDir(), t.TempDir()
	// alice pins the certificate read from the data directory, bob the printed fingerprint;
	// neither names -device: it comes from the token.
	alice := []string{"-addr", addr, "-token", aliceTok, "-data-dir", dataDir, "-store", aliceStore}
	bob := []string{"-addr", addr, "-token", bobTok, "-fingerprint", srv.Fingerprint(), "-store", bobStore}
	// bob also acts from his phone, so that what his laptop pulls was not synced into its store
	// by a command of its own.
	bobPhone := []string{"-addr", addr, "-token", bobPhoneTok, "-data-dir", dataDir, "-store", t.TempDir()}

	// send: alice starts the direct conversation with bob.
	code, out, _ := syncctl(t, append([]string{"send", "-conv", "d:alice:bob", "-peer", "bob", "-body", "hi bob"}, alice...)...)
	if code != 0 {
		t.Fatalf("send: exit %d", code)
	}
	sent := decodeJSON[sentJSON](t, out)
	if sent.Status != "sent" || !proto.MsgID(sent.MsgID).Valid() || sent.ConvSeq != 1 || sent.Duplicate || sent.ClientMsgID == "" {
		t.Fatalf("send printed %+v", sent)
	}

	// pull as bob: the message, as one JSON line.
	got := pullUntil(t, 1, bob...)
	msg := got[0]
	if msg.Kind != "message" || msg.Conv != "d:alice:bob" || msg.From != "alice" || msg.Body != "hi bob" ||
		msg.MsgID != sent.MsgID || msg.ConvSeq != 1 || msg.Seq != 1 {
		t.Fatalf("pull printed %+v", msg)
	}
	if _, err := time.Parse(time.RFC3339Nano, msg.TS); err != nil {
		t.Fatalf("ts %q: %v", msg.TS, err)
	}
	// The cursor is kept in the store: nothing new, nothing printed.
	if code, out, _ := syncctl(t, append([]string{"pull", "-wait", "300ms"}, bob...)...); code != 0 || out != "" {
		t.Fatalf("second pull: exit %d, printed %q; want nothing new", code, out)
	}

	// read, edit, react, recall, group create/add: each acknowledged, and each reaches bob's log.
	for _, args := range [][]string{
		append([]string{"read", "-conv", "d:alice:bob", "-up-to", "1"}, bobPhone...),
		append([]string{"edit", "-conv", "d:alice:bob", "-msg-id", sent.MsgID, "-body", "hi, edited"}, alice...),
		append([]string{"react", "-conv", "d:alice:bob", "-msg-id", sent.MsgID, "-reaction", "👍"}, bobPhone...),
		append([]string{"recall", "-conv", "d:alice:bob", "-msg-id", sent.MsgID}, alice...),
		append([]string{"group", "create", "-conv", "g:team", "-members", "bob"}, alice...),
		append([]string{"group", "add", "-conv", "g:team", "-members", "carol,dave"}, alice...),
		append([]string{"group", "role", "-conv", "g:team", "-members", "bob", "-role", "admin"}, alice...),
	} {
		code, out, _ := syncctl(t, args...)
		if code != 0 {
			t.Fatalf("%s: exit %d", args[0], code)
		}
		if r := decodeJSON[sentJSON](t, out); r.Status != "sent" || r.MsgID == "" {
			t.Fatalf("%s printed %+v", args[0], r)
		}
	}
	code, out, _ = syncctl(t, append([]string{"group", "members", "-conv", "g:team"}, alice...)...)
	if want := `{"user":"alice","role":"owner"}|{"user":"bob","role":"admin"}|{"user":"carol","role":"member"}|{"user":"dave","role":"member"}`; code != 0 || strings.Join(lines(out), "|") != want {
		t.Fatalf("group members: exit %d, printed %q, want %s", code, out, want)
	}
	if code, _, errOut := syncctl(t, append([]string{"group", "role", "-conv", "g:team", "-members", "bob", "-role", "king"}, alice...)...); code != exitUsage || !strings.Contains(errOut, "member, admin or owner") {
		t.Fatalf("group role -role king: exit %d, %s", code, errOut)
	}
	got = pullUntil(t, 7, bob...)
	kinds := map[string]entryJSON{}
	for _, en := range got {
		kinds[en.Kind] = en
	}
	if r := kinds["receipt"]; r.From != "bob" || r.UpTo != 1 {
		t.Errorf("receipt: %+v", r)
	}
	if r := kinds["recall"]; r.From != "alice" || r.Target != sent.MsgID {
		t.Errorf("recall: %+v", r)
	}
	if r := kinds["edit"]; r.From != "alice" || r.Target != sent.MsgID || r.Body != "hi, edited" && r.Folded == 0 {
		t.Errorf("edit: %+v", r)
	}
	if r := kinds["reaction"]; r.From != "bob" || r.Target != sent.MsgID || r.Reaction != "👍" {
		t.Errorf("reaction: %+v", r)
	}
	if g := kinds["group_create"]; g.Conv != "g:team" || len(g.Members) == 0 {
		t.Errorf("group_create: %+v", g)
	}
	if g := kinds["member_add"]; g.Conv != "g:team" || strings.Join(g.Members, ",") != "carol,dave" {
		t.Errorf("member_add: %+v", g)
	}
	if g := kinds["role_change"]; g.Role != "admin" || strings.Join(g.Members, ",") != "bob" {
		t.Errorf("role_change: %+v", g)
	}

	// A refusal: exit 1, a failed JSON line, the code and what to do.
	code, out, errOut := syncctl(t, append([]string{"recall", "-conv", "d:alice:bob", "-msg-id", sent.MsgID}, bobPhone...)...)
	if code != exitFail {
		t.Fatalf("recall of another's message: exit %d, want %d", code, exitFail)
	}
	if f := decodeJSON[failedJSON](t, out); f.Status != "failed" || f.Code == "" {
		t.Fatalf("refused recall printed %+v", f)
	}
	if !strings.Contains(errOut, "what to do") {
		t.Errorf("stderr has no advice: %q", errOut)
	}

	// status: ready, one line per shard, each led by this node. /readyz and /metrics are open: no
	// admin token needed.
	code, out, _ = syncctl(t, "status", "-admin", srv.AdminAddr().String())
	if code != 0 {
		t.Fatalf("status: exit %d", code)
	}
	if !strings.Contains(out, ": ready") || !strings.Contains(out, "SHARD") {
		t.Fatalf("status printed %q", out)
	}
	leaders := 0
	for _, l := range lines(out) {
		if f := strings.Fields(l); len(f) > 1 && (f[0] == "1" || f[0] == "2") && f[1] == "yes" {
			leaders++
		}
	}
	if leaders != 2 {
		t.Fatalf("status shows %d leading shards, want 2:\n%s", leaders, out)
	}

	// A token signed with another secret: refused at connect, with the code.
	other := make([]byte, 32)
	rand.Read(other)
	badTok, err := auth.MintToken(other, auth.TokenClaims{User: "alice", Device: "phone", Expires: time.Now().Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	code, _, errOut = syncctl(t, "send", "-addr", addr, "-token", badTok, "-data-dir", dataDir, "-store", t.TempDir(),
		"-conv", "d:alice:bob", "-body", "x")
	if code == 0 || !strings.Contains(errOut, "unauthenticated") {
		t.Fatalf("bad token: exit %d, stderr %q; want a failure naming unauthenticated", code, errOut)
	}
}

func mustSecret(t *testing.T, dataDir string) []byte {
	t.Helper()
	s, err := auth.LoadOrCreateSecret(dataDir) // exists: created by the server
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestTokenNeedsExistingSecret: token never creates the secret, and says how to get one.
func TestTokenNeedsExistingSecret(t *testing.T) {
	dir := t.TempDir()
	code, out, errOut := syncctl(t, "token", "-data-dir", dir, "-user", "alice")
	if code == 0 || out != "" || !strings.Contains(errOut, "start syncd once") {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	if _, err := os.Stat(filepath.Join(dir, auth.TokenKeyFile)); !os.IsNotExist(err) {
		t.Fatalf("token created %s (stat: %v)", auth.TokenKeyFile, err)
	}
}

// TestUsageErrors: missing flags are usage errors (exit 2) that say what is missing, before any
// connection; -h exits 0 with an example.
func TestUsageErrors(t *testing.T) {
	t.Setenv("SYNCD_TOKEN", "")
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"send", "-conv", "c", "-body", "x", "-fingerprint", "00"}, "SYNCD_TOKEN"},
		{[]string{"send", "-conv", "c", "-body", "x", "-token", "t"}, "-fingerprint"},
		{[]string{"send", "-conv", "c"}, "-body"},
		{[]string{"recall", "-conv", "c", "-msg-id", "nope"}, "not a msg_id"},
		{[]string{"group", "drop"}, "create|add|remove|role|members"},
		{[]string{"nosuch"}, "unknown command"},
	}
	for _, c := range cases {
		code, _, errOut := syncctl(t, c.args...)
		if code != exitUsage || !strings.Contains(errOut, c.want) {
			t.Errorf("syncctl %v: exit %d, stderr %q; want exit %d mentioning %q", c.args, code, errOut, exitUsage, c.want)
		}
	}
	for _, cmd := range [][]string{{"token"}, {"send"}, {"read"}, {"recall"}, {"group", "create"}, {"group", "add"}, {"group", "remove"}, {"pull"}, {"tail"}, {"status"}} {
		code, _, errOut := syncctl(t, append(cmd, "-h")...)
		if code != 0 || !strings.Contains(errOut, "Example:") {
			t.Errorf("syncctl %v -h: exit %d, stderr %q", cmd, code, errOut)
		}
	}
}

func TestParseSample(t *testing.T) {
	s, ok := parseSample(`syncd_raft_is_leader{shard="3",x="a\"b"} 1`)
	if !ok || s.name != "syncd_raft_is_leader" || s.labels["shard"] != "3" || s.labels["x"] != `a"b` || s.value != "1" {
		t.Fatalf("%+v %v", s, ok)
	}
	s, ok = parseSample(`syncd_connections 1.5e+06`)
	if !ok || s.value != "1500000" || len(s.labels) != 0 {
		t.Fatalf("%+v %v", s, ok)
	}
}

// TestVersion: syncctl -version prints the build on one line.
func TestVersion(t *testing.T) {
	code, out, _ := syncctl(t, "-version")
	if code != exitOK || !strings.HasPrefix(out, "syncctl "+buildinfo.Get().Version+" (") {
		t.Errorf("syncctl -version: exit %d, printed %q", code, out)
	}
}
