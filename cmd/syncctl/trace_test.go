package main

import (
	"strings"
	"testing"

	"github.com/syncd-dev/syncd/syncd/adminapi"
)

// TestPrintTraceNodes: in a cluster each part of a trace may come from another node's replica.
// The text names the node of a user's part when it is not the home shard's, and says why a user
// whose shard no node could read is unknown.
func TestPrintTraceNodes(t *testing.T) {
	var out strings.Builder
	printTrace(&env{stdout: &out, stderr: &out}, &adminapi.TraceReport{Node: "n2", MsgID: "1.5.0", HomeShard: 1, Conv: "g:x",
		ConvKind: "group", ConvSeq: 2, Users: []adminapi.TraceUser{
			{User: "a", Shard: 1, Member: true, Node: "n2", Status: adminapi.TraceDelivered, Pos: 2, Head: 2},
			{User: "b", Shard: 2, Member: true, Node: "n3", Status: adminapi.TraceDelivered, Pos: 4, Head: 4},
			{User: "c", Shard: 3, Member: true, Status: adminapi.TraceUnavailable, Note: "no replica of shard 3 could be read"},
		}})
	for _, want := range []string{
		"home shard 1 (node n2's replica)\n",
		"user a (shard 1): delivered at position 2",
		"user b (shard 2; node n3's replica): delivered at position 4",
		"user c (shard 3): unknown: no replica of shard 3 could be read\n",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("trace lacks %q:\n%s", want, out.String())
		}
	}
}

// TestPrintTraceEntryKinds: the entry line says what each kind's up_to means — a receipt's is
// read, a delivered report's (PROTOCOL §8.8) only stored by the sender's devices.
func TestPrintTraceEntryKinds(t *testing.T) {
	for _, tc := range []struct {
		entry adminapi.TraceEntry
		want  string
	}{
		{adminapi.TraceEntry{Kind: "message", Sender: "alice", BodyBytes: 5}, "entry: message from alice at 1970-01-01T00:00:00Z, 5 bytes\n"},
		{adminapi.TraceEntry{Kind: "receipt", Sender: "bob", ReadUpTo: 3}, "entry: receipt from bob at 1970-01-01T00:00:00Z, read up to 3\n"},
		{adminapi.TraceEntry{Kind: "delivered", Sender: "bob", ReadUpTo: 3}, "entry: delivered from bob at 1970-01-01T00:00:00Z, stored up to 3\n"},
	} {
		var out strings.Builder
		printTrace(&env{stdout: &out, stderr: &out}, &adminapi.TraceReport{MsgID: "1.5.0", HomeShard: 1, Conv: "d:alice:bob",
			ConvKind: "direct", ConvSeq: 4, Entry: &tc.entry})
		if !strings.Contains(out.String(), tc.want) {
			t.Errorf("trace of a %s lacks %q:\n%s", tc.entry.Kind, tc.want, out.String())
		}
	}
}
