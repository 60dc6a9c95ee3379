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
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/syncd-dev/syncd/proto"
	"github.com/syncd-dev/syncd/raftstore/nodecert"
)

// Device tokens authenticate a connection: they name a user, one of its devices, an expiry and
// the key that signed them, with a secret only the servers (and the operator's token service)
// know. The format is stable (clients and tools store tokens; servers of several versions must
// accept the same tokens):
//
//	v1.<base64url(payload)>.<base64url(mac)>
//
//	payload = {"u":"<user>","d":"<device>","exp":<unix seconds>,"iat":<unix seconds>,"kid":"<key id>"}
//	mac     = HMAC-SHA256(secret, "v1." + base64url(payload))   (32 bytes)
//	key id  = the first 8 hex digits (lower case) of SHA-256(secret)        (KeyID)
//
// base64url is RFC 4648 §5 without padding, decoded strictly (no padding, no stray bits, no
// characters outside the alphabet, not even line breaks), so a token has exactly one accepted
// spelling. The payload is compact JSON with the keys in that order, no HTML escaping, no unknown
// keys (a future field that restricts a token needs "v2", since a "v1" verifier would ignore it).
// Ids follow proto.ValidID. A token is at most MaxTokenLen bytes; with the longest ids a minted
// token stays well under it.
//
// "kid" names the secret, so that a server can hold several (a Keyring) and one can be rotated
// out: tokens of a key no longer held are refused with a message saying so. Tokens minted before
// key ids existed lack "kid"; they verify against any key of the ring.
//
// A token is valid while now < exp and iat <= now + MaxClockSkew. iat records when the token was
// minted, which the server's maximum token lifetime (exp − iat) and device revocations ("tokens
// issued up to t") use; both are sound only if iat is not in the future, so a token issued
// beyond the skew the token service's clock and the server's may have is refused
// (ErrTokenNotYetValid): a token with iat a year ahead and a 29-day span would otherwise be valid
// for a year and a month, and outside every revocation made before its iat.

// MaxTokenLen is the longest token VerifyToken reads; longer input is rejected before decoding.
const MaxTokenLen = 1024

// MaxClockSkew is how far ahead of the verifier's clock a token's issue time (iat) may be: the
// token service and the servers are machines on NTP, which agree within milliseconds; half a
// minute leaves room for a clock being corrected without letting a token outlive its lifetime
// or a revocation by more than that. A revocation covers the tokens issued up to its second plus
// MaxClockSkew, since a server accepted those until then (syncd's revocation check).
const MaxClockSkew = 30 * time.Second

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
	// ErrTokenUnknownKey: the token names a key id the keyring does not hold (a retired key, or
	// one of another cluster). It wraps ErrTokenInvalid too: errors.Is matches both.
	ErrTokenUnknownKey = fmt.Errorf("%w: signed with a key this server does not hold", ErrTokenInvalid)
	// ErrTokenNotYetValid: the token is correctly signed but claims to be issued more than
	// MaxClockSkew after the verifier's clock (a token service whose clock is wrong, or a token
	// minted to outlive the lifetime cap and revocations). It wraps ErrTokenInvalid too.
	ErrTokenNotYetValid = fmt.Errorf("%w: issued in the future", ErrTokenInvalid)
)

// TokenClaims is what a token says. Times have whole-second precision on the wire: MintToken
// truncates them and VerifyToken returns them in UTC.
type TokenClaims struct {
	User    string    // user id (proto.ValidID)
	Device  string    // device id (proto.ValidID)
	Expires time.Time // the token is valid strictly before this instant
	Issued  time.Time // when the token was minted; MintToken uses the current time if zero
	// KeyID names the key that signed the token (KeyID of its secret); VerifyToken returns it,
	// "" for a token minted before key ids. MintToken ignores it and names the key it signs with.
	KeyID string
}

// tokenPayload is the JSON payload; the field order is the encoding order. Pointers detect
// missing keys when decoding.
type tokenPayload struct {
	U   *string `json:"u"`
	D   *string `json:"d"`
	Exp *int64  `json:"exp"`
	Iat *int64  `json:"iat"`
	Kid *string `json:"kid,omitempty"`
}

// MintToken signs c with secret, naming the key KeyID(secret). It fails if the secret is shorter
// than 16 bytes, an id is not a valid id (proto.ValidID), Expires is zero or not after Issued (in
// whole seconds). A zero Issued means now.
//
// MintToken is a pure function of its arguments (and the clock if Issued is zero); it is safe to
// call concurrently and does not retain secret.
func MintToken(secret []byte, c TokenClaims) (string, error) {
	if len(secret) < minSecretLen {
		return "", fmt.Errorf("syncd: token secret is %d bytes, need at least %d", len(secret), minSecretLen)
	}
	return mint(secret, c, KeyID(secret))
}

// mint signs c with secret, naming kid; an empty kid makes a token of the format before key ids
// (tests keep checking that those still verify).
func mint(secret []byte, c TokenClaims, kid string) (string, error) {
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
	p := tokenPayload{U: &c.User, D: &c.Device, Exp: &exp, Iat: &iat}
	if kid != "" {
		p.Kid = &kid
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false) // keeps '<', '>', '&' as one byte, so the longest ids fit MaxTokenLen
	if err := enc.Encode(p); err != nil {
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
// claims: Keyring.Verify with a ring of that one key. Errors:
//   - ErrTokenInvalid (wrapped): longer than MaxTokenLen, a byte outside [A-Za-z0-9_.-],
//     malformed, unknown version, bad signature, or a signed payload that does not decode to
//     valid claims; ErrTokenUnknownKey (which matches ErrTokenInvalid too) when the signature
//     does not match and the token names another key id;
//   - ErrTokenExpired (wrapped): correctly signed but now >= Expires. The claims are returned
//     too, so the caller can log whose token expired;
//   - ErrTokenNotYetValid (wrapped, matches ErrTokenInvalid too): correctly signed but Issued
//     is after now + MaxClockSkew; the claims are returned too;
//   - another error if secret is shorter than 16 bytes (a server misconfiguration, not the
//     client's fault).
//
// The signature is checked (in constant time) before anything in the payload is believed.
// VerifyToken is safe to call concurrently and does not retain its arguments.
func VerifyToken(secret []byte, token string, now time.Time) (TokenClaims, error) {
	ring, err := NewKeyring(secret)
	if err != nil {
		return TokenClaims{}, err
	}
	return ring.Verify(token, now)
}

// KeyID returns the key id of secret, which tokens signed with it name: the first 8 hex digits
// (lower case) of its SHA-256. It identifies a key without revealing anything useful about it.
func KeyID(secret []byte) string {
	sum := sha256.Sum256(secret)
	return hex.EncodeToString(sum[:4])
}

// Keyring holds the secrets a server accepts tokens of, by key id: the current one, which Mint
// signs with, and others it still (or already) accepts, so that a secret can be rotated without
// logging every device out (docs/OPERATIONS.md). It is immutable and safe for concurrent use.
type Keyring struct {
	current string
	keys    map[string][]byte // by key id
}

// NewKeyring returns a ring whose current key is current, also accepting others. Every secret
// must be at least 16 bytes and have a key id of its own (the same secret twice is one key).
func NewKeyring(current []byte, others ...[]byte) (*Keyring, error) {
	k := &Keyring{current: KeyID(current), keys: map[string][]byte{}}
	for _, secret := range append([][]byte{current}, others...) {
		if len(secret) < minSecretLen {
			return nil, fmt.Errorf("syncd: token secret is %d bytes, need at least %d", len(secret), minSecretLen)
		}
		id := KeyID(secret)
		if old, ok := k.keys[id]; ok && !bytes.Equal(old, secret) {
			return nil, fmt.Errorf("syncd: two token secrets share the key id %s; generate another", id)
		}
		k.keys[id] = bytes.Clone(secret)
	}
	return k, nil
}

// Current returns the key id Mint signs with.
func (k *Keyring) Current() string { return k.current }

// IDs returns the key ids of the ring, sorted.
func (k *Keyring) IDs() []string { return slices.Sorted(maps.Keys(k.keys)) }

// Mint signs c with the current key (MintToken).
func (k *Keyring) Mint(c TokenClaims) (string, error) { return mint(k.keys[k.current], c, k.current) }

// Verify checks token against the ring and its expiry and issue time against now, and returns
// its claims, with VerifyToken's errors: a token naming a key id checks against that key only,
// and a key id the ring does not hold is ErrTokenUnknownKey; a token without one (minted before
// key ids) checks against every key.
func (k *Keyring) Verify(token string, now time.Time) (TokenClaims, error) {
	signed, mac, err := splitToken(token)
	if err != nil {
		return TokenClaims{}, err
	}
	// Which key: the MAC is checked against each (a handful at most) before the payload is
	// believed; the payload is read first only to say why none matched.
	var key string
	for id, secret := range k.keys {
		if hmac.Equal(mac, tokenMAC(secret, signed)) {
			key = id
			break
		}
	}
	if key == "" {
		if p, err := decodePayload(signed); err == nil && p.Kid != nil && k.keys[*p.Kid] == nil {
			return TokenClaims{}, fmt.Errorf("%w: key id %.16q is not one of this server's token keys %v (retired, or minted for another cluster): get a new token",
				ErrTokenUnknownKey, *p.Kid, k.IDs())
		}
		return TokenClaims{}, fmt.Errorf("%w: bad signature", ErrTokenInvalid)
	}

	// Signed by us: what follows fails only for a payload minted by a buggy or foreign minter.
	p, err := decodePayload(signed)
	if err != nil {
		return TokenClaims{}, err
	}
	switch {
	case p.U == nil || p.D == nil || p.Exp == nil || p.Iat == nil:
		return TokenClaims{}, fmt.Errorf("%w: payload lacks u, d, exp or iat", ErrTokenInvalid)
	case !proto.ValidID(*p.U) || !proto.ValidID(*p.D):
		return TokenClaims{}, fmt.Errorf("%w: bad user or device id", ErrTokenInvalid)
	case *p.Exp <= *p.Iat:
		return TokenClaims{}, fmt.Errorf("%w: exp not after iat", ErrTokenInvalid)
	case p.Kid != nil && *p.Kid != key:
		return TokenClaims{}, fmt.Errorf("%w: names key %.16q but was signed with another", ErrTokenInvalid, *p.Kid)
	}
	c := TokenClaims{
		User:    *p.U,
		Device:  *p.D,
		Expires: time.Unix(*p.Exp, 0).UTC(),
		Issued:  time.Unix(*p.Iat, 0).UTC(),
	}
	if p.Kid != nil {
		c.KeyID = *p.Kid
	}
	if c.Issued.After(now.Add(MaxClockSkew)) {
		return c, fmt.Errorf("%w: issued at %s, later than this server's clock (%s) by more than %v: check the token service's clock",
			ErrTokenNotYetValid, c.Issued.Format(time.RFC3339), now.UTC().Format(time.RFC3339), MaxClockSkew)
	}
	if !now.Before(c.Expires) {
		return c, fmt.Errorf("%w at %s", ErrTokenExpired, c.Expires.Format(time.RFC3339))
	}
	return c, nil
}

// splitToken checks the outer shape of token and returns the signed part ("v1." + payload) and
// the decoded MAC.
func splitToken(token string) (signed string, mac []byte, err error) {
	if len(token) > MaxTokenLen {
		return "", nil, fmt.Errorf("%w: %d bytes, over %d", ErrTokenInvalid, len(token), MaxTokenLen)
	}
	// Only the base64url alphabet and the dots: Go's decoders skip '\r' and '\n' even in strict
	// mode, which would give a signed token a second spelling.
	for i := 0; i < len(token); i++ {
		if c := token[i]; !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_' || c == '.') {
			return "", nil, fmt.Errorf("%w: byte %#02x at %d", ErrTokenInvalid, c, i)
		}
	}
	version, rest, ok := strings.Cut(token, ".")
	if !ok {
		return "", nil, fmt.Errorf("%w: not a token", ErrTokenInvalid)
	}
	if version != tokenVersion {
		return "", nil, fmt.Errorf("%w: unknown version %.8q", ErrTokenInvalid, version)
	}
	payloadB64, macB64, ok := strings.Cut(rest, ".")
	if !ok || strings.Contains(macB64, ".") {
		return "", nil, fmt.Errorf("%w: want 3 dot-separated parts", ErrTokenInvalid)
	}
	mac, err = base64.RawURLEncoding.Strict().DecodeString(macB64)
	if err != nil || len(mac) != sha256.Size {
		return "", nil, fmt.Errorf("%w: malformed signature", ErrTokenInvalid)
	}
	return token[:len(tokenVersion)+1+len(payloadB64)], mac, nil
}

// decodePayload decodes the payload of signed ("v1." + base64url(payload)) strictly: one JSON
// object of the known keys, nothing after it.
func decodePayload(signed string) (tokenPayload, error) {
	payload, err := base64.RawURLEncoding.Strict().DecodeString(signed[len(tokenVersion)+1:])
	if err != nil {
		return tokenPayload{}, fmt.Errorf("%w: malformed payload", ErrTokenInvalid)
	}
	var p tokenPayload
	dec := json.NewDecoder(bytes.NewReader(payload))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		return tokenPayload{}, fmt.Errorf("%w: payload: %v", ErrTokenInvalid, err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return tokenPayload{}, fmt.Errorf("%w: payload: trailing data", ErrTokenInvalid)
	}
	return p, nil
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
	created, err := nodecert.WriteFileAtomic(path, []byte(hex.EncodeToString(secret)+"\n"), 0o600, true)
	if err != nil {
		return nil, fmt.Errorf("syncd: create token secret: %w", err)
	}
	if !created { // another process won the race: use its secret
		return readSecret(path)
	}
	return secret, nil
}

// ReadKeyFile reads a token secret an operator keeps in a file of their own (syncd's
// token_secret_file and token_keys, syncctl token -key-file): hex digits, surrounding white
// space allowed, at least 16 bytes' worth — the format of token.key, which holds 32.
func ReadKeyFile(path string) ([]byte, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	secret, err := hex.DecodeString(strings.TrimSpace(string(data)))
	if err != nil || len(secret) < minSecretLen {
		return nil, fmt.Errorf("%s is not a token secret (at least %d hex digits, as in %s in a data directory)", path, 2*minSecretLen, TokenKeyFile)
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
