package proto

import (
	"crypto/sha256"
	"crypto/subtle"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
)

// Certificate pinning for clients. A server with a self-signed certificate prints its
// fingerprint; a client (the Go SDK, the benchmarks, syncctl) pins it instead of trusting a CA.
// This is the one copy of that check, in proto because it is the only package client and server
// share.
//
// A fingerprint is the SHA-256 of the certificate's DER encoding, written as 64 lowercase hex
// digits without separators. Operators copy it from the server's log to clients, so the spelling
// is stable.

// Fingerprint returns the fingerprint of a DER-encoded certificate: its SHA-256 as 64 lowercase
// hex digits, no separators. A pure function; safe to call concurrently.
func Fingerprint(der []byte) string {
	sum := sha256.Sum256(der)
	return hex.EncodeToString(sum[:])
}

// PinnedTLSConfig returns a new client TLS configuration that accepts exactly the server
// certificate with the given fingerprint, whatever its names, issuer or validity dates, and
// offers [ALPN] over TLS 1.3. Colons, surrounding spaces and upper case in fingerprint are
// tolerated (as operators paste it). A fingerprint that is not 64 hex digits — the empty one
// included — matches nothing: every handshake then fails with an error saying so, rather than
// silently falling back to no check.
//
// It sets InsecureSkipVerify, so the pin is the only check: VerifyPeerCertificate compares the
// SHA-256 of the leaf the server presents with the pin in constant time, and a mismatch fails
// the handshake with an error naming both fingerprints. That callback does not run on resumed
// sessions; resumption is still safe because a session ticket is only obtained from a handshake
// that passed the pin, as long as a ClientSessionCache is not shared with configurations that
// pin something else.
//
// The caller owns the result and may change it (NextProtos, for a test protocol) before first
// use; once in use it must not be modified and is safe for concurrent use.
func PinnedTLSConfig(fingerprint string) *tls.Config {
	pin := strings.ToLower(strings.ReplaceAll(strings.TrimSpace(fingerprint), ":", ""))
	want, decodeErr := hex.DecodeString(pin)
	return &tls.Config{
		MinVersion:         tls.VersionTLS13,
		NextProtos:         []string{ALPN},
		InsecureSkipVerify: true, // replaced by the pin below
		VerifyPeerCertificate: func(rawCerts [][]byte, _ [][]*x509.Certificate) error {
			if decodeErr != nil || len(want) != sha256.Size {
				return fmt.Errorf("proto: pinned fingerprint %q is not %d hex digits", fingerprint, 2*sha256.Size)
			}
			if len(rawCerts) == 0 {
				return errors.New("proto: server presented no certificate")
			}
			got := sha256.Sum256(rawCerts[0])
			// Constant time: how much of a forged certificate's hash matched must not show in
			// the handshake's timing.
			if subtle.ConstantTimeCompare(got[:], want) != 1 {
				return fmt.Errorf("proto: server certificate fingerprint %s does not match the pinned %s",
					hex.EncodeToString(got[:]), pin)
			}
			return nil
		},
	}
}
