package peer

import (
	"bytes"
	"encoding/hex"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/syncd-dev/syncd/syncd/adminapi"
)

var rewrite = flag.Bool("rewrite", false, "rewrite the golden files in testdata/ from the current encoder")

// golden are one request and one answer of every operation, with every field set, as a node of
// this version sends them. Their bytes are pinned in testdata/golden/: a change there is a change
// of the wire between nodes, which a rolling upgrade would meet.
var golden = []struct {
	name   string
	op     Op
	args   any
	answer any
}{
	{"user_info", OpUserInfo, &ReadArgs{UID: "alice"}, &ReadAnswer{Info: LogInfo{Epoch: 7, First: 1, Head: 9}}},
	{"conversation", OpConversation, &ReadArgs{Conv: "g:x", UID: "alice"},
		&ReadAnswer{Conv: ConvState{Conv: "g:x", Kind: 2, Info: LogInfo{Epoch: 3, First: 1, Head: 4}, Members: []string{"alice", "bob"}, ReadMark: 2}}},
	{"user_convs", OpUserConvs, &ReadArgs{UID: "alice", After: "d:a:b", Count: 50}, &ReadAnswer{IDs: []string{"g:x", "g:y"}}},
	{"read_conv_before", OpReadConvBefore, &ReadArgs{Conv: "g:x", Pos: 9, LimitCount: 2, LimitBytes: 4096}, &ReadAnswer{Read: goldenRead()}},
	{"read_user", OpReadUser, &ReadArgs{UID: "bob", Epoch: 5, Pos: 3, LimitCount: 256, LimitBytes: 1 << 20}, &ReadAnswer{Read: goldenRead()}},
	{"members", OpMembers, &ReadArgs{Conv: "g:x", UID: "alice", After: "bob", Count: 2},
		&ReadAnswer{Members: []Member{{User: "carol", Role: 2}, {User: "dan", Role: 1}}, More: true}},
	{"user_groups", OpUserGroups, &ReadArgs{UIDs: []string{"alice", "bob"}}, &ReadAnswer{Counts: []int{3, 0}}},
	{"conversation.marks", OpConversation, &ReadArgs{Conv: "d:alice:bob", UID: "alice"},
		&ReadAnswer{Conv: ConvState{Conv: "d:alice:bob", Kind: 1, Info: LogInfo{Epoch: 3, First: 1, Head: 9}, Members: []string{"alice", "bob"},
			ReadMark: 2, DeliveredMark: 5, PeerDelivered: 9, PeerRead: 7}}},
	{"receipts", OpReceipts, &ReadArgs{Conv: "g:x", UID: "alice", Seqs: []uint64{4, 9}},
		&ReadAnswer{Receipts: []ReceiptCount{{ConvSeq: 4, Members: 120, Delivered: 97, Read: 40}, {ConvSeq: 9, Members: 121}}}},
	{"readers", OpReaders, &ReadArgs{Conv: "g:x", UID: "alice", Pos: 4, State: 2, After: "bob", Count: 2},
		&ReadAnswer{IDs: []string{"carol", "erin"}, Next: "erin", More: true}},
	{"follows", OpFollows, &ReadArgs{UID: "bob"}, &ReadAnswer{Follows: []Follow{{Conv: "g:x", Periods: []Period{{From: 3, To: 9, Gate: 2}, {From: 12, Gate: 7}}}}}},
	{"read_conv_wait", OpReadConvWait, &ReadArgs{Conv: "g:x", Epoch: 5, Pos: 4, WaitMS: 10000},
		&ReadAnswer{Read: Read{Status: 1, Info: LogInfo{Epoch: 5, First: 1, Head: 4}, Entries: []Entry{{Seq: 4, Kind: 6, Conv: "g:x", ConvSeq: 4,
			Sender: "ann", Members: []string{"bob"}, Source: true}}}, Stale: true, UnheardMS: 2500}},
	{"read_user_wait", OpReadUserWait, &ReadArgs{UID: "bob", Epoch: 5, Pos: 4, WaitMS: 10000}, &ReadAnswer{Read: Read{Status: 2, Info: LogInfo{Epoch: 5, First: 1, Head: 3}}}},
	{"read_user_wait.stale", OpReadUserWait, &ReadArgs{UID: "bob", Epoch: 5, Pos: 4, WaitMS: 10000},
		&ReadAnswer{Read: Read{Status: 2, Info: LogInfo{Epoch: 5, First: 1, Head: 3}}, Stale: true, UnheardMS: 2500}},
	{"cursors", OpCursors, &CursorsArgs{User: "bob"}, &adminapi.CursorReport{Node: "n2", User: "bob", Shard: 3, Exists: true, Epoch: 5,
		First: 1, Head: 3, Devices: []adminapi.DeviceCursor{{Device: "phone", Epoch: 5, Pos: 2, Behind: ptr(uint64(1))}, {Device: "old", Epoch: 4, Pos: 9, EpochChanged: true}}}},
	{"trace_home", OpTraceHome, &TraceHomeArgs{MsgID: MsgID{Shard: 2, Index: 17}}, &TraceHome{Found: true, Members: []string{"alice", "bob"},
		Report: adminapi.TraceReport{Node: "n1", MsgID: "2.17.0", HomeShard: 2, Conv: "g:x", ConvKind: "group", ConvSeq: 4,
			Entry:  &adminapi.TraceEntry{Source: "history", Kind: "message", Sender: "alice", Time: 1700000000000000000, BodyBytes: 5},
			Outbox: adminapi.TraceOutbox{First: 3, Head: 8, Retained: true, Pos: 4, Recipients: []string{"alice", "bob"}}}}},
	{"trace_home.conv_moved", OpTraceHome, &TraceHomeArgs{MsgID: MsgID{Shard: 2, Index: 17}}, &TraceHome{Found: true, ConvMoved: true,
		Report: adminapi.TraceReport{Node: "n1", MsgID: "2.17.0", HomeShard: 2, Conv: "g:x", ConvSeq: 4,
			Outbox: adminapi.TraceOutbox{First: 3, Head: 8}}}},
	{"trace_users", OpTraceUsers, &TraceUsersArgs{MsgID: MsgID{Shard: 2, Index: 17}, Scan: 1000,
		Outbox: adminapi.TraceOutbox{First: 3, Head: 8, Retained: true, Pos: 4, Recipients: []string{"bob"}}, Users: []TraceUserArgs{{User: "bob", Member: true}}},
		&[]adminapi.TraceUser{{User: "bob", Node: "n3", Shard: 1, Member: true, Recipient: ptr(true), Status: adminapi.TraceDelivered,
			Epoch: 5, First: 1, Head: 3, Pos: 3, Scanned: 1, SourceMark: 8, Devices: []adminapi.TraceDevice{{Device: "phone", Epoch: 5, Pos: 3, Past: true}}}}},
	{"dead_letters", OpDeadLetters, &DeadLettersArgs{Limit: 100}, &DeadLetters{Count: 1, Items: []DeadLetter{goldenDeadLetter(false)}}},
	{"dead_letter", OpDeadLetter, &DeadLetterArgs{Dest: 3, Pos: 12}, &DeadLetterAnswer{Found: true, Letter: goldenDeadLetter(true)}},
}

func ptr[T any](v T) *T { return &v }

func goldenRead() Read {
	return Read{Status: 1, Info: LogInfo{Epoch: 5, First: 1, Head: 4}, Entries: []Entry{
		{Seq: 3, Kind: 1, MsgID: MsgID{Shard: 2, Index: 17}, Conv: "g:x", ConvSeq: 4, Sender: "alice", Time: 1700000000000000000, Body: []byte("hello")},
		{Seq: 4, Kind: 3, MsgID: MsgID{Shard: 2, Index: 18}, Conv: "g:x", ConvSeq: 5, Sender: "alice", Time: 1700000000000000001, Target: MsgID{Shard: 2, Index: 17}},
	}}
}

func goldenDeadLetter(body bool) DeadLetter {
	dl := DeadLetter{Dest: 3, Pos: 12, Users: []string{"bob"}, Reason: "log: invalid: bad user id", FailedAt: 1700000000000000000,
		Entry: Entry{Kind: 1, MsgID: MsgID{Shard: 2, Index: 17}, Conv: "g:x", ConvSeq: 4, Sender: "alice", Time: 1700000000000000000}, BodyBytes: 5}
	if body {
		dl.Entry.Body = []byte("hello")
	}
	return dl
}

// TestGolden checks the bytes of every request and answer against testdata/golden, and that
// they decode back to what was encoded.
func TestGolden(t *testing.T) {
	for _, g := range golden {
		t.Run(g.name, func(t *testing.T) {
			req, err := EncodeRequest(g.op, 3, g.op == OpDeadLetter, g.args)
			if err != nil {
				t.Fatal(err)
			}
			ans, err := EncodeAnswer(g.answer)
			if err != nil {
				t.Fatal(err)
			}
			checkGolden(t, g.name+".request", req)
			checkGolden(t, g.name+".answer", ans)

			r, err := DecodeRequest(req)
			if err != nil || r.Op != g.op || r.Shard != 3 || r.Leader != (g.op == OpDeadLetter) {
				t.Fatalf("request envelope: %+v, %v", r, err)
			}
			args := reflect.New(reflect.TypeOf(g.args).Elem())
			if err := r.Decode(args.Interface()); err != nil || !reflect.DeepEqual(args.Interface(), g.args) {
				t.Fatalf("arguments decode to %+v (%v), want %+v", args.Interface(), err, g.args)
			}
			out := reflect.New(reflect.TypeOf(g.answer).Elem())
			if err := DecodeAnswer(ans, out.Interface()); err != nil || !reflect.DeepEqual(out.Interface(), g.answer) {
				t.Fatalf("answer decodes to %+v (%v), want %+v", out.Interface(), err, g.answer)
			}
		})
	}
}

func checkGolden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", "golden", name+".hex")
	if *rewrite {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(hex.EncodeToString(got)+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -rewrite once to create it, and review the diff)", err)
	}
	want, err := hex.DecodeString(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%s changed: the node-to-node format is a contract between versions\n got %x\nwant %x", name, got, want)
	}
}

// A newer node may send fields this one does not know: they are ignored. Absent fields decode as
// zero. Another version, a truncated envelope or unknown flags are ErrFormat.
func TestDecodeCompatibilityAndErrors(t *testing.T) {
	type newerArgs struct {
		User  string `msgpack:"user"`
		Extra string `msgpack:"extra_field_of_a_later_version"`
	}
	b, err := EncodeRequest(OpCursors, 1, false, newerArgs{User: "bob", Extra: "x"})
	if err != nil {
		t.Fatal(err)
	}
	r, err := DecodeRequest(b)
	var a CursorsArgs
	if err != nil || r.Decode(&a) != nil || a.User != "bob" {
		t.Fatalf("newer arguments: %+v %v", a, err)
	}
	for name, p := range map[string][]byte{
		"empty":          {},
		"version 2":      {2, byte(OpCursors), 0, 1, 0x80},
		"short":          {Version, byte(OpCursors)},
		"unknown flags":  {Version, byte(OpCursors), 0x80, 1, 0x80},
		"bad shard":      {Version, byte(OpCursors), 0, 0xff},
		"answer version": {9},
	} {
		_, err := DecodeRequest(p)
		if name == "answer version" {
			err = DecodeAnswer(p, &a)
		}
		if !errors.Is(err, ErrFormat) {
			t.Errorf("%s: %v, want ErrFormat", name, err)
		}
	}
	ans, _ := EncodeAnswer(&ReadAnswer{})
	if err := DecodeAnswer(append(ans, 0xc0), &ReadAnswer{}); !errors.Is(err, ErrFormat) {
		t.Errorf("trailing bytes: %v", err)
	}
}

// FuzzDecode: any payload decodes, as a request and its arguments or as an answer, to a value or
// ErrFormat, never a panic; a value that decodes re-encodes to bytes that decode to it again.
func FuzzDecode(f *testing.F) {
	for _, g := range golden {
		req, _ := EncodeRequest(g.op, 3, false, g.args)
		ans, _ := EncodeAnswer(g.answer)
		f.Add(req)
		f.Add(ans)
		f.Add(req[:len(req)/2])
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, g := range golden {
			out := reflect.New(reflect.TypeOf(g.answer).Elem()).Interface()
			if err := DecodeAnswer(b, out); err != nil {
				if !errors.Is(err, ErrFormat) {
					t.Fatalf("answer: %v is not ErrFormat", err)
				}
				continue
			}
			again, err := EncodeAnswer(out)
			if err != nil {
				t.Fatalf("re-encode %+v: %v", out, err)
			}
			// Compared as bytes, not values: an empty list and an absent one ("follows": []) are
			// the same answer, and the encoder writes neither. A field the decoder dropped would
			// be missing from the second encoding; one the encoder drops, from the golden bytes.
			back := reflect.New(reflect.TypeOf(g.answer).Elem()).Interface()
			if err := DecodeAnswer(again, back); err != nil {
				t.Fatalf("round trip of %+v: %v", out, err)
			}
			if twice, err := EncodeAnswer(back); err != nil || !bytes.Equal(twice, again) {
				t.Fatalf("round trip of %+v: %+v encodes to %x, not %x (%v)", out, back, twice, again, err)
			}
		}
		r, err := DecodeRequest(b)
		if err != nil {
			if !errors.Is(err, ErrFormat) {
				t.Fatalf("request: %v is not ErrFormat", err)
			}
			return
		}
		for _, g := range golden {
			args := reflect.New(reflect.TypeOf(g.args).Elem()).Interface()
			if err := r.Decode(args); err != nil && !errors.Is(err, ErrFormat) {
				t.Fatalf("arguments: %v is not ErrFormat", err)
			}
		}
	})
}
