// Golden tests pin every persisted and replicated format of this package: the Raft command
// envelope of every op (command.go, which is what sits in the Raft log of a data shard), the
// value a Raft log entry is stored as and the keys it is stored under (raftlog.go), and the
// forwarding protocol's requests and answers (forward_codec.go). The payloads inside the
// commands are package log's requests, whose own golden bytes are in log/testdata/golden; here
// they are only carried. The meta shard's commands (which a forwarded proposal carries as opaque
// bytes) and its snapshot are pinned in package cluster, raftstore/cluster/testdata/golden.
//
// For each fixture (every field non-zero, recognisable values) the current encoder must produce
// exactly the bytes in testdata/golden, and the decoder must read those bytes back into the
// fixture. An accidental format change therefore fails here.
//
// After an intended change, run `go test ./raftstore -run TestGolden -update` and review the
// diff. A format that may still sit in a Raft log, a snapshot or on disk, or that a node of the
// previous release may send, must stay decodable: bump the version byte (commandV1, logFormatV1,
// fwdVersion, checksumV1), keep the old golden file and its decoder, and add a file for the new
// version. Operation codes and answer kinds are persisted: never renumber them.
package raftstore

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/syncd-dev/syncd/log"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/golden")

const goldenTime = int64(1_700_000_000_000_000_000) // a proposer's clock, Unix ns

// Fixtures of the payloads the commands carry: every field set.
var (
	goldenEntry = log.Entry{Kind: log.KindMessage, MsgID: log.MsgID{Shard: 3, Index: 99, Sub: 1}, Conv: "g", ConvSeq: 12,
		Sender: "bob", Time: goldenTime, Body: []byte{0, 1, 0xff}, ReadUpTo: 11, Target: log.MsgID{Shard: 3, Index: 98},
		Members: []string{"x", "y"}}
	goldenAppend = log.Append{Conv: "conv-1", Sender: "alice", ClientMsgID: "cm-1", Kind: log.KindMessage, Body: []byte("body"),
		Members: []string{"alice", "bob"}, DedupWindow: log.DefaultDedupWindow, MaxGroupSize: 5000}
	goldenDeliveryBatch = log.DeliveryBatch{Source: 70000, Prev: 5, Last: 9, Items: []log.Delivery{
		{Pos: 6, Users: []string{"a", "b"}, Entry: goldenEntry},
		{Pos: 9, Users: []string{"c"}, Entry: goldenEntry, After: log.Barrier{Source: 3, Pos: 1 << 40}},
	}}
	goldenDeliveryBatch2 = log.DeliveryBatch{Source: 4, Prev: 1 << 33, Last: 1<<33 + 1, Items: []log.Delivery{
		{Pos: 1<<33 + 1, Users: []string{"d"}, Entry: goldenEntry},
	}}
	goldenCursorUpdate = log.CursorUpdate{UID: "alice", Device: "phone", Cursor: log.Cursor{Epoch: log.Epoch(goldenTime), Pos: 41}}
	goldenCursorSeen   = log.CursorUpdate{UID: "alice", Device: "phone", Cursor: log.Cursor{Epoch: log.Epoch(goldenTime), Pos: 42}, Seen: true}
	goldenTrim         = log.Trim{Target: log.TrimOutboxLog, ID: "alice", Retention: log.Retention{MaxCount: 1000, MaxAge: 7 * 24 * 3600 * 1e9}, UpTo: 258}
	goldenDeadLetter   = log.DeadLetterAdd{Dest: 7, Pos: 258, Users: []string{"b", "c"}, Reason: "refused"}
	goldenDropDead     = log.DeadLetterDrop{Dest: 7, Pos: 258}
	goldenDeadLetterV2 = log.DeadLetterAdd{Dest: 7, Pos: 258, Users: []string{"b", "c"}, Reason: "refused", Code: 15, NextTry: goldenTime + 60e9}
	goldenDropArchived = log.DeadLetterDrop{Dest: 7, Pos: 258, Archived: true}
	goldenDeadAttempt  = log.DeadLetterAttempt{Dest: 7, Pos: 258, Attempt: 3, Code: 1, Reason: "refused again", NextTry: goldenTime + 240e9}
	goldenDeadArchive  = log.DeadLetterArchive{Dest: 7, Pos: 258}
	goldenRedelivery   = log.Redelivery{Source: 3, Item: log.Delivery{Pos: 258, Users: []string{"b", "c"}, Entry: goldenEntry}}
	goldenMoveStep     = log.MoveStep{Op: log.MoveStage, Move: 1 << 33, User: "alice", From: 2, To: 70000,
		Records: []log.Record{{Key: []byte{0x20, 'a', 0}, Value: []byte{1, 2}}}, SourceEmpty: true}
	goldenMarkReported  = log.MarkReported{Log: "bob 3", Cursor: log.Cursor{Epoch: log.Epoch(goldenTime), Pos: 41}}
	goldenMarkDelivered = log.MarkDelivered{Conv: "g", Marks: []log.MemberMark{{User: "alice", UpTo: 300}, {User: "bob", UpTo: 1 << 40}}}
)

// goldenCommand is a command as the state machine reads it back: its op, the proposer's time and
// the payload decoded by the op's decoder.
type goldenCommand struct {
	Op      op
	Time    int64
	Payload any
}

// commandGoldens is one fixture per op; each golden file holds the command as the Raft log does.
func commandGoldens() []struct {
	name string
	cmd  Command
	want any // the payload, decoded
} {
	return []struct {
		name string
		cmd  Command
		want any
	}{
		{"command_append", AppendCommand(&goldenAppend), goldenAppend},
		{"command_deliver", DeliverCommand(&goldenDeliveryBatch), goldenDeliveryBatch},
		{"command_cursor", CursorCommand(&goldenCursorUpdate), goldenCursorUpdate},
		{"command_cursor_seen", CursorCommand(&goldenCursorSeen), goldenCursorSeen},
		{"command_trim", TrimCommand(&goldenTrim), goldenTrim},
		{"command_dead_letter", DeadLetterCommand(&goldenDeadLetter), goldenDeadLetter},
		{"command_drop_dead_letter", DropDeadLetterCommand(&goldenDropDead), goldenDropDead},
		{"command_redeliver", RedeliverCommand(&goldenRedelivery), goldenRedelivery},
		{"command_dead_letter_coded", DeadLetterCommand(&goldenDeadLetterV2), goldenDeadLetterV2},
		{"command_drop_dead_letter_archived", DropDeadLetterCommand(&goldenDropArchived), goldenDropArchived},
		{"command_dead_letter_attempt", DeadLetterAttemptCommand(&goldenDeadAttempt), goldenDeadAttempt},
		{"command_archive_dead_letter", ArchiveDeadLetterCommand(&goldenDeadArchive), goldenDeadArchive},
		{"command_deliver_batches", DeliverBatchesCommand([]*log.DeliveryBatch{&goldenDeliveryBatch, &goldenDeliveryBatch2}),
			[]log.DeliveryBatch{goldenDeliveryBatch, goldenDeliveryBatch2}},
		{"command_move", MoveCommand(&goldenMoveStep), goldenMoveStep},
		{"command_checksum", ChecksumCommand(), checksumRequest{}},
		{"command_mark_reported", MarkReportedCommand(&goldenMarkReported), goldenMarkReported},
		{"command_mark_delivered", MarkDeliveredCommand(&goldenMarkDelivered), goldenMarkDelivered},
	}
}

// decodeGoldenCommand decodes a Raft command and its payload with the decoders the state machine
// uses (decodedCommand.apply).
func decodeGoldenCommand(b []byte) (any, error) {
	d, err := decodeCommand(b)
	if err != nil {
		return nil, err
	}
	out := goldenCommand{Op: d.op, Time: d.time}
	unmarshal := func(p interface{ UnmarshalBinary([]byte) error }) error { return p.UnmarshalBinary(d.body) }
	switch d.op {
	case opAppend:
		var p log.Append
		err, out.Payload = unmarshal(&p), p
	case opDeliver:
		var p log.DeliveryBatch
		err, out.Payload = unmarshal(&p), p
	case opCursor:
		var p log.CursorUpdate
		err, out.Payload = unmarshal(&p), p
	case opTrim:
		var p log.Trim
		err, out.Payload = unmarshal(&p), p
	case opDeadLetter:
		var p log.DeadLetterAdd
		err, out.Payload = unmarshal(&p), p
	case opDropDeadLetter:
		var p log.DeadLetterDrop
		err, out.Payload = unmarshal(&p), p
	case opDeadLetterAttempt:
		var p log.DeadLetterAttempt
		err, out.Payload = unmarshal(&p), p
	case opArchiveDeadLetter:
		var p log.DeadLetterArchive
		err, out.Payload = unmarshal(&p), p
	case opRedeliver:
		var p log.Redelivery
		err, out.Payload = unmarshal(&p), p
	case opDeliverBatches:
		encs, serr := splitDeliveryBatches(d.body)
		if serr != nil {
			return nil, serr
		}
		bs := make([]log.DeliveryBatch, len(encs))
		for i, enc := range encs {
			if err := bs[i].UnmarshalBinary(enc); err != nil {
				return nil, err
			}
		}
		out.Payload = bs
	case opMove:
		var p log.MoveStep
		err, out.Payload = unmarshal(&p), p
	case opChecksum:
		err, out.Payload = decodeChecksumRequest(d.body), checksumRequest{}
	case opMarkReported:
		var p log.MarkReported
		err, out.Payload = unmarshal(&p), p
	case opMarkDelivered:
		var p log.MarkDelivered
		err, out.Payload = unmarshal(&p), p
	default:
		return nil, fmt.Errorf("unknown op %d", d.op)
	}
	return out, err
}

// goldenRaftLog is a Raft log entry with every field set.
var goldenRaftLog = raft.Log{Index: 1 << 40, Term: 7, Type: raft.LogConfiguration, Data: []byte{1, 10, 2, 1},
	Extensions: []byte("ext"), AppendedAt: time.Unix(0, goldenTime)}

// fwdGoldenView is a forwarded answer as the forwarding node sees it: its error as text (the
// sentinels it wraps are checked by TestForwardCodec).
type fwdGoldenView struct {
	ID   uint64
	Res  Result
	Body []byte
	Err  string
}

func fwdView(r fwdResponse) fwdGoldenView {
	v := fwdGoldenView{ID: r.id, Res: r.res, Body: r.body}
	if r.err != nil {
		v.Err = r.err.Error()
	}
	return v
}

// fwdGoldenResponses is one answer of each kind: the fixture, and the error text the forwarding
// node decodes it to.
func fwdGoldenResponses() []struct {
	name    string
	resp    fwdResponse
	wantErr string
} {
	okAll := Result{Append: log.AppendResult{MsgID: log.MsgID{Shard: 3, Index: 99, Sub: 1}, ConvSeq: 7, Time: goldenTime,
		Epoch: 5, Duplicate: true, NoOp: true}, Deliver: log.DeliverResult{Mark: 9, Appended: 4}, First: 2}
	return []struct {
		name    string
		resp    fwdResponse
		wantErr string
	}{
		{"fwd_answer_ok", fwdResponse{id: 1 << 33, res: okAll}, ""},
		{"fwd_answer_ok_deliveries", fwdResponse{id: 12, res: Result{First: 3, Deliveries: []DeliveryOutcome{
			{Result: log.DeliverResult{Mark: 40, Appended: 7}},
			{Err: &log.OutOfOrderError{Source: 5, Mark: 2, Prev: 9}},
			{Err: log.RejectionFromCode(1, "log: bad batch")},
		}}}, ""},
		{"fwd_answer_ok_move", fwdResponse{id: 13, res: Result{Append: okAll.Append, Move: 1 << 40}}, ""},
		{"fwd_answer_ok_check", fwdResponse{id: 14, res: Result{CheckIndex: 1 << 33}}, ""},
		{"fwd_answer_body", fwdResponse{id: 15, body: []byte(`{"id":"n1"}`)}, ""},
		{"fwd_answer_rejected", fwdResponse{id: 2, err: log.RejectionFromCode(2, "log: client_msg_id reused")},
			"log: client_msg_id reused"},
		{"fwd_answer_out_of_order", fwdResponse{id: 3, err: &log.OutOfOrderError{Source: 4, Mark: 10, Prev: 12}},
			(&log.OutOfOrderError{Source: 4, Mark: 10, Prev: 12}).Error()},
		{"fwd_answer_not_leader", fwdResponse{id: 4, err: &NotLeaderError{LeaderID: "n2", LeaderAddr: "127.0.0.1:7402"}},
			(&NotLeaderError{LeaderID: "n2", LeaderAddr: "127.0.0.1:7402"}).Error()},
		{"fwd_answer_timeout", fwdResponse{id: 5, err: ErrTimeout}, ErrTimeout.Error() + " (at the leader): " + ErrTimeout.Error()},
		{"fwd_answer_leadership_lost", fwdResponse{id: 6, err: ErrLeadershipLost},
			ErrLeadershipLost.Error() + " (at the leader): " + ErrLeadershipLost.Error()},
		{"fwd_answer_shutdown", fwdResponse{id: 7, err: ErrShutdown}, ErrShutdown.Error() + " (the leader is shutting down)"},
		{"fwd_answer_no_shard", fwdResponse{id: 8, err: ErrNoShard}, ErrNoShard.Error() + " (on the node asked)"},
		{"fwd_answer_other", fwdResponse{id: 9, err: errors.New("disk on fire")}, "raftstore: on the node asked: disk on fire"},
		{"fwd_answer_meta_refused", fwdResponse{id: 10, err: fmt.Errorf("%w: no node", ErrMetaRefused)},
			ErrMetaRefused.Error() + " (at the meta leader): " + ErrMetaRefused.Error() + ": no node"},
		{"fwd_answer_low_disk", fwdResponse{id: 11, err: ErrLowDisk}, ErrLowDisk.Error() + " (at the leader)"},
	}
}

// fwdGoldenRequests is one request of each kind; a proposal carries a command without proposer
// time, as forwardable makes it.
func fwdGoldenRequests() []struct {
	name string
	req  fwdRequest
} {
	cmd, err := forwardable(AppendCommand(&goldenAppend))
	if err != nil {
		panic(err)
	}
	return []struct {
		name string
		req  fwdRequest
	}{
		{"fwd_request_propose", fwdRequest{id: 1 << 33, kind: fwdPropose, shard: 70000, timeoutMS: 2500, command: cmd}},
		{"fwd_request_propose_meta", fwdRequest{id: 2, kind: fwdPropose, shard: MetaShard, timeoutMS: 100,
			command: []byte(`{"v":1,"op":"remove","id":"n2"}`)}},
		{"fwd_request_status", fwdRequest{id: 3, kind: fwdStatusReq}},
		{"fwd_request_call", fwdRequest{id: 4, kind: fwdCall, timeoutMS: 900, method: "read", command: []byte{0, 1, 2}}},
	}
}

type goldenCase struct {
	name   string // file name without extension: <name>.v<N>; the file is <name>.v<N>.hex
	encode func() []byte
	decode func([]byte) (any, error)
	want   any
}

func goldenCases() []goldenCase {
	var cases []goldenCase
	for _, c := range commandGoldens() {
		cmd := c.cmd
		cmd.Time = goldenTime
		want := goldenCommand{Op: cmd.op, Time: goldenTime, Payload: c.want}
		cases = append(cases, goldenCase{c.name + ".v1", func() []byte {
			b, err := cmd.encode()
			if err != nil {
				panic(err)
			}
			return b
		}, decodeGoldenCommand, want})
	}
	cases = append(cases, goldenCase{"raft_log_entry.v1",
		func() []byte { return encodeLog(nil, &goldenRaftLog) },
		func(b []byte) (any, error) { var e raft.Log; err := decodeLog(b, &e); return e, err }, goldenRaftLog})
	for _, c := range fwdGoldenRequests() {
		req := c.req
		cases = append(cases, goldenCase{c.name + ".v1", req.encode, decodeFwdFrame(func(body []byte) (any, error) {
			return decodeFwdRequest(body)
		}), req})
	}
	for _, c := range fwdGoldenResponses() {
		resp := c.resp
		want := fwdView(resp)
		want.Err = c.wantErr
		cases = append(cases, goldenCase{c.name + ".v1", resp.encode, decodeFwdFrame(func(body []byte) (any, error) {
			r, err := decodeFwdResponse(body)
			return fwdView(r), err
		}), want})
	}
	return cases
}

// decodeFwdFrame checks a forwarded frame's length prefix and decodes its body.
func decodeFwdFrame(decode func([]byte) (any, error)) func([]byte) (any, error) {
	return func(b []byte) (any, error) {
		if len(b) < 4 || int(binary.BigEndian.Uint32(b)) != len(b)-4 {
			return nil, fmt.Errorf("frame length prefix does not match its %d bytes", len(b))
		}
		return decode(b[4:])
	}
}

// TestGolden: every format's encoder writes the golden bytes, and its decoder reads them back to
// the fixture (see the file's comment for what to do when this fails).
func TestGolden(t *testing.T) {
	seen := map[string]bool{}
	for _, c := range goldenCases() {
		t.Run(c.name, func(t *testing.T) {
			if seen[c.name] {
				t.Fatalf("two golden cases named %s", c.name)
			}
			seen[c.name] = true
			path := goldenPath(c.name)
			got := c.encode()
			if *update {
				writeGolden(t, path, c.name, got)
			}
			want := readGolden(t, path)
			if !bytes.Equal(got, want) {
				t.Errorf("encoding changed:\n got %x\nwant %x\n(a stored or replicated format changed: see golden_test.go)", got, want)
			}
			v, err := c.decode(want)
			if err != nil {
				t.Fatalf("golden bytes no longer decode: %v", err)
			}
			if !reflect.DeepEqual(v, c.want) {
				t.Errorf("golden bytes decode to\n%+v\nwant\n%+v", v, c.want)
			}
		})
	}
}

// TestGoldenVersionBytes pins the version bytes and codes this package writes at the front of its
// formats, so that a change of one is a decision, seen here, and not a side effect.
func TestGoldenVersionBytes(t *testing.T) {
	for _, c := range []struct {
		name      string
		got, want int
	}{
		{"command version", commandV1, 1},
		{"raft log value version", int(logFormatV1), 1},
		{"forwarding version", fwdVersion, 1},
		{"checksum request version", checksumV1, 1},
		{"op append", int(opAppend), 1}, {"op deliver", int(opDeliver), 2}, {"op cursor", int(opCursor), 3},
		{"op trim", int(opTrim), 4}, {"op dead letter", int(opDeadLetter), 5}, {"op drop dead letter", int(opDropDeadLetter), 6},
		{"op redeliver", int(opRedeliver), 7}, {"op deliver batches", int(opDeliverBatches), 8}, {"op move", int(opMove), 9},
		{"op checksum", int(opChecksum), 10}, {"op mark reported", int(opMarkReported), 11}, {"op mark delivered", int(opMarkDelivered), 12},
		{"op dead letter attempt", int(opDeadLetterAttempt), 13}, {"op archive dead letter", int(opArchiveDeadLetter), 14},
	} {
		if c.got != c.want {
			t.Errorf("%s is %d, was %d: a persisted code changed (see golden_test.go)", c.name, c.got, c.want)
		}
	}
	// Every version byte is checked on decode: the next version is refused, not misread.
	cmd, _ := (Command{op: opAppend, payload: &goldenAppend, Time: 1}).encode()
	cmd[0]++
	if _, err := decodeCommand(cmd); !errors.Is(err, log.ErrCorrupt) {
		t.Errorf("command of version %d: %v, want log.ErrCorrupt", cmd[0], err)
	}
	entry := encodeLog(nil, &goldenRaftLog)
	entry[0]++
	if err := decodeLog(entry, &raft.Log{}); err == nil {
		t.Errorf("raft log value of version %d decoded", entry[0])
	}
	req := (&fwdRequest{id: 1, kind: fwdStatusReq}).encode()[4:]
	req[0]++
	if _, err := decodeFwdRequest(req); err == nil {
		t.Errorf("forwarded request of version %d decoded", req[0])
	}
	resp := (&fwdResponse{id: 1}).encode()[4:]
	resp[0]++
	if _, err := decodeFwdResponse(resp); err == nil {
		t.Errorf("forwarded answer of version %d decoded", resp[0])
	}
	if err := decodeChecksumRequest([]byte{checksumV1 + 1}); err == nil {
		t.Error("checksum request of the next version decoded")
	}
}

// TestGoldenRaftKeys pins the key layout of the Raft log and stable store (raftlog.go) for shard
// 0x01020304, and the stable store's uint64 value.
func TestGoldenRaftKeys(t *testing.T) {
	l := &raftLog{shard: 0x01020304}
	var b strings.Builder
	b.WriteString("# Raft keyspace layout (raftlog.go) for shard 0x01020304: key, bytes in hex.\n")
	for _, e := range []struct {
		name string
		key  []byte
	}{
		{"shard_prefix", l.shardPrefix()},
		{"shard_prefix_end", l.shardPrefixEnd()},
		{"log_entry_1", l.logKey(1)},
		{"log_entry_2^40", l.logKey(1 << 40)},
		{"log_end", l.logKeyEnd()},
		{"stable_CurrentTerm", l.stableKey([]byte("CurrentTerm"))},
		{"stable_uint64_value_258", binary.BigEndian.AppendUint64(nil, 258)},
	} {
		fmt.Fprintf(&b, "%s %x\n", e.name, e.key)
	}
	path := filepath.Join("testdata", "golden", "raft_keys.v1.txt")
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if b.String() != string(want) {
		t.Errorf("raft key layout changed:\n%s\nwant:\n%s", b.String(), want)
	}
}

// goldenSeeds returns the golden bytes of the files in testdata/golden whose names start with
// prefix, as fuzz seeds (for frames, without their length prefix when body is set).
func goldenSeeds(tb testing.TB, prefix string, body bool) [][]byte {
	tb.Helper()
	var out [][]byte
	for _, c := range goldenCases() {
		if !strings.HasPrefix(c.name, prefix) {
			continue
		}
		b := readGolden(tb, goldenPath(c.name))
		if body && len(b) >= 4 {
			b = b[4:]
		}
		out = append(out, b)
	}
	return out
}

func goldenPath(name string) string { return filepath.Join("testdata", "golden", name+".hex") }

func writeGolden(t *testing.T, path, name string, b []byte) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	var s strings.Builder
	fmt.Fprintf(&s, "# %s: %d bytes (golden; regenerate with -update, see golden_test.go)\n", name, len(b))
	h := hex.EncodeToString(b)
	for len(h) > 64 {
		s.WriteString(h[:64] + "\n")
		h = h[64:]
	}
	s.WriteString(h + "\n")
	if err := os.WriteFile(path, []byte(s.String()), 0o644); err != nil {
		t.Fatal(err)
	}
}

func readGolden(tb testing.TB, path string) []byte {
	tb.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		tb.Fatalf("%v (run with -update to create it)", err)
	}
	var h strings.Builder
	for _, line := range strings.Split(string(data), "\n") {
		if line = strings.TrimSpace(line); line != "" && !strings.HasPrefix(line, "#") {
			h.WriteString(line)
		}
	}
	b, err := hex.DecodeString(h.String())
	if err != nil {
		tb.Fatalf("%s: %v", path, err)
	}
	return b
}

// FuzzCommandEnvelope: whatever the command decoder accepts re-encodes, with the same op, time and
// payload bytes, to a command that decodes the same.
func FuzzCommandEnvelope(f *testing.F) {
	for _, b := range goldenSeeds(f, "command_", false) {
		f.Add(b)
	}
	f.Add([]byte{commandV1, 0, 0})
	f.Fuzz(func(t *testing.T, data []byte) {
		d, err := decodeCommand(data)
		if err != nil {
			return
		}
		b, err := (Command{op: d.op, payload: rawPayload(d.body), Time: d.time}).encode()
		if err != nil {
			t.Fatal(err)
		}
		again, err := decodeCommand(b)
		if err != nil || again.op != d.op || again.time != d.time || !bytes.Equal(again.body, d.body) {
			t.Fatalf("re-encoded command decodes to %+v (%v), want %+v", again, err, d)
		}
	})
}
