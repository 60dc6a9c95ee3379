// Package ident holds the rules for identifiers that the storage core and the wire protocol
// share: which strings are valid ids, and the one canonical id of each direct conversation.
//
// It is its own package, with no dependencies, so that both the state machine (package log,
// which decides) and the protocol (package proto, which clients build ids with) use one copy of
// the rules: a direct conversation id that a client computes is exactly the one the server
// checks. It sits under proto because the ids are the protocol's: a tool that speaks the
// protocol (syncctl) imports it without linking the state machine.
package ident

import (
	"crypto/sha256"
	"encoding/base64"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// MaxLen is the longest user, device, conversation or client message id accepted.
const MaxLen = 128

// Valid reports whether s may be used as a user, device, conversation or client message id:
// 1 to MaxLen bytes of printable ASCII except space. Storage keys embed ids followed by a 0x00
// separator, so ids must never contain 0x00; the narrower charset also keeps logs and metrics
// readable.
func Valid(s string) bool {
	if len(s) == 0 || len(s) > MaxLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] <= ' ' || s[i] > '~' {
			return false
		}
	}
	return true
}

// Prefixes of direct conversation ids. No group may take an id that starts with either, so an
// id of this shape always names the direct conversation of the users it encodes.
const (
	directPrefix       = "d:"
	directHashedPrefix = "dh:"
)

// DirectConv returns the id of the direct conversation of users a and b (in either order): the
// only id under which the server creates it. It is "d:" + lo + ":" + hi, lo and hi being the two
// user ids in byte order with "%" written "%25" and ":" written "%3A" (so that no two pairs share
// an id); when that is longer than MaxLen, it is "dh:" + the unpadded base64url SHA-256 of
// lo + "\n" + hi (43 characters). It returns "" when a or b is not a valid id or a == b.
//
//	DirectConv("bob", "alice") == "d:alice:bob"
func DirectConv(a, b string) string {
	if !Valid(a) || !Valid(b) || a == b {
		return ""
	}
	if b < a {
		a, b = b, a
	}
	id := directPrefix + escape(a) + ":" + escape(b)
	if len(id) <= MaxLen {
		return id
	}
	sum := sha256.Sum256([]byte(a + "\n" + b))
	return directHashedPrefix + base64.RawURLEncoding.EncodeToString(sum[:])
}

// ReservedForDirect reports whether conv has the shape of a direct conversation id, which only
// DirectConv may produce: such an id cannot name a group.
func ReservedForDirect(conv string) bool {
	return strings.HasPrefix(conv, directPrefix) || strings.HasPrefix(conv, directHashedPrefix)
}

var escaper = strings.NewReplacer("%", "%25", ":", "%3A")

func escape(uid string) string { return escaper.Replace(uid) }

// MaxSubLogs is the most sub-logs one user's stream can be split into (docs/MOVES.md,
// "Sub-logs"): sub-log 0 is the user's own log, 1 … MaxSubLogs-1 are named by SubLog.
const MaxSubLogs = 16

// SubLog returns the id of the log holding sub-log i of user uid's stream: uid itself for 0,
// otherwise uid, a space and i in decimal ("bot 3"). No user id contains a space, so no sub-log
// id is ever a user's, and a client cannot name one.
func SubLog(uid string, i int) string {
	if i == 0 {
		return uid
	}
	return uid + " " + strconv.Itoa(i)
}

// ParseLog returns the user and the sub-log index of a user-log id: (uid, 0) for a user id,
// (uid, i) for SubLog(uid, i). ok is false for anything else, including a sub-log index with a
// leading zero or one of MaxSubLogs or more, so every log has exactly one id.
func ParseLog(id string) (uid string, sub int, ok bool) {
	uid, num, split := strings.Cut(id, " ")
	if !split {
		return id, 0, Valid(id)
	}
	if !Valid(uid) || num == "" || num[0] == '0' || len(num) > 2 {
		return "", 0, false
	}
	sub, err := strconv.Atoi(num)
	if err != nil || sub < 1 || sub >= MaxSubLogs || num != strconv.Itoa(sub) {
		return "", 0, false
	}
	return uid, sub, true
}

// ValidLog reports whether id names a user's log: a user id, or one of its sub-logs.
func ValidLog(id string) bool {
	_, _, ok := ParseLog(id)
	return ok
}

// MaxReactionLen is the longest reaction, in bytes: an emoji sequence (a family with skin tones
// is about 40 bytes of UTF-8) or a short app-defined name.
const MaxReactionLen = 64

// ValidReaction reports whether s may be put on a message as a reaction: 1 to MaxReactionLen
// bytes of valid UTF-8 with no control characters, no spaces and no invisible format characters
// used alone. The server keeps reactions opaque (any emoji, or names an app defines), but never
// lets one carry a newline, an escape sequence or a string that renders as nothing.
func ValidReaction(s string) bool {
	if len(s) == 0 || len(s) > MaxReactionLen || !utf8.ValidString(s) {
		return false
	}
	visible := false
	for _, r := range s {
		switch {
		case unicode.IsControl(r) || unicode.IsSpace(r):
			return false
		case !unicode.Is(unicode.Cf, r) && !unicode.Is(unicode.Mn, r) && !unicode.Is(unicode.Me, r):
			visible = true // a zero-width joiner or a variation selector alone shows nothing
		}
	}
	return visible
}
