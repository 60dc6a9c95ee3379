package proto

import (
	"strings"
	"testing"
)

// TestReceiptAnswersFit: the largest answers of the revision-5 queries fit the smallest frame
// limit a server may announce, so a server can always answer a full request (Receipts: one count
// per seq) and a full page of Readers (MaxPage users of the longest id) in one frame.
func TestReceiptAnswersFit(t *testing.T) {
	counts := make([]ReceiptCount, MaxReceiptSeqs)
	for i := range counts {
		counts[i] = ReceiptCount{ConvSeq: 1<<64 - 1, Members: 1<<32 - 1, Delivered: 1<<32 - 1, Read: 1<<32 - 1}
	}
	users := make([]string, MaxPage)
	for i := range users {
		users[i] = strings.Repeat("u", MaxIDLen)
	}
	for _, f := range []Frame{
		&ReceiptsResult{ID: 1<<64 - 1, Counts: counts},
		&ReadersResult{ID: 1<<64 - 1, Users: users, Next: users[0], More: true},
	} {
		b, err := AppendFrame(nil, f)
		if err != nil {
			t.Fatal(err)
		}
		if n := len(b) - 4; n > MinFrameLimit {
			t.Errorf("largest %s is %d bytes, above MinFrameLimit %d", f.FrameType(), n, MinFrameLimit)
		}
		if _, err := NewReader(strings.NewReader(string(b)), MinFrameLimit).Next(); err != nil {
			t.Errorf("largest %s does not read back: %v", f.FrameType(), err)
		}
	}
}

// TestDeliveredEntry: a delivered entry (kind 8) is a known kind and carries up_to like a
// receipt, through the hand-written entry codec as through the reflective one.
func TestDeliveredEntry(t *testing.T) {
	if !KindDelivered.Valid() || KindDelivered.String() != "delivered" {
		t.Fatalf("KindDelivered = %d %q valid %v", KindDelivered, KindDelivered, KindDelivered.Valid())
	}
	custom := encodeWith(t, &fixtureDelivered)
	plain := encodeWith(t, (*reflectEntry)(&fixtureDelivered))
	if string(custom) != string(plain) || !strings.Contains(string(custom), "up_to") {
		t.Fatalf("delivered entry encodes as %x, reflectively %x", custom, plain)
	}
	b, err := AppendFrame(nil, &Batch{Epoch: 1, Entries: []Entry{fixtureDelivered}})
	if err != nil {
		t.Fatal(err)
	}
	f, err := Decode(TypeBatch, b[HeaderLen:])
	if err != nil {
		t.Fatal(err)
	}
	if got := f.(*Batch).Entries[0]; got.Kind != KindDelivered || got.UpTo != fixtureDelivered.UpTo || got.Sender != fixtureDelivered.Sender {
		t.Errorf("decoded %+v, want %+v", got, fixtureDelivered)
	}
}
