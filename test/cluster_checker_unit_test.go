package test

import (
	"strings"
	"testing"
	"time"

	"github.com/syncd-dev/syncd/client"
	"github.com/syncd-dev/syncd/proto"
)

// TestClusterCheckerCatches feeds the checker's device checks histories with known defects and
// expects each to be reported: a checker that passes everything proves nothing.
func TestClusterCheckerCatches(t *testing.T) {
	cv := &wlConv{id: "d:u1:u2", members: []string{"u1", "u2"}}
	ack := func(seq proto.Position, id string) *proto.Ack {
		return &proto.Ack{Conv: cv.id, ConvSeq: seq, MsgID: proto.MsgID(id)}
	}
	tl := newTimeline(t)
	at := func(s float64) time.Time { return tl.start.Add(time.Duration(s * float64(time.Second))) }
	w := &workload{t: t, tl: tl, convs: []*wlConv{cv}, msgs: map[string]*wlMsg{}, byBody: map[string]*wlMsg{}}
	for _, m := range []*wlMsg{
		{cmid: "a", conv: cv.id, sender: "u1", kind: proto.KindMessage, body: "u1#0", n: 0, ack: ack(1, "1.5.0"), queued: at(0), acked: at(1)},
		{cmid: "b", conv: cv.id, sender: "u1", kind: proto.KindMessage, body: "u1#1", n: 1, ack: ack(2, "1.6.0"), queued: at(2), acked: at(3)},
		{cmid: "c", conv: cv.id, sender: "u2", kind: proto.KindMessage, body: "u2#0", n: 0, queued: at(0)}, // ack lost
		{cmid: "d", conv: cv.id, sender: "u2", kind: proto.KindMessage, body: "u2#1", n: 1, ack: ack(4, "1.8.0"), queued: at(1), acked: at(2)},
	} {
		w.msgs[m.cmid], w.byBody[m.body] = m, m
	}
	d := &wlDevice{user: "u2"}
	msg := func(seq proto.Position, id, sender, body string) client.Message {
		return client.Message{Conv: cv.id, ConvSeq: seq, MsgID: proto.MsgID(id), Sender: sender, Body: []byte(body)}
	}
	good := []client.Message{msg(1, "1.5.0", "u1", "u1#0"), msg(2, "1.6.0", "u1", "u1#1"), msg(3, "1.7.0", "u2", "u2#0"),
		msg(4, "1.8.0", "u2", "u2#1")}
	if unacked, problems := w.checkView(d, cv, good); unacked != 1 || len(problems) != 0 {
		t.Fatalf("a good view: %d unacked, problems %v", unacked, problems)
	}
	for name, tc := range map[string]struct {
		view []client.Message
		want string
	}{
		"lost":       {good[:1], "lacks acked \"u1#1\""},
		"duplicate":  {append(good, msg(5, "1.9.0", "u1", "u1#1")), "twice"},
		"never sent": {append(good, msg(5, "1.9.0", "u2", "u2#7")), "never queued"},
		"moved":      {[]client.Message{msg(1, "1.5.0", "u1", "u1#0"), msg(3, "1.6.0", "u1", "u1#1")}, "acked at 2"},
		"reordered":  {[]client.Message{msg(1, "1.6.0", "u1", "u1#1"), msg(2, "1.5.0", "u1", "u1#0")}, "yet it comes after it (G6)"},
		"sdk order":  {[]client.Message{msg(3, "1.8.0", "u2", "u2#1"), msg(4, "1.7.0", "u2", "u2#0")}, "the SDK's outbox sent"},
	} {
		_, problems := w.checkView(d, cv, tc.view)
		if !strings.Contains(strings.Join(problems, "\n"), tc.want) {
			t.Errorf("%s: problems %q, want one with %q", name, problems, tc.want)
		}
	}

	entry := func(seq, convSeq proto.Position, id string) proto.Entry {
		return proto.Entry{Seq: seq, Kind: proto.KindMessage, MsgID: proto.MsgID(id), Conv: cv.id, ConvSeq: convSeq}
	}
	d.entries, d.subs = []proto.Entry{entry(1, 1, "1.5.0"), entry(2, 2, "1.6.0")}, []uint32{0, 0}
	if problems := w.checkEntries(d); len(problems) != 0 {
		t.Fatalf("good entries: %v", problems)
	}
	// A split user's: positions count in each sub-log, conv_seqs across them.
	d.entries, d.subs = []proto.Entry{entry(1, 1, "1.5.0"), entry(1, 2, "1.6.0"), entry(2, 3, "1.7.0")}, []uint32{0, 2, 2}
	if problems := w.checkEntries(d); len(problems) != 0 {
		t.Fatalf("good entries of sub-logs: %v", problems)
	}
	for name, tc := range map[string]struct {
		entries []proto.Entry
		subs    []uint32
		want    string
	}{
		"hole in a sub-log":           {[]proto.Entry{entry(1, 1, "1.5.0"), entry(2, 2, "1.6.0")}, []uint32{0, 1}, "sub-log 1 stored at position 2"},
		"out of turn across sub-logs": {[]proto.Entry{entry(1, 2, "1.6.0"), entry(1, 1, "1.5.0")}, []uint32{1, 0}, "want conv_seq 1"},
	} {
		d.entries, d.subs = tc.entries, tc.subs
		if problems := w.checkEntries(d); !strings.Contains(strings.Join(problems, "\n"), tc.want) {
			t.Errorf("%s: problems %q, want one with %q", name, problems, tc.want)
		}
	}
	for name, tc := range map[string]struct {
		entries []proto.Entry
		want    string
	}{
		"hole":        {[]proto.Entry{entry(1, 1, "1.5.0"), entry(3, 2, "1.6.0")}, "stored at position 3"},
		"twice":       {[]proto.Entry{entry(1, 1, "1.5.0"), entry(2, 1, "1.5.0")}, "stored twice"},
		"skipped":     {[]proto.Entry{entry(1, 1, "1.5.0"), entry(2, 3, "1.7.0")}, "want conv_seq 2"},
		"not member":  {[]proto.Entry{{Seq: 1, MsgID: "2.1.0", Conv: "d:u3:u4", ConvSeq: 1}}, "not a member"},
		"out of turn": {[]proto.Entry{entry(1, 2, "1.6.0"), entry(2, 1, "1.5.0")}, "want conv_seq 1"},
	} {
		d.entries, d.subs = tc.entries, make([]uint32, len(tc.entries))
		if problems := w.checkEntries(d); !strings.Contains(strings.Join(problems, "\n"), tc.want) {
			t.Errorf("%s: problems %q, want one with %q", name, problems, tc.want)
		}
	}
	// In a group, a jump is the group's delivery reports to other senders: noted for checkConvLog.
	grp := &wlConv{id: "grp", members: []string{"u1", "u2"}, creator: "u1"}
	w.convs = append(w.convs, grp)
	d.entries = []proto.Entry{{Seq: 1, MsgID: "3.1.0", Conv: grp.id, ConvSeq: 1}, {Seq: 2, MsgID: "3.4.0", Conv: grp.id, ConvSeq: 4}}
	d.subs = make([]uint32, len(d.entries))
	if problems := w.checkEntries(d); len(problems) != 0 || len(w.skipped[grp.id]) != 2 || w.skipped[grp.id][2] != "u2" {
		t.Errorf("a jump in a group: problems %q, noted %v", problems, w.skipped)
	}
	// A large group's entries from its source: contiguous from the user log's start of it.
	d.entries, d.subs = []proto.Entry{{Seq: 1, MsgID: "3.1.0", Conv: grp.id, ConvSeq: 1}}, []uint32{0}
	d.sourced = map[string][]proto.Entry{grp.id: {{MsgID: "3.2.0", Conv: grp.id, ConvSeq: 2}, {MsgID: "3.3.0", Conv: grp.id, ConvSeq: 3}}}
	if problems := w.checkEntries(d); len(problems) != 0 {
		t.Errorf("a source: problems %q", problems)
	}
	d.sourced[grp.id] = append(d.sourced[grp.id], proto.Entry{MsgID: "3.5.0", Conv: grp.id, ConvSeq: 5})
	if problems := w.checkEntries(d); !strings.Contains(strings.Join(problems, "\n"), "stored after 3") {
		t.Errorf("a source with a hole: problems %q", problems)
	}
	d.sourced = nil
	d.entries, d.rebases = nil, []client.RebaseEvent{{Epoch: 1, Head: 9}}
	if problems := w.checkEntries(d); len(problems) != 1 {
		t.Errorf("a rebase: problems %q", problems)
	}

	if missing := w.missingAcks(cv.id, convView{"1 1.5.0 u1#0", "4 1.8.0 u2#1"}); len(missing) != 1 || missing[0] != "2 1.6.0 u1#1" {
		t.Errorf("missingAcks: %v", missing)
	}
}
