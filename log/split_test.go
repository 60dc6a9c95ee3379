package log

import (
	"errors"
	"fmt"
	"slices"
	"testing"
)

// convsOnSubLogs returns one conversation id for each of k sub-logs.
func convsOnSubLogs(k int) []string {
	out := make([]string, k)
	found := 0
	for i := 0; found < k; i++ {
		c := fmt.Sprint("g", i)
		if j := SubLogOf(c, k); out[j] == "" {
			out[j], found = c, found+1
		}
	}
	return out
}

// TestSplitUser: a source shard's outbox sends a split user's records up to the split to the
// user's own log and later ones to their conversation's sub-log, the same for every read and
// after a reopen; the other recipients are untouched; the sub-logs are ordinary logs, which
// count the groups they receive the entries of, below zero too; a split into another number of
// sub-logs is refused and a repeat changes nothing.
func TestSplitUser(t *testing.T) {
	const k = 3
	s := newMemShard(t, 1)
	var i uint64
	at := func() Stamp { i++; return Stamp{Index: i, Time: int64(1000 + i)} }
	convs := convsOnSubLogs(k)
	send := func(conv string, kind Kind, members ...string) {
		st := at()
		appendOK(t, s, st, Append{Conv: conv, Sender: "ann", ClientMsgID: fmt.Sprint("m", st.Index), Kind: kind, Members: members, Body: []byte("x")})
	}
	for _, c := range convs {
		send(c, KindGroupCreate, "bot", "cat")
	}
	split := func(n int) (p uint64, err error) {
		_, aerr := apply(t, s, at(), func(tx *Tx) error { p, err = tx.SplitUser("bot", n); return err })
		return p, errors.Join(err, aerr)
	}
	if p, err := split(k); err != nil || p != k {
		t.Fatalf("split: %d, %v; want %d", p, err, k)
	}
	if p, err := split(k); err != nil || p != k {
		t.Fatalf("split repeated: %d, %v", p, err)
	}
	if _, err := split(k + 1); !errors.Is(err, ErrInvalid) {
		t.Fatalf("split into another number of sub-logs: %v", err)
	}
	for _, c := range convs {
		send(c, KindMessage)
	}
	send(convs[1], KindMemberRemove, "bot") // bot leaves a group it joined before the split
	check := func(s *Shard) {
		t.Helper()
		items, err := s.ReadOutbox(1, 100)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, it := range items {
			if !slices.IsSorted(it.Recipients) {
				t.Errorf("recipients at %d not sorted: %q", it.Pos, it.Recipients)
			}
			got = append(got, fmt.Sprintf("%d:%q", it.Pos, it.Recipients))
		}
		want := []string{
			`1:["ann" "bot" "cat"]`, `2:["ann" "bot" "cat"]`, `3:["ann" "bot" "cat"]`, // before the split
			`4:["ann" "bot" "cat"]`, `5:["ann" "bot 1" "cat"]`, `6:["ann" "bot 2" "cat"]`,
			`7:["ann" "bot 1" "cat"]`,
		}
		if !slices.Equal(got, want) {
			t.Errorf("recipients\n got %v\nwant %v", got, want)
		}
	}
	check(s)
	reopened, err := OpenShard(s.db, 1)
	if err != nil {
		t.Fatal(err)
	}
	check(reopened)

	// Delivered to a shard of their own, the sub-logs are logs like any other.
	dest := newMemShard(t, 2)
	b := outboxBatch(t, s, 0, 7)
	mustApply(t, dest, Stamp{Index: 1, Time: 1}, func(tx *Tx) error { _, err := tx.Deliver(Stamp{Index: 1, Time: 1}, b); return err })
	for _, c := range []struct {
		log    string
		n      int
		groups int
	}{{"bot", 4, 3}, {"bot 1", 2, -1}, {"bot 2", 1, 0}, {"cat", 7, 3}} {
		info, entries := readAll(t, dest, c.log, false)
		if len(entries) != c.n || info.Head != Position(c.n) {
			t.Errorf("%s: %d entries, head %d; want %d", c.log, len(entries), info.Head, c.n)
		}
		if n, err := dest.UserGroups([]string{c.log}); err != nil || n[0] != c.groups {
			t.Errorf("%s counts %v groups (%v); want %d", c.log, n, err, c.groups)
		}
	}
	if _, err := split(1); !errors.Is(err, ErrInvalid) {
		t.Errorf("a split into one sub-log: %v", err)
	}
}

func TestSubLogOfIsStable(t *testing.T) {
	// Persisted layout: these must never change.
	for _, c := range []struct {
		conv string
		k, j int
	}{{"g0", 3, 0}, {"g1", 3, 1}, {"g2", 3, 1}, {"g0", 16, 10}, {"d:alice:bob", 16, 12}, {"support", 16, 0}} {
		if got := SubLogOf(c.conv, c.k); got != c.j {
			t.Errorf("SubLogOf(%q, %d) = %d, want %d", c.conv, c.k, got, c.j)
		}
	}
	if SubLogOf("anything", 1) != 0 {
		t.Error("one sub-log is the user's own")
	}
}
