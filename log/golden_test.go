// Golden tests pin every persisted format of this package: the Raft request encodings (Append,
// DeliveryBatch), each stored value type, the key layout and the snapshot stream. For each fixture
// the current encoder must produce exactly the bytes in testdata/golden, and the decoder must read
// those bytes back into the fixture. An accidental format change therefore fails here.
//
// After an intended change, run `go test ./log -run TestGolden -update` and review the diff. A
// format that may still sit in a Raft log, a snapshot or on disk must stay decodable: bump the
// version byte, keep the old golden file (and its decoder), and add a file for the new version.
package log

import (
	"bytes"
	"encoding/hex"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/golden")

// Fixtures: every field set to a non-zero, recognisable value.
var (
	goldenAppend = Append{
		Conv: "conv-1", Sender: "alice", ClientMsgID: "cm-1", Kind: KindRecall, Body: []byte("body"),
		ReadUpTo: 300, Target: MsgID{Shard: 7, Index: 1 << 33, Sub: 2}, Members: []string{"bob", "carol"},
		DedupWindow: DefaultDedupWindow, RecallWindow: -5,
	}
	goldenEntry = Entry{
		Kind: KindMessage, MsgID: MsgID{Shard: 3, Index: 99, Sub: 1}, Conv: "g", ConvSeq: 12,
		Sender: "bob", Time: 1_700_000_000_000_000_000, Body: []byte{0, 1, 0xff}, ReadUpTo: 11,
		Target: MsgID{Shard: 3, Index: 98}, Members: []string{"x", "y"},
	}
	goldenBatch = DeliveryBatch{Source: 70000, Prev: 5, Last: 9, Items: []Delivery{
		{Pos: 6, Users: []string{"a", "b"}, Entry: goldenEntry},
		{Pos: 9, Users: []string{"c"}, Entry: Entry{Kind: KindReceipt, MsgID: MsgID{Shard: 3, Index: 120}, Conv: "g", ConvSeq: 13, ReadUpTo: 12}},
	}}
	goldenBatchV2 = DeliveryBatch{Source: 70000, Prev: 5, Last: 9, Items: []Delivery{
		{Pos: 6, Users: []string{"a", "b"}, Entry: goldenEntry},
		{Pos: 9, Users: []string{"c"}, Entry: goldenEntry, After: Barrier{Source: 3, Pos: 1 << 40}},
	}}
	goldenLogMeta   = logMeta{Kind: ConvDirect, Epoch: 1_700_000_000_000_000_000, First: 4, Head: 1000, Members: []string{"a", "b"}}
	goldenLogMetaV2 = logMeta{Kind: ConvGroup, Epoch: 1_700_000_000_000_000_000, First: 4, Head: 1000, MemberCount: 5000}
	goldenLogMetaV3 = logMeta{Epoch: 1_700_000_000_000_000_000, First: 1, Head: 70, Groups: 12}
	goldenLogMetaV4 = logMeta{Epoch: 1_700_000_000_000_000_000, First: 1, Head: 70, Groups: -3}
	goldenMember    = member{ReadMark: 77, Role: RoleMember}
	goldenMemberV2  = member{ReadMark: 77, Role: RoleAdmin}
	goldenMemberV3  = member{ReadMark: 77, Role: RoleAdmin, DeliveredMark: 300, Joined: 12}
	goldenLogMetaV5 = logMeta{Kind: ConvGroup, Epoch: 1_700_000_000_000_000_000, First: 4, Head: 1000, MemberCount: 5000, Counted: true}
	goldenAppendV3  = Append{Conv: "g", Sender: "alice", Kind: KindDelivered, ReadUpTo: 300, StatusFanoutLimit: 100}
	goldenAppendV4  = Append{Conv: "g", Sender: "alice", ClientMsgID: "cm-4", Kind: KindMemberAdd, Members: []string{"bob"},
		MaxGroupSize: 100_000, LargeGroupThreshold: 1000}
	goldenEntryV3 = Entry{Kind: KindMemberRemove, MsgID: MsgID{Shard: 3, Index: 99, Sub: 1}, Conv: "g", ConvSeq: 12,
		Sender: "alice", Time: 1_700_000_000_000_000_000, Members: []string{"bob"}, Source: true}
	goldenAppendV5 = Append{Conv: "g", Sender: "alice", ClientMsgID: "cm-5", Kind: KindReaction, Target: MsgID{Shard: 3, Index: 98},
		Reaction: "👍", Remove: true}
	goldenEntryV4 = Entry{Kind: KindReaction, MsgID: MsgID{Shard: 3, Index: 99, Sub: 1}, Conv: "g", ConvSeq: 12,
		Sender: "alice", Time: 1_700_000_000_000_000_000, Target: MsgID{Shard: 3, Index: 98}, Reaction: "👍", Remove: true,
		Folded: 300, BodyHash: []byte{0xe3, 0xb0, 0xc4, 0x42}}
	goldenLogMetaV5Large = logMeta{Kind: ConvGroup, Epoch: 1_700_000_000_000_000_000, First: 4, Head: 1000, MemberCount: 5000, Counted: true, Large: true}
	goldenLogMetaV6      = logMeta{Epoch: 1_800_000_000_000_000_000, First: 1, Head: 70, Groups: 2, Renewed: 1_700_000_000_000_000_000, Kept: 64}
	goldenPeriods        = []Period{{From: 12, To: 300, Gate: 7}, {From: 1 << 33, Gate: 1 << 40}}
	goldenMarkDelivered  = MarkDelivered{Conv: "g", Marks: []MemberMark{{User: "alice", UpTo: 300}, {User: "bob 3", UpTo: 1 << 40}}}
	goldenReported       = MarkReported{Log: "bob 3", Cursor: Cursor{Epoch: 1_700_000_000_000_000_000, Pos: 41}}
	goldenAppendV2       = Append{Conv: "g", Sender: "alice", ClientMsgID: "cm-2", Kind: KindRoleChange, Members: []string{"bob"},
		Role: RoleOwner, DedupWindow: DefaultDedupWindow, MaxGroupSize: 5000}
	goldenEntryV2 = Entry{Kind: KindMemberAdd, MsgID: MsgID{Shard: 3, Index: 99, Sub: 1}, Conv: "g", ConvSeq: 12,
		Sender: "bob", Time: 1_700_000_000_000_000_000, Role: RoleAdmin, MemberCount: 40}
	goldenMsgRef   = msgRef{Conv: "g", ConvSeq: 12, Recalled: true}
	goldenMsgRefV2 = msgRef{Conv: "g", ConvSeq: 12, Dedup: dedupSuffix("bob", "cm-1", KindMessage)}
	goldenDedup    = dedupRecord{
		Hash:    [16]byte{0: 0xde, 1: 0xad, 14: 0xbe, 15: 0xef},
		Expires: 1_700_086_400_000_000_000,
		Result:  AppendResult{MsgID: MsgID{Shard: 3, Index: 99}, ConvSeq: 12, Time: 1_700_000_000_000_000_000, Epoch: 5, NoOp: true},
	}
	goldenOutbox         = outboxRecord{Recipients: []string{"a", "b", "c"}, Entry: goldenEntry}
	goldenCursor         = Cursor{Epoch: 1_700_000_000_000_000_000, Pos: 41}
	goldenDeadLetter     = DeadLetter{Users: []string{"b", "c"}, Reason: "refused", FailedAt: 1_700_000_000_000_000_000, Entry: goldenEntry}
	goldenDeadLetterAdd  = DeadLetterAdd{Dest: 7, Pos: 258, Users: []string{"b", "c"}, Reason: "refused"}
	goldenDeadLetterDrop = DeadLetterDrop{Dest: 7, Pos: 258}
	goldenDeadLetterV2   = DeadLetter{Users: []string{"b", "c"}, Reason: "refused", FailedAt: 1_700_000_000_000_000_000, Entry: goldenEntry,
		Code: 15, Attempts: 3, LastTry: 1_700_000_600_000_000_000, NextTry: 1_700_001_000_000_000_000, ArchivedAt: 1_702_592_000_000_000_000}
	goldenDeadLetterAddV2  = DeadLetterAdd{Dest: 7, Pos: 258, Users: []string{"b", "c"}, Reason: "refused", Code: 15, NextTry: 1_700_000_060_000_000_000}
	goldenDeadLetterDropV2 = DeadLetterDrop{Dest: 7, Pos: 258, Archived: true}
	goldenDeadLetterTry    = DeadLetterAttempt{Dest: 7, Pos: 258, Attempt: 3, Code: 1, Reason: "refused again", NextTry: 1_700_001_000_000_000_000}
	goldenDeadLetterArch   = DeadLetterArchive{Dest: 7, Pos: 258}
	goldenMoveMarker       = moveMarker{move: 1 << 33, role: movingIn, pending: 258}
	goldenMoveMarkerV2     = moveMarker{move: 1 << 33, role: movingIn, pending: 258, epoch: 1_700_000_000_000_000_000}
	goldenMoveStep         = MoveStep{Op: MoveStage, Move: 1 << 33, User: "alice", From: 2, To: 70000,
		Records: []Record{{Key: []byte{0x20, 'a', 0}, Value: []byte{1, 2}}, {Key: []byte{0x22, 'a', 0, 'p', 0}, Value: []byte{3}}}, SourceEmpty: true}
	goldenMoveStepConv  = MoveStep{Op: MoveActivate, Move: 1 << 33, Conv: "g", From: 2, To: 70000, SourceEmpty: true, Fence: 258, Epoch: 1_700_000_000_000_000_000}
	goldenCutover       = cutover{move: 1 << 33, at: 1 << 40, after: 7, steps: []cutoverStep{{upTo: 258, shard: 3}, {upTo: 1 << 40, shard: 5}}}
	goldenMoveStepSlots = MoveStep{Op: MoveActivate, Move: 1 << 33, From: 2, To: 70000, Fence: 258, Slots: &SlotSpan{First: 2048, Last: 4095},
		Batch: []MoveKey{{User: "alice", Restart: true, Records: []Record{{Key: []byte{0x20, 'a', 0}, Value: []byte{1, 2}}}}, {Conv: "g"}}}
	goldenMoveStepSplit  = MoveStep{Op: MoveSplit, Move: 1 << 33, User: "bot", Subs: 4}
	goldenMoveStepBegin  = MoveStep{Op: MoveBegin, Move: 1 << 33, Conv: "g", From: 2, To: 70000, Splits: map[string]int{"bot": 4, "cat": 16}}
	goldenMoveStepPinned = MoveStep{Op: MoveCutover, Move: 1 << 33, From: 2, To: 70000, Slots: &SlotSpan{First: 0, Last: 7},
		Pinned: map[string]ShardID{"bot 1": 70001, "cat": 9}}
	goldenSplit        = userSplit{k: 4, at: 1 << 40}
	goldenRangeMarker  = rangeMarker{move: 1 << 33, span: SlotSpan{First: 2048, Last: 4095}, role: rangeIn, from: 2, pending: 258, fence: 1 << 40}
	goldenRangeCutover = rangeCutover{move: 1 << 33, span: SlotSpan{First: 0, Last: 7}, at: 1 << 40, from: 2, to: 70000}
	goldenRedelivery   = Redelivery{Source: 3, Item: Delivery{Pos: 258, Users: []string{"b", "c"}, Entry: goldenEntry}}
)

// Fixtures of retention tied to device cursors: a device cursor with its last sighting, and trims
// without (version 1) and with (version 2) MinAge and InactiveAfter.
var (
	goldenDeviceCursor = deviceCursor{Cursor: goldenCursor, Seen: 1_700_086_400_000_000_000}
	goldenTrim         = Trim{Target: TrimUserLog, ID: "alice", Retention: Retention{MaxCount: 1000, MaxAge: 30 * 86_400e9}}
	goldenTrimV2       = Trim{Target: TrimUserLog, ID: "alice", Retention: Retention{MaxCount: 1000, MaxAge: 30 * 86_400e9,
		MinAge: 7 * 86_400e9, InactiveAfter: 30 * 86_400e9}}
)

type goldenCase struct {
	name   string
	encode func() []byte
	decode func([]byte) (any, error)
	want   any
}

func goldenCases() []goldenCase {
	must := func(b []byte, err error) []byte {
		if err != nil {
			panic(err)
		}
		return b
	}
	return []goldenCase{
		{"append.v1", func() []byte { return must(goldenAppend.MarshalBinary()) },
			func(b []byte) (any, error) { var a Append; err := a.UnmarshalBinary(b); return a, err }, goldenAppend},
		{"append.v2", func() []byte { return must(goldenAppendV2.MarshalBinary()) },
			func(b []byte) (any, error) { var a Append; err := a.UnmarshalBinary(b); return a, err }, goldenAppendV2},
		{"entry.v2", func() []byte { return encodeEntry(&goldenEntryV2) },
			func(b []byte) (any, error) { return decodeEntry(b, 0) }, goldenEntryV2},
		{"log_meta.v2", goldenLogMetaV2.encode,
			func(b []byte) (any, error) { return decodeLogMeta(b) }, goldenLogMetaV2},
		{"log_meta.v3", goldenLogMetaV3.encode,
			func(b []byte) (any, error) { return decodeLogMeta(b) }, goldenLogMetaV3},
		{"log_meta.v4", goldenLogMetaV4.encode,
			func(b []byte) (any, error) { return decodeLogMeta(b) }, goldenLogMetaV4},
		{"member.v2", goldenMemberV2.encode,
			func(b []byte) (any, error) { return decodeMember(b) }, goldenMemberV2},
		{"member.v3", goldenMemberV3.encode,
			func(b []byte) (any, error) { return decodeMember(b) }, goldenMemberV3},
		{"log_meta.v5", goldenLogMetaV5.encode,
			func(b []byte) (any, error) { return decodeLogMeta(b) }, goldenLogMetaV5},
		{"append.v3", func() []byte { return must(goldenAppendV3.MarshalBinary()) },
			func(b []byte) (any, error) { var a Append; err := a.UnmarshalBinary(b); return a, err }, goldenAppendV3},
		{"append.v4", func() []byte { return must(goldenAppendV4.MarshalBinary()) },
			func(b []byte) (any, error) { var a Append; err := a.UnmarshalBinary(b); return a, err }, goldenAppendV4},
		{"entry.v3", func() []byte { return encodeEntry(&goldenEntryV3) },
			func(b []byte) (any, error) { return decodeEntry(b, 0) }, goldenEntryV3},
		{"append.v5", func() []byte { return must(goldenAppendV5.MarshalBinary()) },
			func(b []byte) (any, error) { var a Append; err := a.UnmarshalBinary(b); return a, err }, goldenAppendV5},
		{"entry.v4", func() []byte { return encodeEntry(&goldenEntryV4) },
			func(b []byte) (any, error) { return decodeEntry(b, 0) }, goldenEntryV4},
		{"log_meta.v5-large", goldenLogMetaV5Large.encode,
			func(b []byte) (any, error) { return decodeLogMeta(b) }, goldenLogMetaV5Large},
		{"log_meta.v6", goldenLogMetaV6.encode,
			func(b []byte) (any, error) { return decodeLogMeta(b) }, goldenLogMetaV6},
		{"mark_delivered.v1", func() []byte { return must(goldenMarkDelivered.MarshalBinary()) },
			func(b []byte) (any, error) { var r MarkDelivered; err := r.UnmarshalBinary(b); return r, err }, goldenMarkDelivered},
		{"follow.v1", func() []byte { return encodePeriods(goldenPeriods) },
			func(b []byte) (any, error) { return decodePeriods(b) }, goldenPeriods},
		{"mark_reported.v1", func() []byte { return must(goldenReported.MarshalBinary()) },
			func(b []byte) (any, error) { var r MarkReported; err := r.UnmarshalBinary(b); return r, err }, goldenReported},
		{"delivery_batch.v1", func() []byte { return must(goldenBatch.MarshalBinary()) },
			func(b []byte) (any, error) { var d DeliveryBatch; err := d.UnmarshalBinary(b); return d, err }, goldenBatch},
		{"delivery_batch.v2", func() []byte { return must(goldenBatchV2.MarshalBinary()) },
			func(b []byte) (any, error) { var d DeliveryBatch; err := d.UnmarshalBinary(b); return d, err }, goldenBatchV2},
		{"barrier.v1", func() []byte { return encodeBarrier(Barrier{Source: 3, Pos: 1 << 40}) },
			func(b []byte) (any, error) { return decodeBarrier(b) }, Barrier{Source: 3, Pos: 1 << 40}},
		{"entry.v1", func() []byte { return encodeEntry(&goldenEntry) },
			func(b []byte) (any, error) { return decodeEntry(b, 0) }, goldenEntry},
		{"log_meta.v1", goldenLogMeta.encode,
			func(b []byte) (any, error) { return decodeLogMeta(b) }, goldenLogMeta},
		{"member.v1", goldenMember.encode,
			func(b []byte) (any, error) { return decodeMember(b) }, goldenMember},
		{"msg_ref.v1", goldenMsgRef.encode,
			func(b []byte) (any, error) { return decodeMsgRef(b) }, goldenMsgRef},
		{"msg_ref.v2", goldenMsgRefV2.encode,
			func(b []byte) (any, error) { return decodeMsgRef(b) }, goldenMsgRefV2},
		{"dedup_record.v1", goldenDedup.encode,
			func(b []byte) (any, error) { return decodeDedupRecord(b) }, goldenDedup},
		{"outbox_record.v1", goldenOutbox.encode,
			func(b []byte) (any, error) { return decodeOutboxRecord(b) }, goldenOutbox},
		{"cursor.v1", func() []byte { return encodeCursor(goldenCursor) },
			func(b []byte) (any, error) { return decodeCursor(b) }, goldenCursor},
		// A device cursor without a sighting is written as a v1 cursor (records from before v2).
		{"device_cursor.v1", func() []byte { return encodeDeviceCursor(deviceCursor{Cursor: goldenCursor}) },
			func(b []byte) (any, error) { return decodeDeviceCursor(b) }, deviceCursor{Cursor: goldenCursor}},
		{"device_cursor.v2", func() []byte { return encodeDeviceCursor(goldenDeviceCursor) },
			func(b []byte) (any, error) { return decodeDeviceCursor(b) }, goldenDeviceCursor},
		{"trim.v1", func() []byte { return must(goldenTrim.MarshalBinary()) },
			func(b []byte) (any, error) { var r Trim; err := r.UnmarshalBinary(b); return r, err }, goldenTrim},
		{"trim.v2", func() []byte { return must(goldenTrimV2.MarshalBinary()) },
			func(b []byte) (any, error) { var r Trim; err := r.UnmarshalBinary(b); return r, err }, goldenTrimV2},
		{"dead_letter.v1", func() []byte { return encodeDeadLetter(&goldenDeadLetter) },
			func(b []byte) (any, error) { return decodeDeadLetter(b) }, goldenDeadLetter},
		{"dead_letter_add.v1", func() []byte { return must(goldenDeadLetterAdd.MarshalBinary()) },
			func(b []byte) (any, error) { var r DeadLetterAdd; err := r.UnmarshalBinary(b); return r, err }, goldenDeadLetterAdd},
		{"dead_letter_drop.v1", func() []byte { return must(goldenDeadLetterDrop.MarshalBinary()) },
			func(b []byte) (any, error) { var r DeadLetterDrop; err := r.UnmarshalBinary(b); return r, err }, goldenDeadLetterDrop},
		{"dead_letter.v2", func() []byte { return encodeDeadLetter(&goldenDeadLetterV2) },
			func(b []byte) (any, error) { return decodeDeadLetter(b) }, goldenDeadLetterV2},
		{"dead_letter_add.v2", func() []byte { return must(goldenDeadLetterAddV2.MarshalBinary()) },
			func(b []byte) (any, error) { var r DeadLetterAdd; err := r.UnmarshalBinary(b); return r, err }, goldenDeadLetterAddV2},
		{"dead_letter_drop.v2", func() []byte { return must(goldenDeadLetterDropV2.MarshalBinary()) },
			func(b []byte) (any, error) { var r DeadLetterDrop; err := r.UnmarshalBinary(b); return r, err }, goldenDeadLetterDropV2},
		{"dead_letter_attempt.v1", func() []byte { return must(goldenDeadLetterTry.MarshalBinary()) },
			func(b []byte) (any, error) { var r DeadLetterAttempt; err := r.UnmarshalBinary(b); return r, err }, goldenDeadLetterTry},
		{"dead_letter_archive.v1", func() []byte { return must(goldenDeadLetterArch.MarshalBinary()) },
			func(b []byte) (any, error) { var r DeadLetterArchive; err := r.UnmarshalBinary(b); return r, err }, goldenDeadLetterArch},
		{"redelivery.v1", func() []byte { return must(goldenRedelivery.MarshalBinary()) },
			func(b []byte) (any, error) { var r Redelivery; err := r.UnmarshalBinary(b); return r, err }, goldenRedelivery},
		{"move_marker.v1", goldenMoveMarker.encode,
			func(b []byte) (any, error) { return decodeMoveMarker(b) }, goldenMoveMarker},
		{"move_marker.v2", goldenMoveMarkerV2.encode,
			func(b []byte) (any, error) { return decodeMoveMarker(b) }, goldenMoveMarkerV2},
		{"pending_entry.v1", func() []byte { return encodePending(-1, &goldenEntry) },
			func(b []byte) (any, error) { _, d, e, err := decodePending(b); return [2]any{d, e}, err }, [2]any{-1, goldenEntry}},
		{"pending_entry.v2", func() []byte { return encodeRangePending("alice", -1, &goldenEntry) },
			func(b []byte) (any, error) { u, d, e, err := decodePending(b); return [3]any{u, d, e}, err }, [3]any{"alice", -1, goldenEntry}},
		{"range_marker.v1", goldenRangeMarker.encode,
			func(b []byte) (any, error) { return decodeRangeMarker(b) }, goldenRangeMarker},
		{"range_cutover.v1", goldenRangeCutover.encode,
			func(b []byte) (any, error) { return decodeRangeCutover(b) }, goldenRangeCutover},
		{"move_step_slots.v1", func() []byte { return must(goldenMoveStepSlots.MarshalBinary()) },
			func(b []byte) (any, error) { var r MoveStep; err := r.UnmarshalBinary(b); return r, err }, goldenMoveStepSlots},
		{"move_step_split.v1", func() []byte { return must(goldenMoveStepSplit.MarshalBinary()) },
			func(b []byte) (any, error) { var r MoveStep; err := r.UnmarshalBinary(b); return r, err }, goldenMoveStepSplit},
		{"move_step_begin_splits.v1", func() []byte { return must(goldenMoveStepBegin.MarshalBinary()) },
			func(b []byte) (any, error) { var r MoveStep; err := r.UnmarshalBinary(b); return r, err }, goldenMoveStepBegin},
		{"move_step_pinned.v2", func() []byte { return must(goldenMoveStepPinned.MarshalBinary()) },
			func(b []byte) (any, error) { var r MoveStep; err := r.UnmarshalBinary(b); return r, err }, goldenMoveStepPinned},
		{"split.v1", goldenSplit.encode,
			func(b []byte) (any, error) { return decodeSplit(b) }, goldenSplit},
		{"cutover.v1", goldenCutover.encode,
			func(b []byte) (any, error) { return decodeCutover(b) }, goldenCutover},
		{"move_step.v1", func() []byte { return must(goldenMoveStep.MarshalBinary()) },
			func(b []byte) (any, error) { var r MoveStep; err := r.UnmarshalBinary(b); return r, err }, goldenMoveStep},
		{"move_step_conv.v1", func() []byte { return must(goldenMoveStepConv.MarshalBinary()) },
			func(b []byte) (any, error) { var r MoveStep; err := r.UnmarshalBinary(b); return r, err }, goldenMoveStepConv},
		{"counter.v1", func() []byte { return encodeUint(1 << 40) },
			func(b []byte) (any, error) { return decodeUint(b) }, uint64(1 << 40)},
	}
}

func TestGolden(t *testing.T) {
	for _, c := range goldenCases() {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join("testdata", "golden", c.name+".hex")
			got := c.encode()
			if *update {
				writeHex(t, path, c.name, got)
			}
			want := readHex(t, path)
			if !bytes.Equal(got, want) {
				t.Errorf("encoding changed:\n got %x\nwant %x\n(a stored or replicated format changed: see the doc comment)", got, want)
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

// TestGoldenKeys pins the key layout (keys.go): every table's key for shard 0x01020304.
func TestGoldenKeys(t *testing.T) {
	k := newKeys(0x01020304)
	foldKeyOf := func(e Entry) []byte { key, _ := k.foldKey("alice", &e); return key }
	keys := []struct {
		name string
		key  []byte
	}{
		{"meta", k.meta(metaApplied)},
		{"conv", k.conv("g")},
		{"member", k.member("g", "alice")},
		{"conv_entry", k.convEntry("g", 258)},
		{"msg_index", k.msgIndex(MsgID{Shard: 3, Index: 99, Sub: 1})},
		{"user", k.user("alice")},
		{"user_entry", k.userEntry("alice", 258)},
		{"cursor", k.cursor("alice", "phone")},
		{"counts", k.count("g", countRead, 1, 258)},
		{"reported", k.reported("alice")},
		{"due", k.due("alice")},
		{"follow", k.follow("alice", "g")},
		{"fold receipt", foldKeyOf(Entry{Kind: KindReceipt, Conv: "g", Sender: "bob"})},
		{"fold edit", foldKeyOf(Entry{Kind: KindEdit, Conv: "g", Sender: "bob", Target: MsgID{Shard: 3, Index: 98}})},
		{"fold reaction", foldKeyOf(Entry{Kind: KindReaction, Conv: "g", Sender: "bob", Target: MsgID{Shard: 3, Index: 98}, Reaction: "+1"})},
		{"dedup", k.dedup(dedupSuffix("alice", "cm", KindMessage))},
		{"dedup_by_exp", k.dedupByExp(1_700_000_000_000_000_000, dedupSuffix("alice", "cm", KindMessage))},
		{"outbox", k.outbox(258)},
		{"source_mark", k.sourceMark(9)},
		{"dead_letter", k.deadLetter(9, 258)},
		{"redelivered", k.redelivered(9, 258)},
		{"dead_letter_archive", k.deadLetterArchive(9, 258)},
		{"staged", append(k.stagedPrefix(1<<33), k.userEntry("alice", 258)[len(k.prefix):]...)},
		{"moving", k.moving("alice")},
		{"pending", k.pending(1<<33, 258)},
		{"cutover", k.cutover("alice")},
	}
	var b strings.Builder
	b.WriteString("# Key layout (keys.go) for shard 0x01020304: table, key in hex.\n")
	for _, e := range keys {
		fmt.Fprintf(&b, "%s %x\n", e.name, e.key)
	}
	path := filepath.Join("testdata", "golden", "keys.v1.txt")
	if *update {
		if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if b.String() != string(want) {
		t.Errorf("key layout changed:\n%s\nwant:\n%s", b.String(), want)
	}
}

// TestGoldenSnapshot pins the snapshot stream of a small fixed state, and checks that the golden
// stream still restores to that state.
func TestGoldenSnapshot(t *testing.T) {
	src := newMemShard(t, 4)
	goldenSnapshotScript(src).run(t, src, 1)
	got, wantView, wantSum := takeSnapshot(t, src)
	path := filepath.Join("testdata", "golden", "snapshot.v1.hex")
	if *update {
		writeHex(t, path, "snapshot.v1", got)
	}
	want := readHex(t, path)
	if !bytes.Equal(got, want) {
		t.Errorf("snapshot stream changed:\n got %x\nwant %x", got, want)
	}
	dst := newMemShard(t, 4)
	if err := restore(t, dst, want); err != nil {
		t.Fatalf("golden snapshot no longer restores: %v", err)
	}
	if stateSum(t, dst) != wantSum || view(t, dst) != wantView {
		t.Errorf("golden snapshot restores to\n%s\nwant\n%s", view(t, dst), wantView)
	}
}

// TestGoldenSnapshotBeforeRoles: a snapshot of the same state written before values had their
// v2 fields still restores, and reads as it did (every member a plain member, no member count).
func TestGoldenSnapshotBeforeRoles(t *testing.T) {
	dst := newMemShard(t, 4)
	if err := restore(t, dst, readHex(t, filepath.Join("testdata", "golden", "snapshot.v1-values.v1.hex"))); err != nil {
		t.Fatalf("snapshot no longer restores: %v", err)
	}
	st, err := dst.Conversation("g1", "alice")
	if err != nil || st.Info.Head != 2 || fmt.Sprint(st.Members) != "[alice bob]" || st.Role != RoleMember || st.MemberCount != 2 {
		t.Fatalf("g1 as alice: %+v, %v", st, err)
	}
}

// TestGoldenSnapshotBeforeCounts: a snapshot of the same state written before groups kept
// histograms still restores; its group answers counts from its member records, and its first
// mark update builds the histograms, after which the answers are the same.
func TestGoldenSnapshotBeforeCounts(t *testing.T) {
	dst := newMemShard(t, 4)
	if err := restore(t, dst, readHex(t, filepath.Join("testdata", "golden", "snapshot.v1-before-counts.hex"))); err != nil {
		t.Fatalf("snapshot no longer restores: %v", err)
	}
	counts, err := dst.Receipts("g1", "alice", []Position{2})
	if err != nil || counts[0] != (ReceiptCount{ConvSeq: 2, Members: 2}) {
		t.Fatalf("counts of g1/2 from member records: %+v, %v", counts, err)
	}
	appendOK(t, dst, Stamp{Index: 5, Time: 2000}, Append{Conv: "g1", Sender: "alice", Kind: KindDelivered, ReadUpTo: 2})
	if n := countTable(t, dst, tagCounts); n == 0 {
		t.Fatal("the first mark update built no histograms")
	}
	counts, err = dst.Receipts("g1", "alice", []Position{2})
	if err != nil || counts[0] != (ReceiptCount{ConvSeq: 2, Members: 2, Delivered: 1}) {
		t.Fatalf("counts of g1/2 from histograms: %+v, %v", counts, err)
	}
}

func goldenSnapshotScript(s *Shard) script {
	return script{
		send(Append{Conv: "g1", Sender: "alice", ClientMsgID: "c", Kind: KindGroupCreate, Members: []string{"bob"}}),
		send(Append{Conv: "g1", Sender: "bob", ClientMsgID: "b1", Kind: KindMessage, Body: []byte("hi")}),
		deliverOwn(s, 0, 2),
		func(tx *Tx, st Stamp) error { return tx.SetCursor(st, "bob", "phone", Cursor{Epoch: 1030, Pos: 1}) },
	}
}

func writeHex(t *testing.T, path, name string, b []byte) {
	t.Helper()
	var s strings.Builder
	fmt.Fprintf(&s, "# %s: %d bytes (golden; regenerate with -update, see golden_test.go)\n", name, len(b))
	h := hex.EncodeToString(b)
	for len(h) > 64 {
		s.WriteString(h[:64] + "\n")
		h = h[64:]
	}
	s.WriteString(h + "\n")
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(s.String()), 0o644); err != nil {
		t.Fatal(err)
	}
}

func readHex(t *testing.T, path string) []byte {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	var h strings.Builder
	for _, line := range strings.Split(string(data), "\n") {
		if line = strings.TrimSpace(line); line != "" && !strings.HasPrefix(line, "#") {
			h.WriteString(line)
		}
	}
	b, err := hex.DecodeString(h.String())
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return b
}
