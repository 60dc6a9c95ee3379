package auth

import (
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

var (
	testSecret = []byte("0123456789abcdef0123456789abcdef")
	testIssued = time.Unix(1_700_000_000, 0)
	testClaims = TokenClaims{User: "alice", Device: "phone-1", Issued: testIssued, Expires: testIssued.Add(24 * time.Hour)}
)

func mustMint(t testing.TB, secret []byte, c TokenClaims) string {
	t.Helper()
	tok, err := MintToken(secret, c)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func TestTokenRoundTrip(t *testing.T) {
	tok := mustMint(t, testSecret, testClaims)
	if !strings.HasPrefix(tok, "v1.") || strings.Count(tok, ".") != 2 {
		t.Fatalf("token %q does not look like v1.<payload>.<mac>", tok)
	}
	payload, err := base64.RawURLEncoding.DecodeString(strings.Split(tok, ".")[1])
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"u":"alice","d":"phone-1","exp":1700086400,"iat":1700000000,"kid":"3eb1bd43"}`; string(payload) != want {
		t.Errorf("payload %s, want %s (the format is stable)", payload, want)
	}
	got, err := VerifyToken(testSecret, tok, testIssued.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if got.User != testClaims.User || got.Device != testClaims.Device ||
		!got.Expires.Equal(testClaims.Expires) || !got.Issued.Equal(testClaims.Issued) || got.KeyID != KeyID(testSecret) {
		t.Errorf("claims %+v, want %+v", got, testClaims)
	}
}

// TestTokenGolden pins the format: a token minted by this version must verify forever, and so
// must one of the format before key ids (no "kid"), which devices may still hold. Both golden
// values were cross-checked with Python's hmac/hashlib/base64, i.e. from the spec alone.
func TestTokenGolden(t *testing.T) {
	const golden = "v1.eyJ1IjoiYWxpY2UiLCJkIjoicGhvbmUtMSIsImV4cCI6MTcwMDA4NjQwMCwiaWF0IjoxNzAwMDAwMDAwLCJraWQiOiIzZWIxYmQ0MyJ9.jOXDVu-MkyqlxRWpg2fDdMKWiKlkXeL31e7wU40jFv0"
	const legacy = "v1.eyJ1IjoiYWxpY2UiLCJkIjoicGhvbmUtMSIsImV4cCI6MTcwMDA4NjQwMCwiaWF0IjoxNzAwMDAwMDAwfQ.SkNKXe60Xgf6BheBvGvGQWNGEwKaKQ5RLnAfJCrgfHA"
	if KeyID(testSecret) != "3eb1bd43" {
		t.Errorf("KeyID = %s, want 3eb1bd43 (the first 8 hex digits of SHA-256 of the secret)", KeyID(testSecret))
	}
	if tok := mustMint(t, testSecret, testClaims); tok != golden {
		t.Errorf("MintToken = %s, want the golden %s", tok, golden)
	}
	if tok, err := mint(testSecret, testClaims, ""); err != nil || tok != legacy {
		t.Errorf("a token without key id = %s, %v; want %s", tok, err, legacy)
	}
	for name, tok := range map[string]string{"golden": golden, "without key id": legacy} {
		c, err := VerifyToken(testSecret, tok, testIssued)
		if err != nil || c.User != "alice" {
			t.Errorf("%s token: %+v, %v", name, c, err)
		}
	}
}

// TestKeyring: a ring mints with its current key and accepts tokens of every key it holds; a
// token of a key it does not hold is refused, naming the key id (the operator's clue that a key
// was retired); a token without key id verifies against any key of the ring.
func TestKeyring(t *testing.T) {
	old, cur, gone := bytes.Repeat([]byte{1}, 32), bytes.Repeat([]byte{2}, 32), bytes.Repeat([]byte{3}, 32)
	ring, err := NewKeyring(cur, old)
	if err != nil {
		t.Fatal(err)
	}
	if ring.Current() != KeyID(cur) || len(ring.IDs()) != 2 {
		t.Fatalf("ring: current %s, ids %v", ring.Current(), ring.IDs())
	}
	tok, err := ring.Mint(testClaims)
	if err != nil {
		t.Fatal(err)
	}
	if c, err := VerifyToken(cur, tok, testIssued); err != nil || c.KeyID != KeyID(cur) {
		t.Errorf("the ring's token: %+v, %v; want it signed with the current key", c, err)
	}
	for name, secret := range map[string][]byte{"current": cur, "old": old} {
		if c, err := ring.Verify(mustMint(t, secret, testClaims), testIssued); err != nil || c.KeyID != KeyID(secret) {
			t.Errorf("token of the %s key: %+v, %v", name, c, err)
		}
		legacy, _ := mint(secret, testClaims, "")
		if c, err := ring.Verify(legacy, testIssued); err != nil || c.KeyID != "" {
			t.Errorf("token of the %s key without key id: %+v, %v", name, c, err)
		}
	}
	_, err = ring.Verify(mustMint(t, gone, testClaims), testIssued)
	if !errors.Is(err, ErrTokenUnknownKey) || !errors.Is(err, ErrTokenInvalid) || !strings.Contains(err.Error(), KeyID(gone)) {
		t.Errorf("token of a retired key: %v, want ErrTokenUnknownKey naming %s", err, KeyID(gone))
	}
	legacyGone, _ := mint(gone, testClaims, "")
	if _, err := ring.Verify(legacyGone, testIssued); !errors.Is(err, ErrTokenInvalid) || errors.Is(err, ErrTokenUnknownKey) {
		t.Errorf("token without key id of no key of the ring: %v, want a bad signature", err)
	}
	// A token signed with one key of the ring but naming another is forged or broken.
	lying, _ := mint(old, testClaims, KeyID(cur))
	if _, err := ring.Verify(lying, testIssued); !errors.Is(err, ErrTokenInvalid) {
		t.Errorf("token naming another key of the ring: %v", err)
	}
	if _, err := NewKeyring(cur, []byte("short")); err == nil {
		t.Error("a short secret in the ring was accepted")
	}
	if r, err := NewKeyring(cur, cur); err != nil || len(r.IDs()) != 1 {
		t.Errorf("the same secret twice: %v, %v", r, err)
	}
}

func TestTokenSubSecondTimesTruncate(t *testing.T) {
	c := testClaims
	c.Issued = testIssued.Add(900 * time.Millisecond)
	c.Expires = testClaims.Expires.Add(900 * time.Millisecond)
	tok := mustMint(t, testSecret, c)
	if tok != mustMint(t, testSecret, testClaims) {
		t.Error("sub-second parts changed the token")
	}
}

func TestTokenIssuedDefaultsToNow(t *testing.T) {
	before := time.Now().Truncate(time.Second)
	tok := mustMint(t, testSecret, TokenClaims{User: "u", Device: "d", Expires: time.Now().Add(time.Hour)})
	got, err := VerifyToken(testSecret, tok, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if got.Issued.Before(before) || got.Issued.After(time.Now()) {
		t.Errorf("Issued %s, want about now", got.Issued)
	}
}

func TestTokenLongestIDsFit(t *testing.T) {
	// '"' and '\' are the ids' worst case in JSON (two bytes each).
	long := strings.Repeat(`"\`, 64)
	c := TokenClaims{User: long, Device: long, Issued: testIssued, Expires: time.Unix(1<<62, 0)}
	tok := mustMint(t, testSecret, c)
	got, err := VerifyToken(testSecret, tok, testIssued)
	if err != nil {
		t.Fatalf("%d-byte token: %v", len(tok), err)
	}
	if got.User != long || got.Device != long {
		t.Errorf("ids did not round-trip: %+v", got)
	}
	c.User = strings.Repeat("<", 128) // not escaped as \u003c
	if tok := mustMint(t, testSecret, c); len(tok) > MaxTokenLen {
		t.Errorf("token with '<' ids is %d bytes", len(tok))
	}
}

func TestMintTokenRejects(t *testing.T) {
	for name, tc := range map[string]struct {
		secret []byte
		c      TokenClaims
	}{
		"short secret":     {[]byte("short"), testClaims},
		"nil secret":       {nil, testClaims},
		"empty user":       {testSecret, TokenClaims{Device: "d", Expires: testClaims.Expires}},
		"empty device":     {testSecret, TokenClaims{User: "u", Expires: testClaims.Expires}},
		"space in user":    {testSecret, TokenClaims{User: "a b", Device: "d", Expires: testClaims.Expires}},
		"NUL in device":    {testSecret, TokenClaims{User: "u", Device: "d\x00", Expires: testClaims.Expires}},
		"non-ASCII device": {testSecret, TokenClaims{User: "u", Device: "é", Expires: testClaims.Expires}},
		"129-byte user":    {testSecret, TokenClaims{User: strings.Repeat("x", 129), Device: "d", Expires: testClaims.Expires}},
		"no expiry":        {testSecret, TokenClaims{User: "u", Device: "d"}},
		"expires at issue": {testSecret, TokenClaims{User: "u", Device: "d", Issued: testIssued, Expires: testIssued.Add(500 * time.Millisecond)}},
		"expires before":   {testSecret, TokenClaims{User: "u", Device: "d", Issued: testIssued, Expires: testIssued.Add(-time.Hour)}},
	} {
		if tok, err := MintToken(tc.secret, tc.c); err == nil {
			t.Errorf("%s: minted %q", name, tok)
		}
	}
}

// forge signs an arbitrary payload with the right secret, to reach the checks after the MAC.
func forge(secret []byte, version, payload string) string {
	signed := version + "." + base64.RawURLEncoding.EncodeToString([]byte(payload))
	return signed + "." + base64.RawURLEncoding.EncodeToString(tokenMAC(secret, signed))
}

// nonCanonical sets the unused low bits of the last character of an unpadded base64url string
// whose length is 43 (32 bytes): lenient decoders give the same bytes, strict ones refuse it.
func nonCanonical(s string) string {
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
	last := strings.IndexByte(alphabet, s[len(s)-1])
	return s[:len(s)-1] + string(alphabet[last|1])
}

func TestVerifyTokenRejects(t *testing.T) {
	tok := mustMint(t, testSecret, testClaims)
	parts := strings.Split(tok, ".")
	otherPayload := base64.RawURLEncoding.EncodeToString([]byte(`{"u":"mallory","d":"phone-1","exp":1700086400,"iat":1700000000}`))
	flip := func(s string, i int) string { // change one base64 character
		b := []byte(s)
		if b[i] == 'A' {
			b[i] = 'B'
		} else {
			b[i] = 'A'
		}
		return string(b)
	}
	cases := map[string]string{
		"empty":                 "",
		"garbage":               "hello world",
		"one part":              "v1",
		"two parts":             "v1." + parts[1],
		"four parts":            tok + ".x",
		"wrong version":         "v2." + parts[1] + "." + parts[2],
		"no version":            "." + parts[1] + "." + parts[2],
		"upper-case version":    "V1." + parts[1] + "." + parts[2],
		"payload replaced":      "v1." + otherPayload + "." + parts[2],
		"payload char flipped":  "v1." + flip(parts[1], 5) + "." + parts[2],
		"payload truncated":     "v1." + parts[1][:len(parts[1])-1] + "." + parts[2],
		"mac char flipped":      "v1." + parts[1] + "." + flip(parts[2], 3),
		"mac truncated":         "v1." + parts[1] + "." + parts[2][:len(parts[2])-2],
		"mac empty":             "v1." + parts[1] + ".",
		"mac padded":            tok + "=",
		"mac standard base64":   "v1." + parts[1] + "." + base64.StdEncoding.EncodeToString(tokenMAC(testSecret, "v1."+parts[1])),
		"mac non-canonical":     "v1." + parts[1] + "." + nonCanonical(parts[2]),
		"too long":              tok + strings.Repeat("A", MaxTokenLen),
		"CR in mac":             "v1." + parts[1] + "." + parts[2][:4] + "\r" + parts[2][4:], // found by the fuzzer
		"LF in payload":         "v1." + parts[1][:4] + "\n" + parts[1][4:] + "." + parts[2],
		"space at the end":      tok + " ",
		"signed: not JSON":      forge(testSecret, "v1", "not json"),
		"signed: missing iat":   forge(testSecret, "v1", `{"u":"a","d":"b","exp":10}`),
		"signed: unknown field": forge(testSecret, "v1", `{"u":"a","d":"b","exp":10,"iat":1,"admin":true}`),
		"signed: trailing data": forge(testSecret, "v1", `{"u":"a","d":"b","exp":10,"iat":1}{}`),
		"signed: bad user id":   forge(testSecret, "v1", `{"u":"a b","d":"b","exp":10,"iat":1}`),
		"signed: exp <= iat":    forge(testSecret, "v1", `{"u":"a","d":"b","exp":10,"iat":10}`),
		"signed: float exp":     forge(testSecret, "v1", `{"u":"a","d":"b","exp":1e3,"iat":1}`),
		"signed: other key id":  forge(testSecret, "v1", `{"u":"a","d":"b","exp":10,"iat":1,"kid":"00000000"}`),
		"signed: kid a number":  forge(testSecret, "v1", `{"u":"a","d":"b","exp":10,"iat":1,"kid":7}`),
		"signed v2":             forge(testSecret, "v2", `{"u":"a","d":"b","exp":10,"iat":1}`),
	}
	for name, tok := range cases {
		if _, err := VerifyToken(testSecret, tok, testIssued); !errors.Is(err, ErrTokenInvalid) {
			t.Errorf("%s: err %v, want ErrTokenInvalid", name, err)
		}
	}
	// The non-canonical MAC really decodes to the same bytes without Strict.
	if mac, err := base64.RawURLEncoding.DecodeString(nonCanonical(parts[2])); err != nil || !bytes.Equal(mac, tokenMAC(testSecret, "v1."+parts[1])) {
		t.Errorf("nonCanonical helper: %x, %v", mac, err)
	}
	// The forged helper itself is right: the same payload with good fields verifies.
	if _, err := VerifyToken(testSecret, forge(testSecret, "v1", `{"u":"a","d":"b","exp":10,"iat":1}`), time.Unix(5, 0)); err != nil {
		t.Errorf("forge helper: %v", err)
	}
}

func TestVerifyTokenWrongSecret(t *testing.T) {
	tok := mustMint(t, testSecret, testClaims)
	other := bytes.Clone(testSecret)
	other[0] ^= 1
	if _, err := VerifyToken(other, tok, testIssued); !errors.Is(err, ErrTokenInvalid) {
		t.Errorf("err %v, want ErrTokenInvalid", err)
	}
	if _, err := VerifyToken(nil, tok, testIssued); err == nil || errors.Is(err, ErrTokenInvalid) {
		t.Errorf("nil secret: err %v, want a configuration error", err)
	}
}

// TestVerifyTokenIssuedInTheFuture: a token issued up to MaxClockSkew after the verifier's clock
// verifies; one issued later is ErrTokenNotYetValid (which is ErrTokenInvalid too), whatever its
// expiry, so iat bounds what the lifetime cap and revocations rely on.
func TestVerifyTokenIssuedInTheFuture(t *testing.T) {
	tok := mustMint(t, testSecret, testClaims)
	if _, err := VerifyToken(testSecret, tok, testIssued.Add(-MaxClockSkew)); err != nil {
		t.Errorf("issued exactly MaxClockSkew ahead: %v", err)
	}
	for _, now := range []time.Time{testIssued.Add(-MaxClockSkew - time.Second), testIssued.Add(-365 * 24 * time.Hour)} {
		c, err := VerifyToken(testSecret, tok, now)
		if !errors.Is(err, ErrTokenNotYetValid) || !errors.Is(err, ErrTokenInvalid) {
			t.Errorf("verified at %s, %v before its iat: err %v, want ErrTokenNotYetValid", now, testIssued.Sub(now), err)
		}
		if c.User != "alice" {
			t.Errorf("claims not returned: %+v", c)
		}
	}
}

func TestVerifyTokenExpired(t *testing.T) {
	tok := mustMint(t, testSecret, testClaims)
	exp := testClaims.Expires
	if _, err := VerifyToken(testSecret, tok, exp.Add(-time.Nanosecond)); err != nil {
		t.Errorf("just before expiry: %v", err)
	}
	for _, now := range []time.Time{exp, exp.Add(time.Nanosecond), exp.Add(time.Hour)} {
		c, err := VerifyToken(testSecret, tok, now)
		if !errors.Is(err, ErrTokenExpired) {
			t.Errorf("at %s: err %v, want ErrTokenExpired", now, err)
		}
		if c.User != "alice" || c.Device != "phone-1" {
			t.Errorf("expired token's claims not returned: %+v", c)
		}
	}
	// A bad signature wins over expiry: nothing unsigned is believed.
	other := bytes.Repeat([]byte{7}, 32)
	if _, err := VerifyToken(other, tok, exp.Add(time.Hour)); !errors.Is(err, ErrTokenInvalid) {
		t.Errorf("expired token with the wrong secret: err %v, want ErrTokenInvalid", err)
	}
}

func TestTokenSecretCreatedOnce(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data") // created on demand
	s1, err := LoadOrCreateSecret(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(s1) != 32 || bytes.Equal(s1, make([]byte, 32)) {
		t.Fatalf("secret %x", s1)
	}
	s2, err := LoadOrCreateSecret(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(s1, s2) {
		t.Errorf("second call returned another secret")
	}
	path := filepath.Join(dir, TokenKeyFile)
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if want := hex.EncodeToString(s1) + "\n"; string(raw) != want {
		t.Errorf("file holds %q, want %q", raw, want)
	}
	if runtime.GOOS != "windows" {
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if perm := fi.Mode().Perm(); perm != 0o600 {
			t.Errorf("mode %v, want 0600", perm)
		}
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("dir holds %d entries, want only %s (temporary file left?)", len(entries), TokenKeyFile)
	}
	// A token minted with the loaded secret verifies with a reloaded one.
	tok := mustMint(t, s1, testClaims)
	if _, err := VerifyToken(s2, tok, testIssued); err != nil {
		t.Error(err)
	}
}

func TestTokenSecretConcurrentCreate(t *testing.T) {
	dir := t.TempDir()
	const n = 8
	secrets := make([][]byte, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			s, err := LoadOrCreateSecret(dir)
			if err != nil {
				t.Error(err)
			}
			secrets[i] = s
		})
	}
	wg.Wait()
	for i := 1; i < n; i++ {
		if !bytes.Equal(secrets[i], secrets[0]) {
			t.Fatalf("callers %d and 0 got different secrets", i)
		}
	}
}

func TestTokenSecretRefusesBadFile(t *testing.T) {
	for name, content := range map[string]string{
		"empty":     "",
		"short":     strings.Repeat("ab", 16) + "\n",
		"long":      strings.Repeat("ab", 33) + "\n",
		"not hex":   strings.Repeat("zz", 32) + "\n",
		"raw bytes": string(bytes.Repeat([]byte{0xff}, 32)),
	} {
		dir := t.TempDir()
		path := filepath.Join(dir, TokenKeyFile)
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := LoadOrCreateSecret(dir)
		if err == nil || !strings.Contains(err.Error(), "delete it") {
			t.Errorf("%s: err %v, want a refusal telling the operator what to do", name, err)
		}
		if raw, _ := os.ReadFile(path); string(raw) != content {
			t.Errorf("%s: the bad file was changed", name)
		}
	}
	// Upper-case hex and surrounding white space are fine (an operator may have edited it).
	dir := t.TempDir()
	want := bytes.Repeat([]byte{0xab}, 32)
	if err := os.WriteFile(filepath.Join(dir, TokenKeyFile), []byte("  "+strings.ToUpper(hex.EncodeToString(want))+"\r\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got, err := LoadOrCreateSecret(dir); err != nil || !bytes.Equal(got, want) {
		t.Errorf("got %x, %v; want %x", got, err, want)
	}
}

func FuzzVerifyToken(f *testing.F) {
	tok := mustMint(f, testSecret, testClaims)
	long := strings.Repeat(`"\`, 64)
	f.Add(tok)
	f.Add(mustMint(f, testSecret, TokenClaims{User: long, Device: "~", Issued: time.Unix(0, 0), Expires: time.Unix(1, 0)}))
	for _, n := range []int{0, 1, 2, 3, 10, len(tok) / 2, len(tok) - 44, len(tok) - 43, len(tok) - 1} {
		f.Add(tok[:n])
	}
	f.Add(tok + "=")
	f.Add(tok[:len(tok)-20] + "\r" + tok[len(tok)-20:])
	f.Add(strings.Replace(tok, "v1", "v2", 1))
	f.Add(forge(testSecret, "v1", `{"u":"a","d":"b","exp":10,"iat":1}`))
	f.Add(forge(testSecret, "v1", `{"u":"a","d":"b","exp":10}`))
	f.Fuzz(func(t *testing.T, s string) {
		c, err := VerifyToken(testSecret, s, testIssued)
		switch {
		case err == nil, errors.Is(err, ErrTokenExpired):
			// Only a canonical token verifies: re-minting its claims must give the same bytes
			// (no second spelling of a signed token, no malleability).
			if again, err := mint(testSecret, c, c.KeyID); err == nil && again != s {
				t.Errorf("accepted %q, but its claims mint %q", s, again)
			}
		case errors.Is(err, ErrTokenInvalid):
		default:
			t.Errorf("error %v is neither ErrTokenInvalid nor ErrTokenExpired", err)
		}
	})
}
