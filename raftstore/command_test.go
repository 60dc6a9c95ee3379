package raftstore

import (
	"errors"
	"reflect"
	"testing"

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
		default:
			return
		}
		_ = payload.UnmarshalBinary(d.body)
	})
}
