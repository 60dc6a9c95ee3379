package store

import (
	"fmt"
	"testing"

	"github.com/syncd-dev/syncd/proto"
)

// stOpen opens the store in dir, closed at the end of the test (closing twice is harmless).
func stOpen(t *testing.T, dir string) *Store {
	t.Helper()
	s, err := Open(dir, nil)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// stReopen closes s and opens the store in dir again.
func stReopen(t *testing.T, s *Store, dir string) *Store {
	t.Helper()
	if err := s.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	return stOpen(t, dir)
}

// stMsg builds a message entry at user-log seq with msg_id "1.<convSeq>.0" (conversation
// entries of one conversation get distinct ids from their conv_seq).
func stMsg(seq proto.Position, conv string, convSeq proto.Position, sender, body string) proto.Entry {
	return proto.Entry{
		Seq: seq, Kind: proto.KindMessage, MsgID: stID(conv, convSeq), Conv: conv, ConvSeq: convSeq,
		Sender: sender, Time: int64(convSeq) * 1000, Body: []byte(body),
	}
}

// stID returns a canonical msg_id derived from the conversation and conv_seq.
func stID(conv string, convSeq proto.Position) proto.MsgID {
	return proto.MsgID(fmt.Sprintf("%d.%d.0", len(conv), convSeq))
}

// stApply applies a batch that must succeed and returns the applied count.
func stApply(t *testing.T, s *Store, epoch proto.Epoch, entries ...proto.Entry) int {
	t.Helper()
	n, err := s.ApplyBatch(0, epoch, entries)
	if err != nil {
		t.Fatalf("applyBatch(%d, seq %d..): %v", epoch, entries[0].Seq, err)
	}
	return n
}

// stCursor asserts the stored cursor.
func stCursor(t *testing.T, s *Store, epoch proto.Epoch, pos proto.Position) {
	t.Helper()
	e, p, err := s.Cursor()
	if err != nil {
		t.Fatalf("cursor: %v", err)
	}
	if e != epoch || p != pos {
		t.Fatalf("cursor = (%d, %d), want (%d, %d)", e, p, epoch, pos)
	}
}

// stMessages returns the messages of conv, failing the test on error.
func stMessages(t *testing.T, s *Store, conv string) []Message {
	t.Helper()
	ms, err := s.Messages(conv)
	if err != nil {
		t.Fatalf("messages(%s): %v", conv, err)
	}
	return ms
}

// stBodies returns the bodies of ms.
func stBodies(ms []Message) []string {
	var out []string
	for _, m := range ms {
		out = append(out, string(m.Body))
	}
	return out
}

// stEntryCount counts the stored user-log entries.
func stEntryCount(t *testing.T, s *Store) int {
	t.Helper()
	db, err := s.read()
	if err != nil {
		t.Fatal(err)
	}
	defer s.mu.RUnlock()
	n := 0
	if err := scan(db, sk.entryPrefix(0), func(_, _ []byte) error { n++; return nil }); err != nil {
		t.Fatal(err)
	}
	return n
}
