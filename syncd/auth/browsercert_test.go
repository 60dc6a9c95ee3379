package auth

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"log/slog"
	"testing"
	"time"

	"github.com/syncd-dev/syncd/proto"
)

// A node's browser certificates over four weeks: always one a browser accepts (ECDSA P-256,
// valid at most 14 days, now inside its validity) being served; the next published a day before
// it is served; a restart keeps them.
func TestBrowserCertsRotate(t *testing.T) {
	dir := t.TempDir()
	now := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	b, err := newBrowserCerts(dir, slog.New(slog.DiscardHandler), clock)
	if err != nil {
		t.Fatal(err)
	}
	served := func() string {
		t.Helper()
		c, err := b.GetCertificate(nil)
		if err != nil {
			t.Fatal(err)
		}
		leaf := c.Leaf
		if k, ok := leaf.PublicKey.(*ecdsa.PublicKey); !ok || k.Curve != elliptic.P256() {
			t.Fatalf("served a %T certificate, browsers pin only ECDSA P-256", leaf.PublicKey)
		}
		if v := leaf.NotAfter.Sub(leaf.NotBefore); v > 14*24*time.Hour {
			t.Fatalf("served a certificate valid %v, browsers refuse more than 14 days", v)
		}
		if now.Before(leaf.NotBefore) || !now.Before(leaf.NotAfter) {
			t.Fatalf("served a certificate valid %v–%v at %v", leaf.NotBefore, leaf.NotAfter, now)
		}
		return proto.Fingerprint(c.Certificate[0])
	}
	first := served()
	if p := b.Published(); len(p) != 1 || p[0].SHA256 != first {
		t.Fatalf("published %+v, want only the served %s", p, first)
	}
	seen := map[string]bool{first: true}
	prev := first
	published := map[string]time.Time{first: now}
	for h := 1; h <= 28*24; h++ {
		now = now.Add(time.Hour)
		cur := served()
		for _, c := range b.Published() {
			if _, ok := published[c.SHA256]; !ok {
				published[c.SHA256] = now
			}
		}
		if cur != prev {
			if seen[cur] {
				t.Fatalf("at %v went back to an older certificate", now)
			}
			if since := now.Sub(published[cur]); since < 24*time.Hour {
				t.Fatalf("at %v served a certificate published only %v before", now, since)
			}
			if b.Published()[0].SHA256 != cur {
				t.Fatalf("the served certificate is not published first")
			}
			seen[cur], prev = true, cur
		}
		if n := len(b.Published()); n > 3 {
			t.Fatalf("at %v %d certificates published", now, n)
		}
	}
	if len(seen) < 4 || len(seen) > 6 {
		t.Fatalf("served %d certificates in four weeks, want one about every 6 days", len(seen))
	}
	again, err := newBrowserCerts(dir, slog.New(slog.DiscardHandler), clock)
	if err != nil {
		t.Fatal(err)
	}
	c, _ := again.GetCertificate(nil)
	if proto.Fingerprint(c.Certificate[0]) != prev || len(again.Published()) != len(b.Published()) {
		t.Fatal("a restart changed the certificates")
	}
}
