package ident

import (
	"strings"
	"testing"
)

func TestDirectConv(t *testing.T) {
	long := strings.Repeat("u", 70)
	for _, c := range []struct{ a, b, want string }{
		{"alice", "bob", "d:alice:bob"},
		{"bob", "alice", "d:alice:bob"},
		{"x:y", "z", "d:x%3Ay:z"},
		{"x", "y:z", "d:x:y%3Az"},
		{"50%", "a", "d:50%25:a"},
		{long, long + "v", // openssl dgst -sha256 of lo "\n" hi, base64url
			"dh:" + "qBNlu87Ib1KmhVz57L9-WCKiKH0-JuSN3Qu_eOiPue4"},
		{"alice", "alice", ""},
		{"", "bob", ""},
		{"al ice", "bob", ""},
	} {
		if got := DirectConv(c.a, c.b); got != c.want {
			t.Errorf("DirectConv(%q, %q) = %q, want %q", c.a, c.b, got, c.want)
		}
		if c.want != "" && (!Valid(c.want) || !ReservedForDirect(c.want)) {
			t.Errorf("%q: not a valid id reserved for direct conversations", c.want)
		}
	}
}

// FuzzDirectConv: distinct pairs never share an id, and every id is valid and reserved.
func FuzzDirectConv(f *testing.F) {
	f.Add("x:y", "z", "x", "y:z")
	f.Add("a%3Ab", "c", "a:b", "c")
	f.Fuzz(func(t *testing.T, a, b, c, d string) {
		x, y := DirectConv(a, b), DirectConv(c, d)
		if x == "" || y == "" {
			return
		}
		if !Valid(x) || !ReservedForDirect(x) {
			t.Fatalf("DirectConv(%q, %q) = %q: not a valid reserved id", a, b, x)
		}
		same := (a == c && b == d) || (a == d && b == c)
		if (x == y) != same {
			t.Fatalf("pairs (%q,%q) and (%q,%q): ids %q and %q", a, b, c, d, x, y)
		}
	})
}

func TestReservedForDirect(t *testing.T) {
	for conv, want := range map[string]bool{"d:a:b": true, "dh:xyz": true, "g:team": false, "d": false, "dx:1": false, "team": false} {
		if ReservedForDirect(conv) != want {
			t.Errorf("ReservedForDirect(%q) != %v", conv, want)
		}
	}
}

func TestSubLogIDs(t *testing.T) {
	for _, c := range []struct {
		uid string
		sub int
	}{{"bot", 0}, {"bot", 1}, {"bot", MaxSubLogs - 1}, {strings.Repeat("x", MaxLen), 7}} {
		id := SubLog(c.uid, c.sub)
		uid, sub, ok := ParseLog(id)
		if !ok || uid != c.uid || sub != c.sub {
			t.Errorf("ParseLog(SubLog(%q, %d) = %q) = %q, %d, %v", c.uid, c.sub, id, uid, sub, ok)
		}
	}
	for _, bad := range []string{"", " ", "bot ", "bot 0", "bot 01", "bot 16", "bot 1 2", "bot -1", "bot x", " 1", "bot  1", "bot +1"} {
		if ValidLog(bad) {
			t.Errorf("ValidLog(%q) = true", bad)
		}
	}
}

func TestValidReaction(t *testing.T) {
	for _, ok := range []string{"👍", "❤️", "👨‍👩‍👧‍👦", "+1", "party_parrot", strings.Repeat("a", MaxReactionLen)} {
		if !ValidReaction(ok) {
			t.Errorf("ValidReaction(%q) = false, want true", ok)
		}
	}
	for _, bad := range []string{"", "a b", "a\nb", "\x1b[31m", "\u200d", "\ufe0f", "\xff", strings.Repeat("a", MaxReactionLen+1)} {
		if ValidReaction(bad) {
			t.Errorf("ValidReaction(%q) = true, want false", bad)
		}
	}
}
