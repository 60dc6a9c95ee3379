package log

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2"

	"github.com/syncd-dev/syncd/proto/ident"
)

// try appends req (with the test threshold) and delivers its outbox record, returning the error.
func (w *largeWorld) try(req Append) (AppendResult, error) {
	w.t.Helper()
	req.LargeGroupThreshold = testThreshold
	res, err := w.append(req)
	if err == nil {
		w.deliver()
	}
	return res, err
}

// entries returns uid's log as "seq kind conv/conv_seq [payload] [folded by n]" strings.
func (w *largeWorld) entries(uid string) []string {
	w.t.Helper()
	_, es := readAll(w.t, w.s, uid, false)
	var out []string
	for _, e := range es {
		s := fmt.Sprintf("%d %v %s/%d", e.Seq, e.Kind, e.Conv, e.ConvSeq)
		switch {
		case e.Folded != 0:
			s += fmt.Sprintf(" folded by %d", e.Folded)
		case e.Kind == KindEdit:
			s += " " + string(e.Body)
		case e.Kind == KindReaction && e.Remove:
			s += " -" + e.Reaction
		case e.Kind == KindReaction:
			s += " +" + e.Reaction
		case e.Kind == KindReceipt || e.Kind == KindDelivered:
			s += fmt.Sprint(" ", e.ReadUpTo)
		}
		out = append(out, s)
	}
	return out
}

// TestEditsAndReactions: only a message's author edits it, anyone in the conversation reacts;
// neither applies to a recalled message, another conversation's, or something not a message;
// both are conversation entries every member receives, and a reaction's dedup is by its payload
// too (the same cmid with another reaction is a conflict).
func TestEditsAndReactions(t *testing.T) {
	w := newLargeWorld(t)
	dm := ident.DirectConv("ann", "bob")
	m := w.do(Append{Conv: dm, Sender: "ann", ClientMsgID: "m1", Kind: KindMessage, Body: []byte("helo"), Members: []string{"ann", "bob"}})
	edit := func(sender, cmid, body string, target MsgID) (AppendResult, error) {
		return w.try(Append{Conv: dm, Sender: sender, ClientMsgID: cmid, Kind: KindEdit, Target: target, Body: []byte(body)})
	}
	react := func(sender, cmid, reaction string, remove bool, target MsgID) (AppendResult, error) {
		return w.try(Append{Conv: dm, Sender: sender, ClientMsgID: cmid, Kind: KindReaction, Target: target, Reaction: reaction, Remove: remove})
	}
	if _, err := edit("bob", "e0", "hacked", m.MsgID); !errors.Is(err, ErrNotSender) {
		t.Fatalf("bob edits ann's message: %v, want ErrNotSender", err)
	}
	e1, err := edit("ann", "e1", "hello", m.MsgID)
	if err != nil || e1.ConvSeq != 2 {
		t.Fatalf("ann's edit: %+v, %v", e1, err)
	}
	if again, err := edit("ann", "e1", "hello", m.MsgID); err != nil || !again.Duplicate || again.MsgID != e1.MsgID {
		t.Fatalf("the edit's resend: %+v, %v", again, err)
	}
	if _, err := edit("ann", "e1", "hello!", m.MsgID); !errors.Is(err, ErrConflict) {
		t.Fatalf("the cmid again with another body: %v, want ErrConflict", err)
	}
	if _, err := edit("ann", "e2", "x", e1.MsgID); !errors.Is(err, ErrNoMessage) {
		t.Fatalf("an edit of the edit: %v, want ErrNoMessage", err)
	}
	if _, err := react("bob", "r1", "👍", false, m.MsgID); err != nil {
		t.Fatal(err)
	}
	if _, err := react("bob", "r1", "👎", false, m.MsgID); !errors.Is(err, ErrConflict) {
		t.Fatalf("the reaction's cmid with another reaction: %v, want ErrConflict", err)
	}
	for _, bad := range []string{"", "a b", "\u200d", string(bytes.Repeat([]byte("x"), ident.MaxReactionLen+1))} {
		if _, err := react("bob", "rb", bad, false, m.MsgID); !errors.Is(err, ErrInvalid) {
			t.Errorf("reaction %q: %v, want ErrInvalid", bad, err)
		}
	}
	if _, err := react("cat", "rc", "👍", false, m.MsgID); !errors.Is(err, ErrNotMember) {
		t.Errorf("a stranger reacts: %v, want ErrNotMember", err)
	}
	w.do(Append{Conv: "g", Sender: "ann", ClientMsgID: "g", Kind: KindGroupCreate, Members: []string{"bob"}})
	if _, err := w.try(Append{Conv: "g", Sender: "bob", ClientMsgID: "rx", Kind: KindReaction, Target: m.MsgID, Reaction: "👍"}); !errors.Is(err, ErrNoMessage) {
		t.Errorf("a reaction in another conversation than its message's: %v, want ErrNoMessage", err)
	}
	if _, err := w.try(Append{Conv: dm, Sender: "ann", ClientMsgID: "recall", Kind: KindRecall, Target: m.MsgID}); err != nil {
		t.Fatal(err)
	}
	if _, err := edit("ann", "e3", "after", m.MsgID); !errors.Is(err, ErrAlreadyRecalled) {
		t.Errorf("an edit of a recalled message: %v, want ErrAlreadyRecalled", err)
	}
	if _, err := react("bob", "r3", "👍", true, m.MsgID); !errors.Is(err, ErrAlreadyRecalled) {
		t.Errorf("a reaction to a recalled message: %v, want ErrAlreadyRecalled", err)
	}
	_, conv := readAll(t, w.s, dm, true)
	var kinds []string
	for _, e := range conv {
		kinds = append(kinds, e.Kind.String())
	}
	if want := []string{"message", "edit", "reaction", "recall"}; !slices.Equal(kinds, want) {
		t.Errorf("the conversation log: %v, want %v", kinds, want)
	}
	if r := conv[2]; r.Reaction != "👍" || r.Remove || r.Target != m.MsgID || r.Sender != "bob" {
		t.Errorf("the reaction entry: %+v", r)
	}
}

// TestFoldSuperseded: in a user log, an entry a later one supersedes becomes a stub at the same
// position (nothing is skipped, nothing renumbered): receipts and delivered reports by the
// next of the same reader, edits by the next edit or the recall, reactions by the next entry of
// the same reaction. Messages and the latest of each stay whole; the stub keeps the hash of the
// body it dropped.
func TestFoldSuperseded(t *testing.T) {
	w := newLargeWorld(t)
	dm := ident.DirectConv("ann", "bob")
	m := w.do(Append{Conv: dm, Sender: "ann", ClientMsgID: "m1", Kind: KindMessage, Body: []byte("helo"), Members: []string{"ann", "bob"}})
	w.do(Append{Conv: dm, Sender: "ann", ClientMsgID: "e1", Kind: KindEdit, Target: m.MsgID, Body: []byte("hello")})
	w.do(Append{Conv: dm, Sender: "bob", ClientMsgID: "r1", Kind: KindReceipt, ReadUpTo: 2})
	w.do(Append{Conv: dm, Sender: "bob", ClientMsgID: "x1", Kind: KindReaction, Target: m.MsgID, Reaction: "👍"})
	w.do(Append{Conv: dm, Sender: "bob", ClientMsgID: "x2", Kind: KindReaction, Target: m.MsgID, Reaction: "🎉"})
	w.do(Append{Conv: dm, Sender: "ann", ClientMsgID: "e2", Kind: KindEdit, Target: m.MsgID, Body: []byte("hello!")})
	w.do(Append{Conv: dm, Sender: "bob", ClientMsgID: "x3", Kind: KindReaction, Target: m.MsgID, Reaction: "👍", Remove: true})
	w.do(Append{Conv: dm, Sender: "bob", ClientMsgID: "r2", Kind: KindReceipt, ReadUpTo: 7})
	w.do(delivered(dm, "ann", 8))
	w.do(delivered(dm, "ann", 9))
	want := []string{
		"1 message " + dm + "/1",
		"2 edit " + dm + "/2 folded by 6",
		"3 receipt " + dm + "/3 folded by 8",
		"4 reaction " + dm + "/4 folded by 7",
		"5 reaction " + dm + "/5 +🎉",
		"6 edit " + dm + "/6 hello!",
		"7 reaction " + dm + "/7 -👍",
		"8 receipt " + dm + "/8 7",
		"9 delivered " + dm + "/9 folded by 10",
		"10 delivered " + dm + "/10 9",
	}
	for _, uid := range []string{"ann", "bob"} {
		if got := w.entries(uid); !slices.Equal(got, want) {
			t.Errorf("%s's log:\n%s\nwant\n%s", uid, fmtLines(got), fmtLines(want))
		}
	}
	_, es := readAll(t, w.s, "bob", false)
	if h := sha256.Sum256([]byte("hello")); !bytes.Equal(es[1].BodyHash, h[:]) || es[1].Body != nil || es[1].Target != m.MsgID {
		t.Errorf("the folded edit: %+v, want the hash of its body and its target", es[1])
	}
	if es[2].ReadUpTo != 0 || es[2].Sender != "bob" || es[2].MsgID.IsZero() {
		t.Errorf("the folded receipt: %+v, want its ids without its mark", es[2])
	}
	// The recall folds the last edit: no text of a recalled message stays in a log's copies of
	// its edits. It is itself never folded.
	w.do(Append{Conv: dm, Sender: "ann", ClientMsgID: "rc", Kind: KindRecall, Target: m.MsgID})
	got := w.entries("bob")
	if got[5] != "6 edit "+dm+"/6 folded by 11" || got[10] != "11 recall "+dm+"/11" {
		t.Errorf("after the recall:\n%s", fmtLines(got))
	}
	// The conversation log keeps every entry whole.
	_, conv := readAll(t, w.s, dm, true)
	for _, e := range conv {
		if e.Folded != 0 {
			t.Errorf("conversation entry %d is folded", e.ConvSeq)
		}
	}
}

// TestFoldAfterMove: a user's fold index moves with its log, so the first receipt after a move
// folds the last one before it.
func TestFoldAfterMove(t *testing.T) {
	const move MoveID = 9
	w := newLargeWorld(t)
	dm := ident.DirectConv("ann", "bob")
	w.do(Append{Conv: dm, Sender: "ann", ClientMsgID: "m1", Kind: KindMessage, Body: []byte("hi"), Members: []string{"ann", "bob"}})
	w.do(Append{Conv: dm, Sender: "bob", ClientMsgID: "r1", Kind: KindReceipt, ReadUpTo: 1})
	dst, at := w.moveUser(move, "bob")
	mustApply(t, w.s, w.at(), func(tx *Tx) error { return tx.DropUser(move, "bob") })
	if n := countTable(t, w.s, tagFold); n != 1 { // ann's index of bob's receipt stays
		t.Errorf("the source holds %d fold records after the drop, want 1", n)
	}
	// The next receipt, delivered to bob's new shard (by a fan-out worker from another source).
	b := &DeliveryBatch{Source: 77, Prev: 0, Last: 1, Items: []Delivery{{Pos: 1, Users: []string{"bob"}, Entry: Entry{
		Kind: KindReceipt, MsgID: MsgID{Shard: 77, Index: 50}, Conv: dm, ConvSeq: 3, Sender: "bob", Time: 5000, ReadUpTo: 2}}}}
	st := at()
	mustApply(t, dst, st, func(tx *Tx) error { _, err := tx.Deliver(st, b); return err })
	_, es := readAll(t, dst, "bob", false)
	if len(es) != 3 || es[1].Folded != 3 || es[2].Kind != KindReceipt || es[2].Folded != 0 {
		t.Errorf("bob's log on the destination: %+v", es)
	}
}

func fmtLines(lines []string) string {
	var b bytes.Buffer
	for _, l := range lines {
		b.WriteString("  " + l + "\n")
	}
	return b.String()
}

// TestLargeGroupEditsAndReactions: in a large group an edit and a reaction are written once, in
// the conversation log, like its messages: no member's log gets an entry.
func TestLargeGroupEditsAndReactions(t *testing.T) {
	w := newLargeWorld(t)
	w.do(Append{Conv: "g", Sender: "ann", ClientMsgID: "c", Kind: KindGroupCreate, Members: []string{"bob", "cat", "dan"}})
	m := w.send("g", "ann")
	w.do(Append{Conv: "g", Sender: "ann", ClientMsgID: "e", Kind: KindEdit, Target: m.MsgID, Body: []byte("edited")})
	w.do(Append{Conv: "g", Sender: "dan", ClientMsgID: "x", Kind: KindReaction, Target: m.MsgID, Reaction: "👍"})
	if _, err := w.try(Append{Conv: "g", Sender: "cat", ClientMsgID: "e", Kind: KindEdit, Target: m.MsgID, Body: []byte("no")}); !errors.Is(err, ErrNotSender) {
		t.Errorf("cat edits ann's message: %v, want ErrNotSender", err)
	}
	for _, uid := range []string{"ann", "bob", "dan"} {
		if got := w.userLog(uid); !slices.Equal(got, []string{"group_create g/1 source"}) {
			t.Errorf("%s's log: %v", uid, got)
		}
	}
	if head := w.s.mustHead(t, "g"); head != 4 {
		t.Errorf("the conversation's head: %d, want 4", head)
	}
}

// TestResetUserDropsFoldIndexAndGates: a reset log restarts at position 1, so nothing of the old
// epoch's fold index may fold an entry of the new one, and the follow records' gates (positions
// of the old epoch) are cleared.
func TestResetUserDropsFoldIndexAndGates(t *testing.T) {
	w := newLargeWorld(t)
	dm := ident.DirectConv("ann", "bob")
	w.do(Append{Conv: dm, Sender: "ann", ClientMsgID: "m1", Kind: KindMessage, Body: []byte("hi"), Members: []string{"ann", "bob"}})
	w.do(Append{Conv: dm, Sender: "bob", ClientMsgID: "r1", Kind: KindReceipt, ReadUpTo: 1}) // bob's log: 2
	w.do(Append{Conv: "g", Sender: "ann", ClientMsgID: "g", Kind: KindGroupCreate, Members: []string{"bob", "cat", "dan"}})
	st := w.at()
	mustApply(t, w.s, st, func(tx *Tx) error { _, err := tx.ResetUser(st, "bob"); return err })
	if n := countFoldKeys(t, w.s, "bob"); n != 0 {
		t.Errorf("bob's fold index after the reset: %d keys, want none", n)
	}
	fs, err := w.s.Follows("bob")
	if err != nil || len(fs) != 1 || fs[0].Periods[0].Gate != 0 || fs[0].Periods[0].From != 1 {
		t.Errorf("bob's follows after the reset: %+v, %v; want the open period, ungated", fs, err)
	}
	// New entries at positions 1, 2, 3: the old index (bob's receipt at 2) must fold none of them.
	w.do(Append{Conv: dm, Sender: "ann", ClientMsgID: "m3", Kind: KindMessage, Body: []byte("again")})
	w.do(Append{Conv: dm, Sender: "ann", ClientMsgID: "m4", Kind: KindMessage, Body: []byte("again")})
	w.do(Append{Conv: dm, Sender: "bob", ClientMsgID: "r2", Kind: KindReceipt, ReadUpTo: 4})
	for _, e := range w.entries("bob") {
		if strings.Contains(e, "folded") {
			t.Errorf("bob's new log: %q folded by the old epoch's index", e)
		}
	}
}

// countFoldKeys counts uid's fold index keys.
func countFoldKeys(t *testing.T, s *Shard, uid string) int {
	t.Helper()
	prefix := s.k.foldPrefix(uid)
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: prefixEnd(prefix)})
	if err != nil {
		t.Fatal(err)
	}
	defer it.Close()
	n := 0
	for ok := it.First(); ok; ok = it.Next() {
		n++
	}
	return n
}
