// Shared test helpers: in-memory and on-disk shards, a driver that applies one command per Tx
// exactly as the state machine in raftstore does (skip an already-applied index; otherwise Begin,
// op, SetApplied, Commit), and readable formatting of results for the datadriven scripts.
//
// The driver also checks, for every rejected command in every test, the Tx contract that a
// rejected operation leaves the batch as it was (no partial writes).
package log

import (
	"errors"
	"fmt"
	stdlog "log"
	"slices"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// tb is what the helpers need from *testing.T, *testing.B, *testing.F and *rapid.T.
type tb interface {
	Helper()
	Fatalf(format string, args ...any)
	Errorf(format string, args ...any)
	Cleanup(func())
}

// testShardID is the shard id used where the id does not matter.
const testShardID ShardID = 1

// quietLogger drops Pebble's informational messages ("Found 0 WALs"), keeping errors.
type quietLogger struct{}

func (quietLogger) Infof(string, ...any)              {}
func (quietLogger) Errorf(format string, args ...any) { stdlog.Printf(format, args...) }
func (quietLogger) Fatalf(format string, args ...any) { panic(fmt.Sprintf(format, args...)) }

// testOptions returns Pebble options for tests on fs.
func testOptions(fs vfs.FS) *pebble.Options {
	return &pebble.Options{FS: fs, Logger: quietLogger{}}
}

// newMemDB opens a Pebble database on an in-memory filesystem, closed at the end of the test.
func newMemDB(t tb) *pebble.DB {
	t.Helper()
	db, err := pebble.Open("", testOptions(vfs.NewMem()))
	if err != nil {
		t.Fatalf("open pebble: %v", err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return db
}

// newMemShard opens shard id on a fresh in-memory database.
func newMemShard(t tb, id ShardID) *Shard {
	t.Helper()
	s, err := OpenShard(newMemDB(t), id)
	if err != nil {
		t.Fatalf("open shard: %v", err)
	}
	return s
}

// apply mirrors the state machine applying one committed command. A command at or below the
// applied index is a replay and is skipped without opening a Tx (skipped=true). Otherwise op runs
// in a Tx that records st.Index and commits without sync; op's error is returned (the command is
// rejected but its index is consumed). Storage errors fail the test.
func apply(t tb, s *Shard, st Stamp, op func(tx *Tx) error) (skipped bool, opErr error) {
	t.Helper()
	applied, err := s.Applied()
	if err != nil {
		t.Fatalf("applied: %v", err)
	}
	if st.Index <= applied {
		return true, nil
	}
	tx := s.Begin()
	defer tx.Close()
	before := tx.b.Count()
	opErr = op(tx)
	if opErr != nil && tx.b.Count() != before {
		t.Errorf("rejected command (%v) left %d writes in the Tx", opErr, tx.b.Count()-before)
	}
	if err := tx.SetApplied(st.Index); err != nil {
		t.Fatalf("set applied: %v", err)
	}
	if err := tx.Commit(false); err != nil {
		t.Fatalf("commit: %v", err)
	}
	return false, opErr
}

// mustApply is apply for commands expected to succeed.
func mustApply(t tb, s *Shard, st Stamp, op func(tx *Tx) error) {
	t.Helper()
	if skipped, err := apply(t, s, st, op); err != nil || skipped {
		t.Fatalf("apply index %d: skipped=%v err=%v", st.Index, skipped, err)
	}
}

// appendOK applies req at st and returns the result, failing the test on an error.
func appendOK(t tb, s *Shard, st Stamp, req Append) AppendResult {
	t.Helper()
	var res AppendResult
	mustApply(t, s, st, func(tx *Tx) error {
		var err error
		res, err = tx.Append(st, &req)
		return err
	})
	return res
}

// stateSum returns the shard's StateChecksum, failing the test on an error.
func stateSum(t tb, s *Shard) [2]uint64 {
	t.Helper()
	sum, n, err := s.StateChecksum()
	if err != nil {
		t.Fatalf("state checksum: %v", err)
	}
	return [2]uint64{sum, n}
}

// outboxBatch builds the delivery batch (prev, last] from the shard's own outbox, delivering every
// recipient to the shard itself, as a single-shard fan-out worker would; with only set, just the
// recipients among only, as a worker would for a destination holding those users.
func outboxBatch(t tb, s *Shard, prev, last uint64, only ...string) *DeliveryBatch {
	t.Helper()
	b := &DeliveryBatch{Source: s.ID(), Prev: prev, Last: last}
	if last <= prev {
		return b
	}
	items, err := s.ReadOutbox(prev+1, int(last-prev))
	if err != nil {
		t.Fatalf("read outbox (%d, %d]: %v", prev, last, err)
	}
	for _, it := range items {
		if it.Pos > last {
			break
		}
		users := it.Recipients
		if only != nil {
			users = slices.DeleteFunc(slices.Clone(users), func(u string) bool { return !slices.Contains(only, u) })
		}
		if len(users) > 0 {
			b.Items = append(b.Items, Delivery{Pos: it.Pos, Users: users, Entry: it.Entry.CopyFor(users)})
		}
	}
	return b
}

// readAll reads the whole retained log of uid (or of conv when conv is true).
func readAll(t tb, s *Shard, id string, conv bool) (LogInfo, []Entry) {
	t.Helper()
	var out []Entry
	var info LogInfo
	from := Position(0)
	for {
		var r Read
		var err error
		if from == 0 {
			if conv {
				info, err = s.ConvInfo(id)
			} else {
				info, err = s.UserInfo(id)
			}
			if err != nil {
				t.Fatalf("info %s: %v", id, err)
			}
			from = info.First
		}
		if conv {
			r, err = s.ReadConv(id, info.Epoch, from, Limit{})
		} else {
			r, err = s.ReadUser(id, info.Epoch, from, Limit{})
		}
		if err != nil {
			t.Fatalf("read %s from %d: %v", id, from, err)
		}
		switch r.Status {
		case ReadCaughtUp:
			return r.Info, out
		case ReadEntries:
			for i, e := range r.Entries {
				if e.Seq != from+Position(i) {
					t.Fatalf("read %s from %d: entry %d has seq %d", id, from, i, e.Seq)
				}
			}
			out = append(out, r.Entries...)
			from += Position(len(r.Entries))
		default:
			t.Fatalf("read %s from %d: status %s", id, from, r.Status)
		}
	}
}

// fmtResult formats an AppendResult for scripts.
func fmtResult(r AppendResult) string {
	var b strings.Builder
	if r.NoOp {
		fmt.Fprintf(&b, "noop time=%d epoch=%d", r.Time, r.Epoch)
	} else {
		fmt.Fprintf(&b, "msg=%s conv_seq=%d time=%d epoch=%d", r.MsgID, r.ConvSeq, r.Time, r.Epoch)
	}
	if r.Duplicate {
		b.WriteString(" duplicate")
	}
	return b.String()
}

// fmtEntry formats one entry on one line.
func fmtEntry(e *Entry) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d: %s %s %s/%d by %s t=%d", e.Seq, e.Kind, e.MsgID, e.Conv, e.ConvSeq, e.Sender, e.Time)
	if e.Body != nil {
		fmt.Fprintf(&b, " body=%q", e.Body)
	}
	if e.ReadUpTo != 0 {
		fmt.Fprintf(&b, " upto=%d", e.ReadUpTo)
	}
	if !e.Target.IsZero() {
		fmt.Fprintf(&b, " target=%s", e.Target)
	}
	if e.Members != nil {
		fmt.Fprintf(&b, " members=%s", strings.Join(e.Members, ","))
	}
	if e.Role != 0 {
		fmt.Fprintf(&b, " role=%s", e.Role)
	}
	if e.MemberCount != 0 {
		fmt.Fprintf(&b, " member-count=%d", e.MemberCount)
	}
	return b.String()
}

// fmtRead formats a Read: status and info, then one line per entry.
func fmtRead(r Read) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s epoch=%d first=%d head=%d", r.Status, r.Info.Epoch, r.Info.First, r.Info.Head)
	for i := range r.Entries {
		b.WriteString("\n" + fmtEntry(&r.Entries[i]))
	}
	return b.String()
}

// fmtErr formats an error, naming the sentinel it wraps and the mark of an OutOfOrderError.
func fmtErr(err error) string {
	var ooo *OutOfOrderError
	if errors.As(err, &ooo) {
		return fmt.Sprintf("error: out of order: mark=%d prev=%d", ooo.Mark, ooo.Prev)
	}
	return "error: " + err.Error()
}

// tableNames names the key tables for the "state" summary.
var tableNames = map[byte]string{
	tagMeta: "meta", tagConv: "conv", tagMember: "member", tagConvEntry: "conv_entry",
	tagMsgIndex: "msg_index", tagCounts: "counts", tagReported: "reported", tagDue: "due", tagUser: "user", tagUserEntry: "user_entry", tagCursor: "cursor", tagUserConv: "user_conv",
	tagDedup: "dedup", tagDedupByExp: "dedup_exp", tagOutbox: "outbox", tagSourceMark: "source_mark",
}

// tableCounts counts the shard's keys per table, in tag order.
func tableCounts(t tb, s *Shard) string {
	t.Helper()
	lower, upper := s.k.shardBounds()
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: upper})
	if err != nil {
		t.Fatalf("iter: %v", err)
	}
	defer it.Close()
	counts := map[byte]int{}
	for ok := it.First(); ok; ok = it.Next() {
		counts[it.Key()[len(lower)]]++
	}
	var tags []byte
	for tag := range counts {
		tags = append(tags, tag)
	}
	slices.Sort(tags)
	var parts []string
	for _, tag := range tags {
		name, ok := tableNames[tag]
		if !ok {
			name = fmt.Sprintf("tag%#x", tag)
		}
		parts = append(parts, fmt.Sprintf("%s=%d", name, counts[tag]))
	}
	return strings.Join(parts, " ")
}

// countTable returns the number of keys in one table of the shard.
func countTable(t tb, s *Shard, tag byte) int {
	t.Helper()
	lower := s.k.table(tag, 0)
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: prefixEnd(lower)})
	if err != nil {
		t.Fatalf("iter: %v", err)
	}
	defer it.Close()
	n := 0
	for ok := it.First(); ok; ok = it.Next() {
		n++
	}
	return n
}

var _ tb = (*testing.T)(nil)
