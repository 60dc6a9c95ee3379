package adminapi

import (
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"strings"
)

// The admin token is the bearer credential of the admin HTTP API: every request to /v1/... and
// /debug/pprof/ (and to /metrics if the node is configured so) carries it as
//
//	Authorization: Bearer <token>
//
// A node keeps it in a file: by default TokenFile in its data directory, created on first start
// with 32 random bytes as 64 hex digits and mode 0600 (syncd/auth.LoadOrCreateAdminToken), or
// one the operator names (syncd -admin-token-file). The file holds the token and optional
// surrounding white space; anyone who can read it can operate the node.
const (
	// TokenFile is the admin token's file name in a data directory.
	TokenFile = "admin.token"
	// TokenEnv is the environment variable syncctl reads the admin token from (the token itself,
	// not a file name).
	TokenEnv = "SYNCD_ADMIN_TOKEN"
	// MinTokenLen and MaxTokenLen bound a token's length in bytes: 32 characters carry at least
	// 128 random bits in hex, and a token fits an HTTP header with room to spare.
	MinTokenLen = 32
	MaxTokenLen = 512
)

// Codes of the admin API's refusals of a request as such (OpsError.Code), before any endpoint
// sees it.
const (
	// CodeUnauthenticated (401): the admin token is missing or not this node's.
	CodeUnauthenticated = "unauthenticated"
	// CodeCrossOrigin (403): the request comes from a web page of another origin (its Origin or
	// Sec-Fetch-Site header says so). The admin API serves no browser pages.
	CodeCrossOrigin = "cross_origin"
	// CodeUnsupportedMediaType (415): a request that may change state has a body type an HTML
	// form can send (application/x-www-form-urlencoded, multipart/form-data, text/plain).
	CodeUnsupportedMediaType = "unsupported_media_type"
	// CodeTooLarge (413): the request's body is over the admin server's limit (64 KiB); no
	// endpoint takes a body.
	CodeTooLarge = "too_large"
)

// ParseToken checks the content of an admin token file and returns the token without the white
// space around it: MinTokenLen to MaxTokenLen characters of RFC 6750's token alphabet
// (A-Z a-z 0-9 - . _ ~ + / =), so that it travels in an Authorization header as it is.
func ParseToken(content string) (string, error) {
	tok := strings.TrimSpace(content)
	ok := len(tok) >= MinTokenLen && len(tok) <= MaxTokenLen
	for i := 0; ok && i < len(tok); i++ {
		c := tok[i]
		ok = 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte("-._~+/=", c) >= 0
	}
	if !ok {
		return "", fmt.Errorf("not an admin token: want %d to %d characters of A-Z a-z 0-9 - . _ ~ + / = "+
			"(syncd generates 64 hex digits; make one with: openssl rand -hex 32)", MinTokenLen, MaxTokenLen)
	}
	return tok, nil
}

// ReadToken reads and checks (ParseToken) the admin token kept in the file at path. A missing
// file yields an error matching fs.ErrNotExist; every error names path.
func ReadToken(path string) (string, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return "", fmt.Errorf("admin token file %s does not exist: %w", path, err)
		}
		return "", fmt.Errorf("read admin token: %w", err)
	}
	tok, err := ParseToken(string(raw))
	if err != nil {
		return "", fmt.Errorf("admin token file %s: %w", path, err)
	}
	return tok, nil
}

// Authorize makes req present token as the admin API's bearer credential.
func Authorize(req *http.Request, token string) {
	req.Header.Set("Authorization", "Bearer "+token)
}
