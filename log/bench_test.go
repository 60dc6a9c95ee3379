// Benchmarks for profiling the two hot paths: applying one send per Tx (as the state machine
// does, without fsync) and a default-size read of a user log.
//
//	go test -run='^$' -bench=. -benchmem -cpuprofile=cpu.out ./log/
package log

import (
	"fmt"
	"testing"
)

// BenchmarkAppend applies one message to a 10-member group per Tx, with SetApplied and
// Commit(false): dedup lookup, membership, conv entry, msg index, dedup record, outbox record.
func BenchmarkAppend(b *testing.B) {
	s := newMemShard(b, testShardID)
	members := make([]string, 9)
	for i := range members {
		members[i] = fmt.Sprintf("user-%d", i+1)
	}
	appendOK(b, s, Stamp{Index: 1, Time: 1}, Append{Conv: "group", Sender: "user-0", ClientMsgID: "create",
		Kind: KindGroupCreate, Members: members})
	body := make([]byte, 100)
	idx := uint64(1)
	b.ReportAllocs()
	for b.Loop() {
		idx++
		st := Stamp{Index: idx, Time: int64(idx)}
		req := Append{Conv: "group", Sender: members[idx%9], ClientMsgID: fmt.Sprint("m", idx),
			Kind: KindMessage, Body: body}
		tx := s.Begin()
		if _, err := tx.Append(st, &req); err != nil {
			b.Fatal(err)
		}
		if err := tx.SetApplied(idx); err != nil {
			b.Fatal(err)
		}
		if err := tx.Commit(false); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkReadUser reads DefaultReadCount entries from a 10,000-entry user log, from rotating
// positions (BenchmarkScanUser: the same through ScanUser).
func BenchmarkReadUser(b *testing.B) {
	const n = 10_000
	s := newMemShard(b, testShardID)
	fillBenchLog(b, s, n)
	info, err := s.UserInfo("u")
	if err != nil || info.Head != n {
		b.Fatalf("setup: %+v %v", info, err)
	}
	i := 0
	b.ReportAllocs()
	for b.Loop() {
		from := Position(i*DefaultReadCount%(n-DefaultReadCount)) + 1
		i++
		r, err := s.ReadUser("u", info.Epoch, from, Limit{})
		if err != nil || r.Status != ReadEntries || len(r.Entries) != DefaultReadCount {
			b.Fatalf("read from %d: %v %d %v", from, r.Status, len(r.Entries), err)
		}
	}
}

// fillBenchLog delivers n messages with 100-byte bodies to user "u", 500 per batch.
func fillBenchLog(b *testing.B, s *Shard, n uint64) {
	const batch = 500
	for start := uint64(0); start < n; start += batch {
		d := &DeliveryBatch{Source: 2, Prev: start, Last: start + batch}
		for pos := start + 1; pos <= start+batch; pos++ {
			d.Items = append(d.Items, Delivery{Pos: pos, Users: []string{"u"}, Entry: Entry{
				Kind: KindMessage, MsgID: MsgID{Shard: 2, Index: pos}, Conv: "c", ConvSeq: Position(pos),
				Sender: "v", Time: int64(pos), Body: make([]byte, 100),
			}})
		}
		st := Stamp{Index: start/batch + 1, Time: 1}
		mustApply(b, s, st, func(tx *Tx) error { _, err := tx.Deliver(st, d); return err })
	}
}
