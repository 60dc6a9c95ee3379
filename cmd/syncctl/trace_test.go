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
