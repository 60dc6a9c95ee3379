package admin_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/syncd-dev/syncd/proto"
	"github.com/syncd-dev/syncd/proto/prototest"
	"github.com/syncd-dev/syncd/syncd"
	"github.com/syncd-dev/syncd/syncd/adminapi"
	"github.com/syncd-dev/syncd/syncd/auth"
	"github.com/syncd-dev/syncd/syncd/syncdtest"
	"github.com/syncd-dev/syncd/test/testkit"
)

// revoke revokes user's device through the admin endpoint of the node at adminAddr.
func revoke(t *testing.T, adminAddr, adminToken, user, device string) adminapi.Revocation {
	t.Helper()
	code, body := testkit.HTTP(t, http.MethodPost, "http://"+adminAddr+"/v1/users/"+user+"/devices/"+device+"/revoke",
		testkit.Bearer(adminToken))
	var r adminapi.Revocation
	if code != http.StatusOK || json.Unmarshal([]byte(body), &r) != nil {
		t.Fatalf("revoke %s/%s: HTTP %d %s", user, device, code, body)
	}
	return r
}

// TestRevokeDeviceEverywhere: revoking a device through one node's admin endpoint closes its
// sessions on every node of the cluster with unauthenticated, and every node refuses its tokens
// issued until then — also a node restarted afterwards; a token minted later is accepted, and
// the user's other devices and other users are not touched.
func TestRevokeDeviceEverywhere(t *testing.T) {
	var secret []byte
	c := syncdtest.StartCluster(t, 3, func(_ int, cfg *syncd.Config) { cfg.MaxTokenLifetime, secret = 48*time.Hour, cfg.TokenSecret })
	srv := c.Server(0)
	old, err := srv.MintToken("alice", "phone", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	var phones []*prototest.Conn
	for i := range c.Size() {
		s := c.Server(i)
		phones = append(phones, prototest.Connect(t, s.Addr().String(), s.Fingerprint(), old, "alice", "phone"))
	}
	laptop := connect(t, &testServer{Server: c.Server(2)}, "alice", "laptop")
	bob := connect(t, &testServer{Server: c.Server(1)}, "bob", "phone")

	// A revocation covers tokens issued up to auth.MaxClockSkew after it, and is kept until they
	// have expired.
	skew := int64(auth.MaxClockSkew / time.Second)
	before := time.Now().Unix()
	r := revoke(t, srv.AdminAddr().String(), srv.AdminToken(), "alice", "phone")
	if r.User != "alice" || r.Device != "phone" || r.Before < before || r.Before > time.Now().Unix() || r.Until != r.Before+48*3600+skew {
		t.Fatalf("revocation %+v", r)
	}
	for i, p := range phones {
		if e := prototest.Closed(t, p.QUIC); e.Code != proto.CodeUnauthenticated || !strings.Contains(e.Message, "revoked") {
			t.Fatalf("node %d: the phone's session closed with %+v, want unauthenticated (revoked)", i, e)
		}
	}
	for _, other := range []*prototest.Conn{laptop, bob} {
		// A replica that has not taken its lease yet answers unavailable with a retry-after (a
		// cluster just started, on a busy machine); a closed session would not answer at all.
		var got proto.Frame
		testkit.WaitTrue(t, 10*time.Second, "another device's session to answer a head check", func() bool {
			got = other.Do(&proto.HeadCheck{ID: other.ID()})
			if e, ok := got.(*proto.Error); ok && e.Code == proto.CodeUnavailable {
				return false
			}
			return true
		})
		if _, ok := got.(*proto.Head); !ok {
			t.Fatalf("another device's session was touched: %#v", got)
		}
	}
	refusedEverywhere := func() {
		t.Helper()
		for i := range c.Size() {
			s := c.Server(i)
			e, ok := prototest.Hello(t, prototest.Dial(t, s.Addr().String(), s.Fingerprint()), old, "phone").(*proto.Error)
			if !ok || e.Code != proto.CodeUnauthenticated || !strings.Contains(e.Message, "revoked") {
				t.Fatalf("node %d: the revoked token got %#v", i, e)
			}
		}
	}
	refusedEverywhere()

	// Replicated in the meta shard: a node restarted after the revocation still knows it.
	c.Stop(2)
	c.Start(2)
	refusedEverywhere()

	// A token issued after what the revocation covers: minted with an issue time past it, which
	// a server accepts once it is within the skew of its clock (a token service would wait
	// auth.MaxClockSkew after revoking before minting the device's next token).
	time.Sleep(time.Until(time.Unix(r.Before+1, 0)))
	issued := time.Unix(r.Before+skew+1, 0)
	fresh, err := auth.MintToken(secret, auth.TokenClaims{User: "alice", Device: "phone", Issued: issued, Expires: issued.Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	s := c.Server(2)
	prototest.Connect(t, s.Addr().String(), s.Fingerprint(), fresh, "alice", "phone")
}

// TestRevokeRefusesBadIDs: a revocation names valid ids, or is refused with 400 and nothing is
// revoked.
func TestRevokeRefusesBadIDs(t *testing.T) {
	ts := startServer(t, nil)
	base := "http://" + ts.AdminAddr().String()
	for _, path := range []string{"/v1/users/a%20b/devices/phone/revoke", "/v1/users/alice/devices/" + strings.Repeat("d", 129) + "/revoke"} {
		wantRefused(t, http.MethodPost, base+path, http.StatusBadRequest, "bad_request", testkit.Bearer(ts.AdminToken()))
	}
	c := connect(t, ts, "alice", "phone")
	if _, ok := c.Do(&proto.HeadCheck{ID: c.ID()}).(*proto.Head); !ok {
		t.Fatal("alice's session ended")
	}
}
