// Fuzz targets for every decoder of bytes this package did not necessarily write itself: Raft
// request encodings, stored values, snapshot streams, and whole restored states. They prove G7's
// "bad input never crashes the server": decoders never panic and fail only with ErrCorrupt; a
// value that decodes re-encodes canonically to bytes that decode to the same value; Restore never
// panics and either succeeds or fails with ErrCorrupt leaving NeedsRestore set; and no read or
// write on a restored state of arbitrary keys and values panics.
//
// Seeds come from MarshalBinary/encode output (the golden fixtures) plus truncations, and from
// testdata/fuzz/<FuzzName>/. Run one with: go test -run='^$' -fuzz=FuzzDecodeEntry ./log/
package log

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"reflect"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// addSeeds adds each encoding, its truncations, a version-byte change and a trailing byte.
func addSeeds(f *testing.F, encs ...[]byte) {
	for _, b := range encs {
		f.Add(b)
		for _, cut := range []int{0, 1, 2, len(b) / 2, len(b) - 1} {
			if cut >= 0 && cut < len(b) {
				f.Add(bytes.Clone(b[:cut]))
			}
		}
		if len(b) > 0 {
			c := bytes.Clone(b)
			c[0]++
			f.Add(c)
		}
		f.Add(append(bytes.Clone(b), 0))
	}
}

// roundTrip checks one decoder on data.
func roundTrip[V any](t *testing.T, data []byte, decode func([]byte) (V, error), encode func(V) []byte) {
	t.Helper()
	v, err := decode(data)
	if err != nil {
		if !errors.Is(err, ErrCorrupt) {
			t.Fatalf("decode error %v does not wrap ErrCorrupt", err)
		}
		return
	}
	enc := encode(v)
	v2, err := decode(enc)
	if err != nil {
		t.Fatalf("re-encoding %x of %+v does not decode: %v", enc, v, err)
	}
	if !reflect.DeepEqual(v, v2) {
		t.Fatalf("round trip changed the value:\n%+v\n%+v", v, v2)
	}
	if enc2 := encode(v2); !bytes.Equal(enc, enc2) {
		t.Fatalf("encoding not canonical: %x then %x", enc, enc2)
	}
}

func FuzzAppendUnmarshal(f *testing.F) {
	for _, a := range []Append{goldenAppend, goldenAppendV2, goldenAppendV3, goldenAppendV4, goldenAppendV5, {}, {Conv: "c", Sender: "s", ClientMsgID: "m", Kind: KindMessage}} {
		b, _ := a.MarshalBinary()
		addSeeds(f, b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		roundTrip(t, data,
			func(b []byte) (Append, error) { var a Append; err := a.UnmarshalBinary(b); return a, err },
			func(a Append) []byte { b, _ := a.MarshalBinary(); return b })
	})
}

func FuzzDeliveryBatchUnmarshal(f *testing.F) {
	for _, d := range []DeliveryBatch{goldenBatch, goldenBatchV2, {Source: 1, Prev: 0, Last: 1}} {
		b, _ := d.MarshalBinary()
		addSeeds(f, b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		roundTrip(t, data,
			func(b []byte) (DeliveryBatch, error) { var d DeliveryBatch; err := d.UnmarshalBinary(b); return d, err },
			func(d DeliveryBatch) []byte { b, _ := d.MarshalBinary(); return b })
	})
}

func FuzzDecodeEntry(f *testing.F) {
	addSeeds(f, encodeEntry(&goldenEntry), encodeEntry(&goldenEntryV3), encodeEntry(&goldenEntryV4), encodeEntry(&Entry{}))
	f.Fuzz(func(t *testing.T, data []byte) {
		roundTrip(t, data, func(b []byte) (Entry, error) { return decodeEntry(b, 5) }, func(e Entry) []byte {
			b := encodeEntry(&e)
			if len(b) != entryLen(&e) || cap(b) != len(b) { // sized exactly, allocated once
				t.Fatalf("entryLen %d, encoding %d bytes in a buffer of %d", entryLen(&e), len(b), cap(b))
			}
			return b
		})
	})
}

func FuzzDecodeLogMeta(f *testing.F) {
	addSeeds(f, goldenLogMeta.encode(), goldenLogMetaV4.encode(), goldenLogMetaV5.encode(), goldenLogMetaV5Large.encode(), goldenLogMetaV6.encode(), logMeta{}.encode())
	f.Fuzz(func(t *testing.T, data []byte) { roundTrip(t, data, decodeLogMeta, logMeta.encode) })
}

func FuzzDecodeDedupRecord(f *testing.F) {
	addSeeds(f, goldenDedup.encode(), dedupRecord{}.encode())
	f.Fuzz(func(t *testing.T, data []byte) { roundTrip(t, data, decodeDedupRecord, dedupRecord.encode) })
}

func FuzzDecodeOutboxRecord(f *testing.F) {
	addSeeds(f, goldenOutbox.encode(), outboxRecord{}.encode())
	f.Fuzz(func(t *testing.T, data []byte) { roundTrip(t, data, decodeOutboxRecord, outboxRecord.encode) })
}

func FuzzDecodeMsgRef(f *testing.F) {
	addSeeds(f, goldenMsgRef.encode(), goldenMsgRefV2.encode(), msgRef{}.encode())
	f.Fuzz(func(t *testing.T, data []byte) { roundTrip(t, data, decodeMsgRef, msgRef.encode) })
}

func FuzzDecodeCursor(f *testing.F) {
	addSeeds(f, encodeCursor(goldenCursor), encodeCursor(Cursor{}))
	f.Fuzz(func(t *testing.T, data []byte) { roundTrip(t, data, decodeCursor, encodeCursor) })
}

func FuzzDecodeDeviceCursor(f *testing.F) {
	addSeeds(f, encodeDeviceCursor(goldenDeviceCursor), encodeDeviceCursor(deviceCursor{Cursor: goldenCursor}),
		encodeDeviceCursor(deviceCursor{Seen: -1}))
	f.Fuzz(func(t *testing.T, data []byte) { roundTrip(t, data, decodeDeviceCursor, encodeDeviceCursor) })
}

func FuzzTrimUnmarshal(f *testing.F) {
	for _, r := range []Trim{goldenTrim, goldenTrimV2, {}, {Target: TrimOutboxLog, UpTo: 258}} {
		b, _ := r.MarshalBinary()
		addSeeds(f, b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		roundTrip(t, data, func(b []byte) (Trim, error) { var r Trim; err := r.UnmarshalBinary(b); return r, err },
			func(r Trim) []byte { b, _ := r.MarshalBinary(); return b })
	})
}

func FuzzDecodeMember(f *testing.F) {
	addSeeds(f, goldenMember.encode(), goldenMemberV2.encode(), goldenMemberV3.encode())
	f.Fuzz(func(t *testing.T, data []byte) { roundTrip(t, data, decodeMember, member.encode) })
}

func FuzzMarkReportedUnmarshal(f *testing.F) {
	for _, r := range []MarkReported{goldenReported, {}} {
		b, _ := r.MarshalBinary()
		addSeeds(f, b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		roundTrip(t, data,
			func(b []byte) (MarkReported, error) { var r MarkReported; err := r.UnmarshalBinary(b); return r, err },
			func(r MarkReported) []byte { b, _ := r.MarshalBinary(); return b })
	})
}

func FuzzDecodeDeadLetter(f *testing.F) {
	addSeeds(f, encodeDeadLetter(&goldenDeadLetter), encodeDeadLetter(&goldenDeadLetterV2), encodeDeadLetter(&DeadLetter{}))
	f.Fuzz(func(t *testing.T, data []byte) {
		roundTrip(t, data, decodeDeadLetter, func(dl DeadLetter) []byte { return encodeDeadLetter(&dl) })
	})
}

// FuzzDeadLetterRequests feeds each input to the decoders of the dead-letter commands.
func FuzzDeadLetterRequests(f *testing.F) {
	for _, r := range []interface{ MarshalBinary() ([]byte, error) }{&goldenDeadLetterAdd, &goldenDeadLetterDrop, &goldenRedelivery, &Redelivery{},
		&goldenDeadLetterAddV2, &goldenDeadLetterDropV2, &goldenDeadLetterTry, &goldenDeadLetterArch} {
		b, _ := r.MarshalBinary()
		addSeeds(f, b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		roundTrip(t, data,
			func(b []byte) (DeadLetterAdd, error) { var r DeadLetterAdd; err := r.UnmarshalBinary(b); return r, err },
			func(r DeadLetterAdd) []byte { b, _ := r.MarshalBinary(); return b })
		roundTrip(t, data,
			func(b []byte) (DeadLetterDrop, error) {
				var r DeadLetterDrop
				err := r.UnmarshalBinary(b)
				return r, err
			},
			func(r DeadLetterDrop) []byte { b, _ := r.MarshalBinary(); return b })
		roundTrip(t, data,
			func(b []byte) (Redelivery, error) { var r Redelivery; err := r.UnmarshalBinary(b); return r, err },
			func(r Redelivery) []byte { b, _ := r.MarshalBinary(); return b })
		roundTrip(t, data,
			func(b []byte) (DeadLetterAttempt, error) {
				var r DeadLetterAttempt
				err := r.UnmarshalBinary(b)
				return r, err
			},
			func(r DeadLetterAttempt) []byte { b, _ := r.MarshalBinary(); return b })
		roundTrip(t, data,
			func(b []byte) (DeadLetterArchive, error) {
				var r DeadLetterArchive
				err := r.UnmarshalBinary(b)
				return r, err
			},
			func(r DeadLetterArchive) []byte { b, _ := r.MarshalBinary(); return b })
	})
}

func FuzzMarkDeliveredUnmarshal(f *testing.F) {
	for _, r := range []MarkDelivered{goldenMarkDelivered, {}} {
		b, _ := r.MarshalBinary()
		addSeeds(f, b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		roundTrip(t, data,
			func(b []byte) (MarkDelivered, error) { var r MarkDelivered; err := r.UnmarshalBinary(b); return r, err },
			func(r MarkDelivered) []byte { b, _ := r.MarshalBinary(); return b })
	})
}

func FuzzDecodeFollow(f *testing.F) {
	addSeeds(f, encodePeriods(goldenPeriods), encodePeriods(nil))
	f.Fuzz(func(t *testing.T, data []byte) { roundTrip(t, data, decodePeriods, encodePeriods) })
}

func FuzzDecodeCounter(f *testing.F) {
	addSeeds(f, encodeUint(0), encodeUint(1<<63))
	f.Fuzz(func(t *testing.T, data []byte) { roundTrip(t, data, decodeUint, encodeUint) })
}

// fuzzSeedState is a small real state touching most tables, as a script.
func fuzzSeedState(s *Shard) script {
	return append(goldenSnapshotScript(s),
		send(Append{Conv: "g1", Sender: "bob", ClientMsgID: "r", Kind: KindReceipt, ReadUpTo: 2}),
		func(tx *Tx, st Stamp) error { return tx.TrimOutbox(1) },
		// alice's stream split: the records after it route to her sub-logs.
		func(tx *Tx, st Stamp) error { _, err := tx.SplitUser("alice", 3); return err },
		send(Append{Conv: "g1", Sender: "bob", ClientMsgID: "after-split", Kind: KindMessage, Body: []byte("s")}),
		// A large group: its meta flag, and a message that writes no outbox record.
		send(Append{Conv: "big", Sender: "bob", ClientMsgID: "big", Kind: KindGroupCreate, Members: []string{"alice", "carol"}, LargeGroupThreshold: 2}),
		send(Append{Conv: "big", Sender: "bob", ClientMsgID: "big-1", Kind: KindMessage, Body: []byte("b")}),
	)
}

func snapshotBytes(t tb, s *Shard) []byte {
	sn := s.NewSnapshot()
	defer sn.Close()
	var buf bytes.Buffer
	if _, err := sn.WriteTo(&buf); err != nil {
		t.Fatalf("snapshot: %v", err)
	}
	return buf.Bytes()
}

func FuzzRestore(f *testing.F) {
	src := newMemShard(f, 4)
	fuzzSeedState(src).run(f, src, 1)
	addSeeds(f, snapshotBytes(f, src), snapshotBytes(f, newMemShard(f, 5)))
	f.Add([]byte(snapMagic))
	shard := recycledShard(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		s := shard()
		neededBefore, nerr := s.NeedsRestore()
		if nerr != nil {
			t.Fatalf("NeedsRestore: %v", nerr)
		}
		sumBefore, _, err := s.StateChecksum()
		if err != nil {
			t.Fatal(err)
		}
		err = s.Restore(bytes.NewReader(data))
		needs, nerr := s.NeedsRestore()
		// A failed restore either leaves the shard marked incomplete, or, refused by its header
		// before anything was touched, leaves it exactly as it was.
		untouched := func() bool {
			sum, _, serr := s.StateChecksum()
			return serr == nil && sum == sumBefore && needs == neededBefore
		}
		switch {
		case nerr != nil:
			t.Fatalf("NeedsRestore: %v", nerr)
		case err == nil && needs:
			t.Fatal("successful restore left NeedsRestore set")
		case err != nil && !needs && !untouched():
			t.Fatalf("failed restore (%v) cleared NeedsRestore and changed the state", err)
		case err != nil && !errors.Is(err, ErrCorrupt):
			t.Fatalf("restore error %v does not wrap ErrCorrupt", err)
		}
		if _, _, err := s.StateChecksum(); err != nil {
			t.Fatalf("state checksum after restore: %v", err)
		}
	})
}

// recycledShard returns a function giving a shard on an in-memory database that is replaced
// every few hundred calls: every Restore replaces the whole state anyway, and a fresh database
// keeps range tombstones from piling up and slowing the fuzzer down.
func recycledShard(f *testing.F) func() *Shard {
	var db *pebble.DB
	var s *Shard
	calls := 0
	f.Cleanup(func() {
		if db != nil {
			_ = db.Close()
		}
	})
	return func() *Shard {
		if calls%256 == 0 {
			if db != nil {
				_ = db.Close()
			}
			var err error
			if db, err = pebble.Open("", testOptions(vfs.NewMem())); err != nil {
				f.Fatalf("open: %v", err)
			}
			if s, err = OpenShard(db, 4); err != nil {
				f.Fatalf("open shard: %v", err)
			}
		}
		calls++
		return s
	}
}

// encodeSnapshot frames arbitrary key suffixes and values as a valid snapshot stream.
func encodeSnapshot(records [][2][]byte) []byte {
	b := binary.BigEndian.AppendUint32(append([]byte(snapMagic), snapVersion), 1)
	for _, r := range records {
		b = append(b, 1)
		b = binary.AppendUvarint(b, uint64(len(r[0])))
		b = append(b, r[0]...)
		b = binary.AppendUvarint(b, uint64(len(r[1])))
		b = append(b, r[1]...)
	}
	b = binary.BigEndian.AppendUint64(append(b, 0), uint64(len(records)))
	return binary.BigEndian.AppendUint32(b, crc32.Checksum(b, crc32.MakeTable(crc32.Castagnoli)))
}

// parseRecords reads "klen u8 | key | vlen u8 | value" records; a key is never empty.
func parseRecords(data []byte) [][2][]byte {
	var out [][2][]byte
	for len(data) > 0 {
		kl := int(data[0])%64 + 1
		data = data[1:]
		if len(data) < kl+1 {
			break
		}
		key := data[:kl]
		vl := int(data[kl])
		data = data[kl+1:]
		vl = min(vl, len(data))
		out = append(out, [2][]byte{key, data[:vl]})
		data = data[vl:]
	}
	return out
}

// stateRecords renders a shard's state in parseRecords' format.
func stateRecords(t tb, s *Shard) []byte {
	lower, upper := s.k.shardBounds()
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: upper})
	if err != nil {
		t.Fatalf("iter: %v", err)
	}
	defer it.Close()
	var out []byte
	for ok := it.First(); ok; ok = it.Next() {
		k, v := it.Key()[len(lower):], it.Value()
		if len(k) > 64 || len(v) > 255 {
			continue
		}
		out = append(append(append(out, byte(len(k)-1)), k...), byte(len(v)))
		out = append(out, v...)
	}
	return out
}

// FuzzRestoredState restores a validly framed snapshot of arbitrary keys and values (what a
// buggy peer or a damaged disk could hand over) and runs every read and write on it: errors are
// expected, panics are not.
func FuzzRestoredState(f *testing.F) {
	src := newMemShard(f, 4)
	fuzzSeedState(src).run(f, src, 1)
	f.Add(stateRecords(f, src))
	f.Add([]byte{})
	shard := recycledShard(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		s := shard()
		if err := s.Restore(bytes.NewReader(encodeSnapshot(parseRecords(data)))); err != nil {
			t.Fatalf("restore of a valid stream: %v", err)
		}
		exerciseShard(t, s)
	})
}

// exerciseShard calls every read and every Tx operation with the ids of fuzzSeedState.
func exerciseShard(t *testing.T, s *Shard) {
	_, _ = s.Applied()
	_, _, _ = s.StateChecksum()
	if info, err := s.Outbox(); err == nil {
		_, _ = s.ReadOutbox(max(info.First, 1), 4)
	}
	_, _ = s.SourceMark(4)
	for _, u := range []string{"alice", "bob", SubLog("alice", 2)} {
		_, _ = s.UserInfo(u)
		_, _ = s.ReadUser(u, 0, 1, Limit{})
		_, _ = s.Checksum(u, 1, 2)
		_, _ = s.Cursors(u)
		_, _ = s.RetentionDue(TrimUserLog, u, 2000, Retention{MaxCount: 1, MinAge: 1, InactiveAfter: 1})
	}
	_, _ = s.ConvInfo("g1")
	_, _ = s.ReadConv("g1", 0, 1, Limit{})
	_, _ = s.ReadConvBefore("g1", 3, Limit{})
	st := Stamp{Index: 100, Time: 2000}
	tx := s.Begin()
	defer tx.Close()
	_, _ = tx.Applied()
	for _, req := range []Append{
		{Conv: "g1", Sender: "bob", ClientMsgID: "b1", Kind: KindMessage, Body: []byte("hi")},
		{Conv: "g1", Sender: "alice", ClientMsgID: "n", Kind: KindMessage, Body: []byte("x")},
		{Conv: "g1", Sender: "alice", ClientMsgID: "r", Kind: KindReceipt, ReadUpTo: 1},
		{Conv: "g1", Sender: "bob", ClientMsgID: "x", Kind: KindRecall, Target: MsgID{Shard: 4, Index: 2}},
		{Conv: "g1", Sender: "alice", ClientMsgID: "a", Kind: KindMemberAdd, Members: []string{"carol"}},
		{Conv: "g1", Sender: "alice", ClientMsgID: "c", Kind: KindGroupCreate},
	} {
		_, _ = tx.Append(st, &req)
	}
	_, _ = tx.Deliver(st, &DeliveryBatch{Source: 4, Prev: 0, Last: 3, Items: []Delivery{
		{Pos: 3, Users: []string{"bob"}, Entry: goldenEntry}}})
	_ = tx.SetCursor(st, "bob", "phone", Cursor{Epoch: 1030, Pos: 1})
	_ = tx.TrimOutbox(2)
	_, _ = tx.TrimUser(st, "bob", Retention{MaxAge: 1 << 40, MinAge: 1, InactiveAfter: 1})
	_, _ = tx.TrimUser(st, "bob", Retention{MaxCount: 1, MaxAge: 1})
	_, _ = tx.TrimConv(st, "g1", Retention{MaxCount: 1, MaxAge: 1})
	// Every step of a slot move over all slots, on whatever markers the state holds.
	all := &SlotSpan{First: 0, Last: NumSlots - 1}
	for _, op := range []MoveOp{MoveBegin, MoveStage, MoveCutover, MoveFence, MoveActivate, MoveSettle, MoveDrop, MoveDropped, MoveCancel} {
		_, _ = tx.Move(st, &MoveStep{Op: op, Move: 9, From: 4, To: 5, Fence: 1, Slots: all,
			Batch: []MoveKey{{User: "bob", Restart: true}, {Conv: "g1"}}})
	}
	_, _, _ = s.KeysInSlots(*all)
	// A split's step, and the splits a move's first step installs.
	_, _ = tx.Move(st, &MoveStep{Op: MoveSplit, Move: 10, User: "bob", Subs: 3})
	_, _ = tx.Move(st, &MoveStep{Op: MoveBegin, Move: 11, User: "carol", From: 4, To: 5, Splits: map[string]int{"alice": 3, "bob": 2}})
	// A range's cutover leaving a pinned user behind.
	_, _ = tx.Move(st, &MoveStep{Op: MoveCutover, Move: 12, From: 4, To: 5, Slots: all, Pinned: map[string]ShardID{"alice": 6}})
}

// FuzzMoveValues feeds each input to the decoders of a move: the Raft request (MoveStep) and the
// values it stores (move marker, held entry, cutover, barrier).
func FuzzMoveValues(f *testing.F) {
	step, _ := goldenMoveStep.MarshalBinary()
	convStep, _ := goldenMoveStepConv.MarshalBinary()
	slotsStep, _ := goldenMoveStepSlots.MarshalBinary()
	splitStep, _ := goldenMoveStepSplit.MarshalBinary()
	beginStep, _ := goldenMoveStepBegin.MarshalBinary()
	pinnedStep, _ := goldenMoveStepPinned.MarshalBinary()
	addSeeds(f, step, convStep, slotsStep, goldenMoveMarker.encode(), goldenCutover.encode(), encodePending(-1, &goldenEntry),
		encodeRangePending("alice", 2, &goldenEntry), encodeBarrier(Barrier{Source: 3, Pos: 1 << 40}), goldenMoveMarkerV2.encode(),
		goldenRangeMarker.encode(), goldenRangeCutover.encode(), splitStep, beginStep, goldenSplit.encode(), pinnedStep)
	f.Fuzz(func(t *testing.T, data []byte) {
		roundTrip(t, data,
			func(b []byte) (MoveStep, error) { var r MoveStep; err := r.UnmarshalBinary(b); return r, err },
			func(r MoveStep) []byte { b, _ := r.MarshalBinary(); return b })
		roundTrip(t, data, decodeMoveMarker, moveMarker.encode)
		roundTrip(t, data, decodeCutover, func(c cutover) []byte { return c.encode() })
		roundTrip(t, data, decodeBarrier, encodeBarrier)
		roundTrip(t, data, decodeRangeMarker, func(m rangeMarker) []byte { return m.encode() })
		roundTrip(t, data, decodeRangeCutover, func(c rangeCutover) []byte { return c.encode() })
		roundTrip(t, data, decodeSplit, userSplit.encode)
		roundTrip(t, data,
			func(b []byte) ([3]any, error) { u, d, e, err := decodePending(b); return [3]any{u, d, e}, err },
			func(v [3]any) []byte {
				e := v[2].(Entry)
				if u := v[0].(string); u != "" {
					return encodeRangePending(u, v[1].(int), &e)
				}
				return encodePending(v[1].(int), &e)
			})
	})
}
