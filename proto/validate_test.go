package proto

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

// validator is every frame a client sends: requests plus Hello, SyncStart and CursorAck.
type validator interface {
	Frame
	Validate() error
}

func TestValidFixtures(t *testing.T) {
	for _, f := range allFixtures() {
		if v, ok := f.(validator); ok {
			if err := v.Validate(); err != nil {
				t.Errorf("%s fixture: %v", f.FrameType(), err)
			}
		}
	}
}

func TestValidate(t *testing.T) {
	long := strings.Repeat("a", MaxIDLen)
	members := func(n int) []string {
		m := make([]string, n)
		for i := range m {
			m[i] = fmt.Sprint("u", i)
		}
		return m
	}
	sources := func(n int) []SourceCursor {
		s := make([]SourceCursor, n)
		for i := range s {
			s[i] = SourceCursor{Conv: fmt.Sprint("g", i), Epoch: 1, Pos: Position(i)}
		}
		return s
	}
	seqs := func(n int) []Position {
		s := make([]Position, n)
		for i := range s {
			s[i] = Position(i + 1)
		}
		return s
	}
	cases := []struct {
		name string
		f    validator
		want Code // 0: valid
	}{
		{"hello ok", &Hello{Token: "t", Device: "d", ProtoVersion: 1}, 0},
		{"hello no token", &Hello{Device: "d", ProtoVersion: 1}, CodeUnauthenticated},
		{"hello long token", &Hello{Token: strings.Repeat("t", MaxTokenLen+1), Device: "d", ProtoVersion: 1}, CodeTooLarge},
		{"hello no device", &Hello{Token: "t", ProtoVersion: 1}, CodeInvalidArgument},
		{"hello proto 0", &Hello{Token: "t", Device: "d"}, CodeUnsupportedVersion},
		{"hello version with space", &Hello{Token: "t", Device: "d", ProtoVersion: 1, ClientVersion: "app 1.0"}, 0},
		{"hello version control char", &Hello{Token: "t", Device: "d", ProtoVersion: 1, ClientVersion: "app\n"}, CodeInvalidArgument},
		{"hello long version", &Hello{Token: "t", Device: "d", ProtoVersion: 1, ClientVersion: strings.Repeat("v", MaxClientVersionLen+1)}, CodeTooLarge},
		{"refresh ok", &Refresh{Token: "t"}, 0},
		{"refresh no token", &Refresh{}, CodeUnauthenticated},
		{"refresh long token", &Refresh{Token: strings.Repeat("t", MaxTokenLen+1)}, CodeTooLarge},

		{"send ok", &Send{ID: 1, Conv: long, ClientMsgID: "m"}, 0},
		{"send max body", &Send{ID: 1, Conv: "c", ClientMsgID: "m", Body: make([]byte, MaxBody)}, 0},
		{"send body too large", &Send{ID: 1, Conv: "c", ClientMsgID: "m", Body: make([]byte, MaxBody+1)}, CodeTooLarge},
		{"send id 0", &Send{Conv: "c", ClientMsgID: "m"}, CodeInvalidArgument},
		{"send long conv", &Send{ID: 1, Conv: long + "a", ClientMsgID: "m"}, CodeInvalidArgument},
		{"send conv with space", &Send{ID: 1, Conv: "a b", ClientMsgID: "m"}, CodeInvalidArgument},
		{"send conv with nul", &Send{ID: 1, Conv: "a\x00", ClientMsgID: "m"}, CodeInvalidArgument},
		{"send conv non-ascii", &Send{ID: 1, Conv: "café", ClientMsgID: "m"}, CodeInvalidArgument},
		{"send no cmid", &Send{ID: 1, Conv: "c"}, CodeInvalidArgument},
		{"send bad peer", &Send{ID: 1, Conv: "c", ClientMsgID: "m", Peer: "b b"}, CodeInvalidArgument},

		{"mark read ok", &MarkRead{ID: 1, Conv: "c", ClientMsgID: "m", UpTo: 1}, 0},
		{"mark read up_to 0", &MarkRead{ID: 1, Conv: "c", ClientMsgID: "m"}, CodeInvalidArgument},
		{"mark read no conv", &MarkRead{ID: 1, ClientMsgID: "m", UpTo: 1}, CodeInvalidArgument},

		{"recall ok", &Recall{ID: 1, Conv: "c", ClientMsgID: "m", Target: "1.2.0"}, 0},
		{"recall no target", &Recall{ID: 1, Conv: "c", ClientMsgID: "m"}, CodeInvalidArgument},
		{"recall bad target", &Recall{ID: 1, Conv: "c", ClientMsgID: "m", Target: "1.0.0"}, CodeInvalidArgument},

		{"create group no members", &CreateGroup{ID: 1, Conv: "g", ClientMsgID: "m"}, 0},
		{"create group max members", &CreateGroup{ID: 1, Conv: "g", ClientMsgID: "m", Members: members(MaxMembers)}, 0},
		{"create group too many", &CreateGroup{ID: 1, Conv: "g", ClientMsgID: "m", Members: members(MaxMembers + 1)}, CodeTooLarge},
		{"create group bad member", &CreateGroup{ID: 1, Conv: "g", ClientMsgID: "m", Members: []string{"a", ""}}, CodeInvalidArgument},
		{"add members none", &AddMembers{ID: 1, Conv: "g", ClientMsgID: "m"}, CodeInvalidArgument},
		{"add members too many", &AddMembers{ID: 1, Conv: "g", ClientMsgID: "m", Members: members(MaxMembers + 1)}, CodeTooLarge},
		{"add members ok", &AddMembers{ID: 1, Conv: "g", ClientMsgID: "m", Members: []string{"a"}}, 0},
		{"remove members none", &RemoveMembers{ID: 1, Conv: "g", ClientMsgID: "m"}, CodeInvalidArgument},
		{"remove members bad", &RemoveMembers{ID: 1, Conv: "g", ClientMsgID: "m", Members: []string{"a b"}}, CodeInvalidArgument},
		{"remove members ok", &RemoveMembers{ID: 1, Conv: "g", ClientMsgID: "m", Members: []string{"a"}}, 0},

		{"sync from scratch", &SyncStart{}, 0},
		{"sync pos without epoch", &SyncStart{Pos: 5}, CodeInvalidArgument},
		{"sync epoch at 0", &SyncStart{Epoch: 3}, 0},
		{"sync vector cursor", &SyncStart{Epoch: 3, Pos: 9, Subs: []SubCursor{{3, 9}, {}, {4, 1}}}, 0},
		{"sync vector cursor not the scalar one", &SyncStart{Epoch: 3, Pos: 9, Subs: []SubCursor{{3, 8}}}, CodeInvalidArgument},
		{"sync vector cursor pos without epoch", &SyncStart{Subs: []SubCursor{{}, {0, 2}}}, CodeInvalidArgument},
		{"sync vector cursor too long", &SyncStart{Subs: make([]SubCursor, MaxSubLogs+1)}, CodeInvalidArgument},
		{"cursor ack of a sub-log", &CursorAck{Epoch: 1, Pos: 1, Sub: MaxSubLogs - 1}, 0},
		{"cursor ack of no sub-log", &CursorAck{Epoch: 1, Pos: 1, Sub: MaxSubLogs}, CodeInvalidArgument},
		{"cursor ack ok", &CursorAck{Epoch: 1, Pos: 1}, 0},
		{"cursor ack no epoch", &CursorAck{Pos: 1}, CodeInvalidArgument},
		{"cursor ack pos 0", &CursorAck{Epoch: 1}, CodeInvalidArgument},

		// Revision 6: sources.
		{"sync sources", &SyncStart{Epoch: 3, Pos: 9, Sources: []SourceCursor{{"big", 5, 7000}, {Conv: "new"}, {"zero", 6, 0}}}, 0},
		{"sync sources beside a vector cursor", &SyncStart{Epoch: 3, Pos: 9, Subs: []SubCursor{{3, 9}}, Sources: []SourceCursor{{"big", 5, 1}}}, 0},
		{"sync sources at the most", &SyncStart{Sources: sources(MaxSources)}, 0},
		{"sync sources too many", &SyncStart{Sources: sources(MaxSources + 1)}, CodeInvalidArgument},
		{"sync source pos without epoch", &SyncStart{Sources: []SourceCursor{{"big", 5, 1}, {Conv: "g", Pos: 2}}}, CodeInvalidArgument},
		{"sync source without a conv", &SyncStart{Sources: []SourceCursor{{Epoch: 5, Pos: 1}}}, CodeInvalidArgument},
		{"sync source bad conv", &SyncStart{Sources: []SourceCursor{{Conv: "a b"}}}, CodeInvalidArgument},
		{"sync source long conv", &SyncStart{Sources: []SourceCursor{{Conv: long + "a"}}}, CodeInvalidArgument},
		{"sync source listed twice", &SyncStart{Sources: []SourceCursor{{"big", 5, 1}, {"g", 1, 1}, {"big", 5, 2}}}, CodeInvalidArgument},
		{"sync source listed twice, zero cursors", &SyncStart{Sources: []SourceCursor{{Conv: "g"}, {Conv: "g"}}}, CodeInvalidArgument},
		{"sync sources do not excuse the scalar cursor", &SyncStart{Pos: 5, Sources: []SourceCursor{{"big", 5, 1}}}, CodeInvalidArgument},
		{"cursor ack of a source", &CursorAck{Epoch: 1, Pos: 1, Source: long}, 0},
		{"cursor ack of a source and a sub-log", &CursorAck{Epoch: 1, Pos: 1, Source: "big", Sub: 1}, CodeInvalidArgument},
		{"cursor ack of a bad source", &CursorAck{Epoch: 1, Pos: 1, Source: "a\x00"}, CodeInvalidArgument},
		{"cursor ack of a long source", &CursorAck{Epoch: 1, Pos: 1, Source: long + "a"}, CodeInvalidArgument},
		{"cursor ack of a source at pos 0", &CursorAck{Epoch: 1, Source: "big"}, CodeInvalidArgument},
		{"cursor ack of a source without epoch", &CursorAck{Pos: 1, Source: "big"}, CodeInvalidArgument},

		{"conv list from start", &ConvList{ID: 1}, 0},
		{"conv list id 0", &ConvList{}, CodeInvalidArgument},
		{"conv list bad after", &ConvList{ID: 1, After: "a b"}, CodeInvalidArgument},
		{"conv state no conv", &ConvState{ID: 1}, CodeInvalidArgument},
		{"history from head", &History{ID: 1, Conv: "c"}, 0},
		{"history id 0", &History{Conv: "c"}, CodeInvalidArgument},
		{"head check id 0", &HeadCheck{}, CodeInvalidArgument},

		{"digest of the user log to the head", &Digest{ID: 1, Epoch: 3, From: 1}, 0},
		{"digest of a sub-log", &Digest{ID: 1, Sub: MaxSubLogs - 1, Epoch: 3, From: 5, To: 5}, 0},
		{"digest of a conversation", &Digest{ID: 1, Conv: "g", Epoch: 3, From: 2, To: 1 << 63}, 0},
		{"digest id 0", &Digest{Epoch: 3, From: 1}, CodeInvalidArgument},
		{"digest without an epoch", &Digest{ID: 1, From: 1}, CodeInvalidArgument},
		{"digest from 0", &Digest{ID: 1, Epoch: 3}, CodeInvalidArgument},
		{"digest to below from", &Digest{ID: 1, Epoch: 3, From: 5, To: 4}, CodeInvalidArgument},
		{"digest of no sub-log", &Digest{ID: 1, Sub: MaxSubLogs, Epoch: 3, From: 1}, CodeInvalidArgument},
		{"digest of a conversation's sub-log", &Digest{ID: 1, Conv: "g", Sub: 1, Epoch: 3, From: 1}, CodeInvalidArgument},
		{"digest bad conv", &Digest{ID: 1, Conv: long + "a", Epoch: 3, From: 1}, CodeInvalidArgument},

		{"receipts of one", &Receipts{ID: 1, Conv: "g", Seqs: []Position{1}}, 0},
		{"receipts of the most", &Receipts{ID: 1, Conv: "g", Seqs: seqs(MaxReceiptSeqs)}, 0},
		{"receipts of repeated seqs", &Receipts{ID: 1, Conv: "g", Seqs: []Position{9, 2, 9}}, 0},
		{"receipts id 0", &Receipts{Conv: "g", Seqs: []Position{1}}, CodeInvalidArgument},
		{"receipts bad conv", &Receipts{ID: 1, Conv: "a b", Seqs: []Position{1}}, CodeInvalidArgument},
		{"receipts of none", &Receipts{ID: 1, Conv: "g"}, CodeInvalidArgument},
		{"receipts of too many", &Receipts{ID: 1, Conv: "g", Seqs: seqs(MaxReceiptSeqs + 1)}, CodeInvalidArgument},
		{"receipts of conv_seq 0", &Receipts{ID: 1, Conv: "g", Seqs: []Position{3, 0}}, CodeInvalidArgument},
		{"readers delivered", &Readers{ID: 1, Conv: "g", ConvSeq: 1, State: KindDelivered}, 0},
		{"readers read, paged", &Readers{ID: 1, Conv: "g", ConvSeq: 1 << 50, State: KindReceipt, After: long, Limit: 1 << 31}, 0},
		{"readers id 0", &Readers{Conv: "g", ConvSeq: 1, State: KindReceipt}, CodeInvalidArgument},
		{"readers bad conv", &Readers{ID: 1, Conv: "", ConvSeq: 1, State: KindReceipt}, CodeInvalidArgument},
		{"readers of conv_seq 0", &Readers{ID: 1, Conv: "g", State: KindReceipt}, CodeInvalidArgument},
		{"readers without a state", &Readers{ID: 1, Conv: "g", ConvSeq: 1}, CodeInvalidArgument},
		{"readers in state message", &Readers{ID: 1, Conv: "g", ConvSeq: 1, State: KindMessage}, CodeInvalidArgument},
		{"readers in an unknown state", &Readers{ID: 1, Conv: "g", ConvSeq: 1, State: 200}, CodeInvalidArgument},
		{"readers bad after", &Readers{ID: 1, Conv: "g", ConvSeq: 1, State: KindDelivered, After: "a b"}, CodeInvalidArgument},

		{"report gap", &Report{Kind: ReportGap, Epoch: 3, From: 8, To: 10}, 0},
		{"report gap of an earlier batch", &Report{Kind: ReportGap, Epoch: 3, From: 8, To: 2}, 0},
		{"report gap of an empty batch", &Report{Kind: ReportGap, From: 1}, 0},
		{"report mismatch", &Report{Kind: ReportMismatch, Conv: "g", Epoch: 3, From: 8, To: 8}, 0},
		{"report no kind", &Report{From: 1, To: 1}, CodeInvalidArgument},
		{"report unknown kind", &Report{Kind: 3, From: 1, To: 1}, CodeInvalidArgument},
		{"report from 0", &Report{Kind: ReportGap, To: 1}, CodeInvalidArgument},
		{"report mismatch to below from", &Report{Kind: ReportMismatch, From: 8, To: 7}, CodeInvalidArgument},
		{"report bad conv", &Report{Kind: ReportMismatch, Conv: "a b", From: 1, To: 1}, CodeInvalidArgument},
		{"report of no sub-log", &Report{Kind: ReportGap, Sub: MaxSubLogs, From: 1}, CodeInvalidArgument},
		{"report of a conversation's sub-log", &Report{Kind: ReportGap, Conv: "g", Sub: 2, From: 1}, CodeInvalidArgument},
	}
	for _, c := range cases {
		err := c.f.Validate()
		if c.want == 0 {
			if err != nil {
				t.Errorf("%s: %v, want valid", c.name, err)
			}
			continue
		}
		var e *Error
		if !errors.As(err, &e) || e.Code != c.want || e.Message == "" {
			t.Errorf("%s: %v, want an *Error with code %s", c.name, err, c.want)
		}
	}
}

// TestValidateQuotesSafely: an invalid id is echoed cut short and without control bytes.
func TestValidateQuotesSafely(t *testing.T) {
	err := (&Send{ID: 1, Conv: strings.Repeat("\x00", 500), ClientMsgID: "m"}).Validate()
	if msg := err.Error(); len(msg) > 200 || strings.ContainsRune(msg, 0) {
		t.Errorf("message %q", msg)
	}
}
