package auth

import (
	"bytes"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/syncd-dev/syncd/proto"
)

// Device tokens authenticate a connection: they name a user, one of its devices and an expiry,
// signed with a secret only the servers know. The format is stable (clients and tools store
// tokens; servers of several versions must accept the same tokens):
//
//	v1.<base64url(payload)>.<base64url(mac)>
//
//	payload = {"u":"<user>","d":"<device>","exp":<unix seconds>,"iat":<unix seconds>}
//	mac     = HMAC-SHA256(secret, "v1." + base64url(payload))   (32 bytes)
//
// base64url is RFC 4648 §5 without padding, decoded strictly (no padding, no stray bits, no
// characters outside the alphabet, not even line breaks), so a token has exactly one accepted
// spelling. The payload is compact JSON with the keys in that
// order, no HTML escaping, no unknown keys (a future field that restricts a token needs "v2",
// since a "v1" verifier would ignore it). Ids follow proto.ValidID. A token is at most
// MaxTokenLen bytes; with the longest ids a minted token stays well under it.
//
// A token is valid while now < exp. Nothing checks iat against the clock (devices and servers
// may disagree by a few seconds); it records when the token was minted.

// MaxTokenLen is the longest token VerifyToken reads; longer input is rejected before decoding.
const MaxTokenLen = 1024

// minSecretLen is the shortest secret MintToken and VerifyToken accept. LoadOrCreateSecret makes
// secretLen bytes.
const (
	minSecretLen = 16
	secretLen    = 32
)

// tokenVersion prefixes every token, followed by '.'.
const tokenVersion = "v1"

// TokenKeyFile is the name of the token-signing secret inside the data directory
// (LoadOrCreateSecret).
const TokenKeyFile = "token.key"

// Token errors. VerifyToken wraps them with a detail for logs; test with errors.Is.
var (
	// ErrTokenInvalid: the token is malformed, has an unknown version, or its signature does not
	// match (including a token signed with another secret).
	ErrTokenInvalid = errors.New("syncd: invalid token")
	// ErrTokenExpired: the token is well-formed and correctly signed but its expiry has passed.
	ErrTokenExpired = errors.New("syncd: token expired")
)

// TokenClaims is what a token says. Times have whole-second precision on the wire: MintToken
// truncates them and VerifyToken returns them in UTC.
type TokenClaims struct {
	User    string    // user id (proto.ValidID)
	Device  string    // device id (proto.ValidID)
	Expires time.Time // the token is valid strictly before this instant
	Issued  time.Time // when the token was minted; MintToken uses the current time if zero
}

// tokenPayload is the JSON payload; the field order is the encoding order. Pointers detect
// missing keys when decoding.
type tokenPayload struct {
	U   *string `json:"u"`
	D   *string `json:"d"`
	Exp *int64  `json:"exp"`
	Iat *int64  `json:"iat"`
}

// MintToken signs c with secret. It fails if the secret is shorter than 16 bytes, an id is not a
// valid id (proto.ValidID), Expires is zero or not after Issued (in whole seconds). A zero Issued
// means now.
//
// MintToken is a pure function of its arguments (and the clock if Issued is zero); it is safe to
// call concurrently and does not retain secret.
func MintToken(secret []byte, c TokenClaims) (string, error) {
	if len(secret) < minSecretLen {
		return "", fmt.Errorf("syncd: token secret is %d bytes, need at least %d", len(secret), minSecretLen)
	}
	if !proto.ValidID(c.User) {
		return "", fmt.Errorf("syncd: mint token: bad user id %q (1..%d printable ASCII bytes, no space)", c.User, proto.MaxIDLen)
	}
	if !proto.ValidID(c.Device) {
		return "", fmt.Errorf("syncd: mint token: bad device id %q (1..%d printable ASCII bytes, no space)", c.Device, proto.MaxIDLen)
	}
	if c.Expires.IsZero() {
		return "", errors.New("syncd: mint token: no expiry")
	}
	if c.Issued.IsZero() {
		c.Issued = time.Now()
	}
	exp, iat := c.Expires.Unix(), c.Issued.Unix()
	if exp <= iat {
		return "", fmt.Errorf("syncd: mint token: expiry %s is not after issue time %s",
			c.Expires.UTC().Format(time.RFC3339), c.Issued.UTC().Format(time.RFC3339))
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false) // keeps '<', '>', '&' as one byte, so the longest ids fit MaxTokenLen
	if err := enc.Encode(tokenPayload{U: &c.User, D: &c.Device, Exp: &exp, Iat: &iat}); err != nil {
		return "", fmt.Errorf("syncd: mint token: %w", err)
	}
	payload := bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
	signed := tokenVersion + "." + base64.RawURLEncoding.EncodeToString(payload)
	tok := signed + "." + base64.RawURLEncoding.EncodeToString(tokenMAC(secret, signed))
	if len(tok) > MaxTokenLen { // cannot happen with valid ids; kept as a guard for format changes
		return "", fmt.Errorf("syncd: mint token: %d bytes, over %d", len(tok), MaxTokenLen)
	}
	return tok, nil
}

// VerifyToken checks token's signature with secret and its expiry against now, and returns its
// claims. Errors:
//   - ErrTokenInvalid (wrapped): longer than MaxTokenLen, a byte outside [A-Za-z0-9_.-],
//     malformed, unknown version, bad
//     signature, or a signed payload that does not decode to valid claims;
//   - ErrTokenExpired (wrapped): correctly signed but now >= Expires. The claims are returned
//     too, so the caller can log whose token expired;
//   - another error if secret is shorter than 16 bytes (a server misconfiguration, not the
//     client's fault).
//
// The signature is checked (in constant time) before anything in the payload is looked at.
// VerifyToken is safe to call concurrently and does not retain its arguments.
func VerifyToken(secret []byte, token string, now time.Time) (TokenClaims, error) {
	if len(secret) < minSecretLen {
		return TokenClaims{}, fmt.Errorf("syncd: token secret is %d bytes, need at least %d", len(secret), minSecretLen)
	}
	if len(token) > MaxTokenLen {
		return TokenClaims{}, fmt.Errorf("%w: %d bytes, over %d", ErrTokenInvalid, len(token), MaxTokenLen)
	}
	// Only the base64url alphabet and the dots: Go's decoders skip '\r' and '\n' even in strict
	// mode, which would give a signed token a second spelling.
	for i := 0; i < len(token); i++ {
		if c := token[i]; !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_' || c == '.') {
			return TokenClaims{}, fmt.Errorf("%w: byte %#02x at %d", ErrTokenInvalid, c, i)
		}
	}
	version, rest, ok := strings.Cut(token, ".")
	if !ok {
		return TokenClaims{}, fmt.Errorf("%w: not a token", ErrTokenInvalid)
	}
	if version != tokenVersion {
		return TokenClaims{}, fmt.Errorf("%w: unknown version %.8q", ErrTokenInvalid, version)
	}
	payloadB64, macB64, ok := strings.Cut(rest, ".")
	if !ok || strings.Contains(macB64, ".") {
		return TokenClaims{}, fmt.Errorf("%w: want 3 dot-separated parts", ErrTokenInvalid)
	}
	mac, err := base64.RawURLEncoding.Strict().DecodeString(macB64)
	if err != nil || len(mac) != sha256.Size {
		return TokenClaims{}, fmt.Errorf("%w: malformed signature", ErrTokenInvalid)
	}
	signed := token[:len(tokenVersion)+1+len(payloadB64)]
	if !hmac.Equal(mac, tokenMAC(secret, signed)) {
		return TokenClaims{}, fmt.Errorf("%w: bad signature", ErrTokenInvalid)
	}

	// Signed by us: what follows fails only for a payload minted by a buggy or foreign minter.
	payload, err := base64.RawURLEncoding.Strict().DecodeString(payloadB64)
	if err != nil {
		return TokenClaims{}, fmt.Errorf("%w: malformed payload", ErrTokenInvalid)
	}
	var p tokenPayload
	dec := json.NewDecoder(bytes.NewReader(payload))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		return TokenClaims{}, fmt.Errorf("%w: payload: %v", ErrTokenInvalid, err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return TokenClaims{}, fmt.Errorf("%w: payload: trailing data", ErrTokenInvalid)
	}
	switch {
	case p.U == nil || p.D == nil || p.Exp == nil || p.Iat == nil:
		return TokenClaims{}, fmt.Errorf("%w: payload lacks u, d, exp or iat", ErrTokenInvalid)
	case !proto.ValidID(*p.U) || !proto.ValidID(*p.D):
		return TokenClaims{}, fmt.Errorf("%w: bad user or device id", ErrTokenInvalid)
	case *p.Exp <= *p.Iat:
		return TokenClaims{}, fmt.Errorf("%w: exp not after iat", ErrTokenInvalid)
	}
	c := TokenClaims{
		User:    *p.U,
		Device:  *p.D,
		Expires: time.Unix(*p.Exp, 0).UTC(),
		Issued:  time.Unix(*p.Iat, 0).UTC(),
	}
	if !now.Before(c.Expires) {
		return c, fmt.Errorf("%w at %s", ErrTokenExpired, c.Expires.Format(time.RFC3339))
	}
	return c, nil
}

func tokenMAC(secret []byte, signed string) []byte {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(signed))
	return m.Sum(nil)
}

// LoadOrCreateSecret returns the token-signing secret kept in dir/token.key (TokenKeyFile): 32
// bytes written as 64 hex digits and a newline, file mode 0600. If the file does not exist it
// creates dir (0700) if needed and the file, from crypto/rand. Creation is atomic and
// create-if-absent (temporary file, fsync, hard link into place), so a crash never leaves a
// partial file and two processes starting together (say the server and `syncctl token`) end up
// with the same secret. An existing file that is not exactly 32 bytes of hex (surrounding white
// space allowed) is refused with an error saying what to do; it is never overwritten.
//
// Every server of a cluster must use the same secret. Replacing the file invalidates all issued
// tokens. Safe to call concurrently, also from several processes.
func LoadOrCreateSecret(dir string) ([]byte, error) {
	path := filepath.Join(dir, TokenKeyFile)
	secret, err := readSecret(path)
	if !errors.Is(err, fs.ErrNotExist) {
		return secret, err
	}
	secret = make([]byte, secretLen)
	if _, err := rand.Read(secret); err != nil {
		return nil, fmt.Errorf("syncd: generate token secret: %w", err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("syncd: create token secret: %w", err)
	}
	created, err := writeFileAtomic(path, []byte(hex.EncodeToString(secret)+"\n"), 0o600, true)
	if err != nil {
		return nil, fmt.Errorf("syncd: create token secret: %w", err)
	}
	if !created { // another process won the race: use its secret
		return readSecret(path)
	}
	return secret, nil
}

// readSecret reads and checks a token key file. A missing file yields an error matching
// fs.ErrNotExist.
func readSecret(path string) ([]byte, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, err
		}
		return nil, fmt.Errorf("syncd: read token secret: %w", err)
	}
	text := strings.TrimSpace(string(raw))
	secret, err := hex.DecodeString(text)
	if err != nil || len(secret) != secretLen {
		return nil, fmt.Errorf("syncd: token secret %s is not %d hex digits (%d random bytes); "+
			"restore the right file from the other servers or a backup, or delete it to generate a "+
			"new secret on the next start (every issued token then stops working)",
			path, 2*secretLen, secretLen)
	}
	return secret, nil
}

// writeFileAtomic writes data to path with mode perm so that readers see either no file or the
// whole content: it writes and fsyncs a temporary file in the same directory, puts it in place
// and fsyncs the directory.
//
// With exclusive, an existing path is left alone and created reports false (the file is put in
// place with a hard link, which fails if path exists); on a file system without hard links it
// falls back to a rename, which is atomic but may replace a file created concurrently. Without
// exclusive, path is replaced by a rename.
func writeFileAtomic(path string, data []byte, perm os.FileMode, exclusive bool) (created bool, err error) {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return false, err
	}
	tmp := f.Name()
	defer os.Remove(tmp) // after a link or a failure; a no-op after a rename
	if err := f.Chmod(perm); err != nil {
		f.Close()
		return false, err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return false, err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return false, err
	}
	if err := f.Close(); err != nil {
		return false, err
	}
	if exclusive {
		err = os.Link(tmp, path)
		if errors.Is(err, fs.ErrExist) {
			return false, nil
		}
	}
	if !exclusive || err != nil {
		if err := os.Rename(tmp, path); err != nil {
			return false, err
		}
	}
	return true, syncDir(dir)
}

// syncDir makes a new directory entry durable. File systems that cannot fsync a directory
// (some refuse with EINVAL, Windows cannot open one for it) are not an error.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return nil
	}
	defer d.Close()
	if err := d.Sync(); err != nil && !errors.Is(err, syscall.EINVAL) && !errors.Is(err, errors.ErrUnsupported) {
		return err
	}
	return nil
}
