package proto

import (
	"crypto/tls"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/syncd-dev/syncd/test/testkit"
)

// TestFingerprintFormat pins the spelling operators copy from server logs: the SHA-256 of the
// bytes as 64 lowercase hex digits, nothing else.
func TestFingerprintFormat(t *testing.T) {
	const abc = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad" // SHA-256("abc")
	if got := Fingerprint([]byte("abc")); got != abc {
		t.Fatalf("Fingerprint(abc) = %q, want %q", got, abc)
	}
}

// pinTestCert returns a fresh self-signed certificate, with a name and an issuer a CA check would
// refuse (the pin must not care), and its fingerprint.
func pinTestCert(t *testing.T) (tls.Certificate, string) {
	t.Helper()
	cert, err := testkit.SelfSignedCert("elsewhere.invalid")
	if err != nil {
		t.Fatal(err)
	}
	return cert, Fingerprint(cert.Certificate[0])
}

// pinHandshake runs a real TLS handshake over loopback TCP between a server presenting cert and
// a client using cfg, and returns the negotiated protocol and the client's error. (Not over
// net.Pipe: it has no buffer, so a client refusing the certificate and a server still writing
// its flight would block each other.)
func pinHandshake(t *testing.T, cert tls.Certificate, cfg *tls.Config) (string, error) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	done := make(chan struct{})
	go func() {
		defer close(done)
		sc, err := ln.Accept()
		if err != nil {
			return
		}
		_ = sc.SetDeadline(time.Now().Add(10 * time.Second))
		srv := tls.Server(sc, &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS13,
			NextProtos: []string{ALPN}})
		_ = srv.Handshake() // fails when the client refuses the certificate; the client's error is the one checked
		_ = srv.Close()
	}()
	cc, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	_ = cc.SetDeadline(time.Now().Add(10 * time.Second))
	cli := tls.Client(cc, cfg)
	err = cli.Handshake()
	proto := cli.ConnectionState().NegotiatedProtocol
	_ = cli.Close()
	<-done
	return proto, err
}

func TestPinnedTLSConfig(t *testing.T) {
	cert, fp := pinTestCert(t)
	_, otherFP := pinTestCert(t)

	t.Run("right pin", func(t *testing.T) {
		// As pasted by an operator: upper case with colons and a trailing newline.
		var pasted strings.Builder
		for i := 0; i < len(fp); i += 2 {
			if i > 0 {
				pasted.WriteByte(':')
			}
			pasted.WriteString(strings.ToUpper(fp[i : i+2]))
		}
		pasted.WriteByte('\n')
		for _, pin := range []string{fp, pasted.String()} {
			got, err := pinHandshake(t, cert, PinnedTLSConfig(pin))
			if err != nil {
				t.Fatalf("pin %q: handshake: %v", pin, err)
			}
			if got != ALPN {
				t.Fatalf("pin %q: negotiated %q, want %q", pin, got, ALPN)
			}
		}
	})
	t.Run("wrong pin", func(t *testing.T) {
		_, err := pinHandshake(t, cert, PinnedTLSConfig(otherFP))
		if err == nil {
			t.Fatal("handshake with another certificate's pin succeeded")
		}
		if msg := err.Error(); !strings.Contains(msg, fp) || !strings.Contains(msg, otherFP) {
			t.Fatalf("error %q does not name both the server's (%s) and the pinned (%s) fingerprint", msg, fp, otherFP)
		}
	})
	for name, pin := range map[string]string{
		"empty pin":     "",
		"short pin":     fp[:62],
		"not hex":       "zz" + fp[2:],
		"too long":      fp + "00",
		"only spaces":   "   ",
		"only a prefix": fp[:32],
	} {
		t.Run(name, func(t *testing.T) {
			_, err := pinHandshake(t, cert, PinnedTLSConfig(pin))
			if err == nil || !strings.Contains(err.Error(), "is not 64 hex digits") {
				t.Fatalf("handshake with pin %q: %v, want a refusal naming the bad pin", pin, err)
			}
		})
	}
}

// TestPinnedTLSConfigShape checks what a QUIC dialer relies on: TLS 1.3 only, the protocol's
// ALPN, and a fresh configuration on every call (callers change NextProtos).
func TestPinnedTLSConfigShape(t *testing.T) {
	a, b := PinnedTLSConfig("x"), PinnedTLSConfig("x")
	if a == b {
		t.Fatal("PinnedTLSConfig returned the same configuration twice")
	}
	if a.MinVersion != tls.VersionTLS13 || len(a.NextProtos) != 1 || a.NextProtos[0] != ALPN {
		t.Fatalf("MinVersion %x, NextProtos %v; want TLS 1.3 and [%s]", a.MinVersion, a.NextProtos, ALPN)
	}
	a.NextProtos[0] = "other"
	if b.NextProtos[0] != ALPN {
		t.Fatal("configurations share their NextProtos slice")
	}
}
