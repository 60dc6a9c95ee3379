package raftstore

import (
	"bytes"
	"errors"
	"reflect"
	"testing"

	"github.com/cockroachdb/pebble/v2"

	"github.com/syncd-dev/syncd/log"
)

func sampleCommands() []Command {
	return []Command{
		AppendCommand(&log.Append{Conv: "d:a:b", Sender: "a", ClientMsgID: "m1", Kind: log.KindMessage,
			Body: []byte("hi"), Members: []string{"a", "b"}}),
		DeliverCommand(&log.DeliveryBatch{Source: 2, Prev: 0, Last: 1, Items: []log.Delivery{{Pos: 1, Users: []string{"a"},
			Entry: log.Entry{Kind: log.KindMessage, MsgID: log.MsgID{Shard: 2, Index: 9}, Conv: "c", ConvSeq: 1, Sender: "b"}}}}),
		CursorCommand(&log.CursorUpdate{UID: "a", Device: "phone", Cursor: log.Cursor{Epoch: 5, Pos: 3}}),
		TrimCommand(&log.Trim{Target: log.TrimUserLog, ID: "a", Retention: log.Retention{MaxCount: 10}}),
		DeadLetterCommand(&log.DeadLetterAdd{Dest: 3, Pos: 1, Users: []string{"a"}, Reason: "refused"}),
		DropDeadLetterCommand(&log.DeadLetterDrop{Dest: 3, Pos: 1}),
		RedeliverCommand(&log.Redelivery{Source: 2, Item: log.Delivery{Pos: 1, Users: []string{"a"},
			Entry: log.Entry{Kind: log.KindMessage, MsgID: log.MsgID{Shard: 2, Index: 9}, Conv: "c", ConvSeq: 1, Sender: "b"}}}),
		DeliverBatchesCommand([]*log.DeliveryBatch{
			{Source: 2, Prev: 0, Last: 1, Items: []log.Delivery{{Pos: 1, Users: []string{"a"},
				Entry: log.Entry{Kind: log.KindMessage, MsgID: log.MsgID{Shard: 2, Index: 9}, Conv: "c", ConvSeq: 1, Sender: "b"}}}},
			{Source: 3, Prev: 4, Last: 7},
		}),
		MoveCommand(&log.MoveStep{Op: log.MoveStage, Move: 9, User: "a", Records: []log.Record{{Key: []byte{0x20, 'a', 0}, Value: []byte{1}}}}),
		ChecksumCommand(),
		MarkReportedCommand(&log.MarkReported{Log: "bob 3", Cursor: log.Cursor{Epoch: 5, Pos: 3}}),
		MarkDeliveredCommand(&log.MarkDelivered{Conv: "g", Marks: []log.MemberMark{{User: "a", UpTo: 4}}}),
		AppendCommand(&log.Append{Conv: "g", Sender: "a", Kind: log.KindDelivered, ReadUpTo: 4, StatusFanoutLimit: 100}),
	}
}

// TestCommandRoundTrip checks every command kind survives the Raft log encoding with its time.
func TestCommandRoundTrip(t *testing.T) {
	for _, c := range sampleCommands() {
		c.Time = 1_700_000_000_000_000_000
		b, err := c.encode()
		if err != nil {
			t.Fatal(err)
		}
		d, err := decodeCommand(b)
		if err != nil {
			t.Fatal(err)
		}
		want, _ := c.payload.MarshalBinary()
		if d.op != c.op || d.time != c.Time || !reflect.DeepEqual(d.body, want) {
			t.Fatalf("op %d: decoded %+v", c.op, d)
		}
	}
	// Golden bytes: ChecksumCommand as the Raft log holds it (version 1, op 10, time 1 as a
	// zigzag varint, payload version 1).
	if b, err := (Command{op: opChecksum, payload: checksumRequest{}, Time: 1}).encode(); err != nil || !bytes.Equal(b, []byte{1, 10, 2, 1}) {
		t.Fatalf("checksum command encodes as % x (%v)", b, err)
	}
	// MarkReportedCommand: op 11, time 1, then the request (version 1, log, epoch, position).
	mr := MarkReportedCommand(&log.MarkReported{Log: "bob", Cursor: log.Cursor{Epoch: 5, Pos: 3}})
	mr.Time = 1
	if b, err := mr.encode(); err != nil || !bytes.Equal(b, []byte{1, 11, 2, 1, 3, 'b', 'o', 'b', 5, 3}) {
		t.Fatalf("mark reported command encodes as % x (%v)", b, err)
	}
	if _, err := decodeCommand([]byte{2, 1, 0}); !errors.Is(err, log.ErrCorrupt) {
		t.Fatalf("unknown version: %v", err)
	}
	if _, err := (Command{}).encode(); err == nil {
		t.Fatal("encoded an empty command")
	}
}

// FuzzDecodeCommand feeds arbitrary Raft entries to the command decoder and the payload
// decoders behind it: they must refuse garbage with an error, never panic.
func FuzzDecodeCommand(f *testing.F) {
	for _, c := range sampleCommands() {
		b, _ := c.encode()
		f.Add(b)
		f.Add(b[:len(b)/2])
	}
	f.Add([]byte{})
	f.Add([]byte{1, 99, 0})
	for _, b := range goldenSeeds(f, "command_", false) { // every op, every field set
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		d, err := decodeCommand(data)
		if err != nil {
			return
		}
		var payload interface{ UnmarshalBinary([]byte) error }
		switch d.op {
		case opAppend:
			payload = &log.Append{}
		case opDeliver:
			payload = &log.DeliveryBatch{}
		case opCursor:
			payload = &log.CursorUpdate{}
		case opTrim:
			payload = &log.Trim{}
		case opMarkReported:
			payload = &log.MarkReported{}
		case opMarkDelivered:
			payload = &log.MarkDelivered{}
		case opDeliverBatches:
			if bs, err := splitDeliveryBatches(d.body); err == nil {
				for _, b := range bs {
					_ = (&log.DeliveryBatch{}).UnmarshalBinary(b)
				}
			}
			return
		default:
			return
		}
		_ = payload.UnmarshalBinary(d.body)
	})
}

// TestDeliverBatchesCommand: the batches of one DeliverBatchesCommand apply exactly as the same
// batches proposed one by one in one applied Raft batch (same user logs, marks and answers), and
// a refused batch — out of order, or invalid — writes nothing and leaves the others applied.
func TestDeliverBatchesCommand(t *testing.T) {
	entry := func(seq log.Position) log.Entry {
		return log.Entry{Kind: log.KindMessage, MsgID: log.MsgID{Shard: 2, Index: uint64(seq)}, Conv: "c", ConvSeq: seq, Sender: "b"}
	}
	batches := []*log.DeliveryBatch{
		{Source: 2, Prev: 0, Last: 2, Items: []log.Delivery{{Pos: 1, Users: []string{"a", "b"}, Entry: entry(1)}, {Pos: 2, Users: []string{"a"}, Entry: entry(2)}}},
		{Source: 3, Prev: 4, Last: 7, Items: []log.Delivery{{Pos: 5, Users: []string{"a"}, Entry: entry(3)}}},      // source 3's mark is 0
		{Source: 4, Prev: 0, Last: 3, Items: []log.Delivery{{Pos: 3, Users: []string{"b", "a"}, Entry: entry(4)}}}, // users unsorted
		{Source: 2, Prev: 1, Last: 3, Items: []log.Delivery{{Pos: 2, Users: []string{"a"}, Entry: entry(2)}, {Pos: 3, Users: []string{"b"}, Entry: entry(5)}}},
	}
	db, err := pebble.Open(t.TempDir(), &pebble.Options{Logger: pebbleTestLogger{testSlog(t)}})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	apart, err := log.OpenShard(db, 1)
	if err != nil {
		t.Fatal(err)
	}
	together, err := log.OpenShard(db, 2)
	if err != nil {
		t.Fatal(err)
	}
	st := log.Stamp{Index: 10, Time: 1_700_000_000_000_000_000}

	tx := apart.Begin()
	var want []DeliveryOutcome
	for _, b := range batches {
		res, err := Apply(tx, st, DeliverCommand(b))
		if err != nil && !log.Rejected(err) {
			t.Fatal(err)
		}
		want = append(want, DeliveryOutcome{Result: res.Deliver, Err: err})
	}
	if err := tx.Commit(false); err != nil {
		t.Fatal(err)
	}
	tx.Close()

	tx = together.Begin()
	res, err := Apply(tx, st, DeliverBatchesCommand(batches))
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(false); err != nil {
		t.Fatal(err)
	}
	tx.Close()

	if len(res.Deliveries) != len(batches) {
		t.Fatalf("%d outcomes for %d batches", len(res.Deliveries), len(batches))
	}
	for i, got := range res.Deliveries {
		if got.Result != want[i].Result || (got.Err == nil) != (want[i].Err == nil) || got.Err != nil && got.Err.Error() != want[i].Err.Error() {
			t.Errorf("batch %d: %+v, want %+v", i, got, want[i])
		}
	}
	var ooo *log.OutOfOrderError
	if !errors.As(res.Deliveries[1].Err, &ooo) || ooo.Source != 3 || !errors.Is(res.Deliveries[2].Err, log.ErrInvalid) ||
		res.Deliveries[0].Result.Appended != 3 || res.Deliveries[3].Result != (log.DeliverResult{Mark: 3, Appended: 1}) {
		t.Fatalf("outcomes: %+v", res.Deliveries)
	}
	for _, uid := range []string{"a", "b"} {
		a, _ := apart.ReadUser(uid, 0, 1, log.Limit{})
		b, _ := together.ReadUser(uid, 0, 1, log.Limit{})
		if len(a.Entries) == 0 || !reflect.DeepEqual(a.Entries, b.Entries) {
			t.Fatalf("%s's log: one by one %+v, together %+v", uid, a.Entries, b.Entries)
		}
	}
	for src := log.ShardID(2); src <= 4; src++ {
		a, _ := apart.SourceMark(src)
		b, _ := together.SourceMark(src)
		if a != b {
			t.Fatalf("source %d's mark: one by one %d, together %d", src, a, b)
		}
	}

	// A batch that does not decode, joined to good ones (as the leader joins forwarded
	// batches): refused alone.
	good, _ := (&log.DeliveryBatch{Source: 7, Prev: 0, Last: 1}).MarshalBinary()
	tx = together.Begin()
	res, err = Apply(tx, st, Command{op: opDeliverBatches, payload: rawPayload(joinDeliveryBatches([][]byte{good, {0xff, 0xff}, good}))})
	if err != nil {
		t.Fatal(err)
	}
	tx.Close()
	if len(res.Deliveries) != 3 || res.Deliveries[0].Err != nil || !errors.Is(res.Deliveries[1].Err, log.ErrInvalid) ||
		res.Deliveries[2] != (DeliveryOutcome{Result: log.DeliverResult{Mark: 1}}) {
		t.Fatalf("outcomes with an undecodable batch: %+v", res.Deliveries)
	}
	for _, bad := range [][]byte{nil, {0}, {5, 1, 0}, {1, 200, 1}} {
		if _, err := splitDeliveryBatches(bad); err == nil {
			t.Fatalf("decoded %v", bad)
		}
	}
	if _, err := DeliverBatchesCommand(nil).encode(); err == nil {
		t.Fatal("encoded a command without batches")
	}
}

// TestMarkReportedCommand: the delivery reporter's commands applied as the state machine applies
// them: a cursor makes the log due, a KindDelivered append (carrying its fan-out limit) moves
// the mark, and MarkReportedCommand ends the log's turn.
func TestMarkReportedCommand(t *testing.T) {
	db, err := pebble.Open(t.TempDir(), &pebble.Options{Logger: pebbleTestLogger{testSlog(t)}})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	s, err := log.OpenShard(db, 1)
	if err != nil {
		t.Fatal(err)
	}
	var idx uint64
	run := func(cmd Command) Result {
		t.Helper()
		idx++
		tx := s.Begin()
		defer tx.Close()
		res, err := Apply(tx, log.Stamp{Index: idx, Time: int64(idx)}, cmd)
		if err != nil {
			t.Fatalf("command %d: %v", idx, err)
		}
		if err := tx.Commit(false); err != nil {
			t.Fatal(err)
		}
		return res
	}
	run(AppendCommand(&log.Append{Conv: "d:a:b", Sender: "a", ClientMsgID: "m1", Kind: log.KindMessage, Body: []byte("hi"), Members: []string{"a", "b"}}))
	items, err := s.ReadOutbox(1, 1)
	if err != nil || len(items) != 1 {
		t.Fatalf("outbox: %v, %v", items, err)
	}
	run(DeliverCommand(&log.DeliveryBatch{Source: 1, Prev: 0, Last: 1, Items: []log.Delivery{{Pos: 1, Users: items[0].Recipients, Entry: items[0].Entry}}}))
	info, err := s.UserInfo("b")
	if err != nil {
		t.Fatal(err)
	}
	run(CursorCommand(&log.CursorUpdate{UID: "b", Device: "phone", Cursor: log.Cursor{Epoch: info.Epoch, Pos: 1}}))
	due, err := s.DeliveryDue(10, 100)
	if err != nil || len(due) != 1 || len(due[0].Convs) != 1 || due[0].Convs[0] != (log.DeliveredConv{Conv: "d:a:b", UpTo: 1}) {
		t.Fatalf("due: %+v, %v", due, err)
	}
	res := run(AppendCommand(&log.Append{Conv: "d:a:b", Sender: "b", Kind: log.KindDelivered, ReadUpTo: 1, StatusFanoutLimit: 100}))
	if res.Append.NoOp || res.Append.ConvSeq != 2 {
		t.Fatalf("delivered: %+v", res.Append)
	}
	run(MarkReportedCommand(&log.MarkReported{Log: due[0].Log, Cursor: log.Cursor{Epoch: due[0].Epoch, Pos: due[0].To}}))
	if due, err := s.DeliveryDue(10, 100); err != nil || len(due) != 0 {
		t.Fatalf("due after the report: %+v, %v", due, err)
	}
	if st, err := s.Conversation("d:a:b", "a"); err != nil || st.PeerDelivered != 1 {
		t.Fatalf("a's view: %+v, %v", st, err)
	}
}
