// Snapshot tests: a snapshot streamed with WriteTo and restored elsewhere (a fresh on-disk
// database, another shard id, over existing data) reproduces the captured state exactly (same
// StateChecksum, same answers to every read, and the restored shard goes on applying commands
// as a replica of the source: G2 "all replicas hold identical entries at identical positions").
// A damaged stream (truncated anywhere, any byte flipped) is refused with ErrCorrupt and leaves
// NeedsRestore set, across a reopen, until a good restore clears it.
package log

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
)

var (
	snapConvs = []string{"g1", "d:alice:carol", "d:old:older"}
	snapUsers = []string{"alice", "bob", "carol", "old"}
)

// openDiskShard opens shard id in a Pebble database in dir; the caller closes db.
func openDiskShard(t *testing.T, dir string, id ShardID) (*pebble.DB, *Shard) {
	t.Helper()
	db, err := pebble.Open(dir, testOptions(vfs.Default))
	if err != nil {
		t.Fatal(err)
	}
	s, err := OpenShard(db, id)
	if err != nil {
		db.Close()
		t.Fatal(err)
	}
	return db, s
}

// script is a deterministic command sequence; commands[i] runs at index first+i.
type script []func(tx *Tx, st Stamp) error

func (sc script) run(t tb, s *Shard, first uint64) {
	t.Helper()
	for i, cmd := range sc {
		st := Stamp{Index: first + uint64(i), Time: 1000 + 10*int64(first+uint64(i))}
		mustApply(t, s, st, func(tx *Tx) error { return cmd(tx, st) })
	}
}

func send(req Append) func(*Tx, Stamp) error {
	return func(tx *Tx, st Stamp) error { _, err := tx.Append(st, &req); return err }
}

func deliverOwn(s *Shard, prev, last uint64) func(*Tx, Stamp) error {
	return func(tx *Tx, st Stamp) error {
		b := &DeliveryBatch{Source: s.ID(), Prev: prev, Last: last}
		items, err := s.ReadOutbox(prev+1, int(last-prev))
		if err != nil {
			return err
		}
		for _, it := range items {
			b.Items = append(b.Items, Delivery{Pos: it.Pos, Users: it.Recipients, Entry: it.Entry})
		}
		_, err = tx.Deliver(st, b)
		return err
	}
}

// baseScript builds a state touching every table: conversations, members, entries, msg index,
// user logs, cursors, dedup records, outbox (partly trimmed) and source marks.
func baseScript(s *Shard) script {
	return script{
		send(Append{Conv: "g1", Sender: "alice", ClientMsgID: "c", Kind: KindGroupCreate, Members: []string{"bob", "carol"}}),
		send(Append{Conv: "g1", Sender: "bob", ClientMsgID: "b1", Kind: KindMessage, Body: []byte("hello")}),
		send(Append{Conv: "d:alice:carol", Sender: "alice", ClientMsgID: "a1", Kind: KindMessage, Body: []byte("psst"), Members: []string{"alice", "carol"}}),
		send(Append{Conv: "g1", Sender: "carol", ClientMsgID: "r1", Kind: KindReceipt, ReadUpTo: 2}),
		send(Append{Conv: "g1", Sender: "bob", ClientMsgID: "x1", Kind: KindRecall, Target: MsgID{Shard: s.ID(), Index: 2}}),
		deliverOwn(s, 0, 5),
		func(tx *Tx, st Stamp) error { return tx.TrimOutbox(3) },
		func(tx *Tx, st Stamp) error { return tx.SetCursor(st, "carol", "phone", Cursor{Epoch: 1060, Pos: 2}) },
		func(tx *Tx, st Stamp) error {
			_, err := tx.Deliver(st, &DeliveryBatch{Source: 9, Prev: 0, Last: 4, Items: []Delivery{{
				Pos: 2, Users: []string{"bob"}, Entry: Entry{Kind: KindMessage, MsgID: MsgID{9, 40, 0}, Conv: "z", ConvSeq: 1, Sender: "zed"},
			}}})
			return err
		},
		func(tx *Tx, st Stamp) error { _, err := tx.TrimUser(st, "alice", Retention{MaxCount: 2}); return err },
	}
}

// moreScript continues baseScript, to check a restored shard keeps applying like its source.
func moreScript(s *Shard) script {
	return script{
		send(Append{Conv: "g1", Sender: "alice", ClientMsgID: "a2", Kind: KindMessage, Body: []byte("later")}),
		send(Append{Conv: "g1", Sender: "bob", ClientMsgID: "b1", Kind: KindMessage, Body: []byte("hello")}), // resend
		deliverOwn(s, 5, 7),
		func(tx *Tx, st Stamp) error { return tx.SetCursor(st, "carol", "phone", Cursor{Epoch: 1060, Pos: 4}) },
	}
}

// otherScript builds unrelated state, for restoring over existing data.
func otherScript() script {
	return script{
		send(Append{Conv: "d:old:older", Sender: "old", ClientMsgID: "o", Kind: KindMessage, Body: []byte("x"), Members: []string{"old", "older"}}),
		func(tx *Tx, st Stamp) error {
			_, err := tx.Deliver(st, &DeliveryBatch{Source: 9, Prev: 0, Last: 9, Items: []Delivery{{
				Pos: 9, Users: []string{"old"}, Entry: Entry{Kind: KindMessage, MsgID: MsgID{9, 1, 0}, Conv: "z", ConvSeq: 1},
			}}})
			return err
		},
		func(tx *Tx, st Stamp) error { return tx.SetCursor(st, "old", "pc", Cursor{Epoch: 1020, Pos: 1}) },
	}
}

// view renders everything a reader can learn from the shard. (Restored entries keep the msg ids
// they were given, whatever the shard id restored into.)
func view(t *testing.T, s *Shard) string {
	t.Helper()
	var b strings.Builder
	applied, err := s.Applied()
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(&b, "applied=%d\n", applied)
	for _, c := range snapConvs {
		if info, err := s.ConvInfo(c); err != nil {
			fmt.Fprintf(&b, "conv %s: %v\n", c, err)
			continue
		} else {
			r, err := s.ReadConv(c, info.Epoch, info.First, Limit{})
			if err != nil {
				t.Fatal(err)
			}
			fmt.Fprintf(&b, "conv %s: %s\n", c, fmtRead(r))
		}
	}
	for _, u := range snapUsers {
		info, err := s.UserInfo(u)
		if err != nil {
			t.Fatal(err)
		}
		r, err := s.ReadUser(u, info.Epoch, info.First, Limit{})
		if err != nil {
			t.Fatal(err)
		}
		cs, err := s.Cursors(u)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&b, "user %s: %s\ncursors %v\n", u, fmtRead(r), cs)
	}
	info, err := s.Outbox()
	if err != nil {
		t.Fatal(err)
	}
	items, err := s.ReadOutbox(info.First, 0)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(&b, "outbox %+v: %d items\n", info, len(items))
	for _, src := range []ShardID{testShardID, 9} {
		mark, err := s.SourceMark(src)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&b, "mark %d: %d\n", src, mark)
	}
	return b.String()
}

// takeSnapshot writes the shard's current state and returns the bytes, its view and checksum.
func takeSnapshot(t *testing.T, s *Shard) ([]byte, string, [2]uint64) {
	t.Helper()
	sn := s.NewSnapshot()
	defer sn.Close()
	var buf bytes.Buffer
	n, err := sn.WriteTo(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if n != int64(buf.Len()) {
		t.Fatalf("WriteTo reported %d bytes, wrote %d", n, buf.Len())
	}
	return buf.Bytes(), view(t, s), stateSum(t, s)
}

func restore(t *testing.T, s *Shard, data []byte) error {
	t.Helper()
	return s.Restore(bytes.NewReader(data))
}

func checkNeedsRestore(t *testing.T, s *Shard, want bool) {
	t.Helper()
	if got, err := s.NeedsRestore(); err != nil || got != want {
		t.Fatalf("NeedsRestore = %v, %v; want %v", got, err, want)
	}
}

func TestSnapshotRoundTrip(t *testing.T) {
	srcDB, src := openDiskShard(t, t.TempDir(), testShardID)
	defer srcDB.Close()
	baseScript(src).run(t, src, 1)

	// The snapshot is a point in time: writes after NewSnapshot are not in it.
	sn := src.NewSnapshot()
	wantView, wantSum := view(t, src), stateSum(t, src)
	applied, err := sn.Applied()
	if err != nil || applied != uint64(len(baseScript(src))) {
		t.Fatalf("snapshot applied = %d, %v", applied, err)
	}
	more := moreScript(src)
	more.run(t, src, applied+1)
	var buf bytes.Buffer
	if _, err := sn.WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	if err := sn.Close(); err != nil {
		t.Fatal(err)
	}
	data := buf.Bytes()

	t.Run("fresh disk db, same shard", func(t *testing.T) {
		dir := t.TempDir()
		db, dst := openDiskShard(t, dir, testShardID)
		if err := restore(t, dst, data); err != nil {
			t.Fatal(err)
		}
		checkNeedsRestore(t, dst, false)
		if got := stateSum(t, dst); got != wantSum {
			t.Fatalf("restored checksum %v, want %v", got, wantSum)
		}
		if got := view(t, dst); got != wantView {
			t.Fatalf("restored view:\n%s\nwant:\n%s", got, wantView)
		}
		// The restored shard is a replica: the same later commands give the source's state.
		moreScript(dst).run(t, dst, applied+1)
		if stateSum(t, dst) != stateSum(t, src) || view(t, dst) != view(t, src) {
			t.Fatal("restored shard diverged from its source after the same commands")
		}
		// It survives a reopen.
		sum := stateSum(t, dst)
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
		db, dst = openDiskShard(t, dir, testShardID)
		defer db.Close()
		checkNeedsRestore(t, dst, false)
		if stateSum(t, dst) != sum {
			t.Fatal("state changed across reopen")
		}
	})

	t.Run("another shard id", func(t *testing.T) {
		db := newMemDB(t)
		dst, err := OpenShard(db, 7)
		if err != nil {
			t.Fatal(err)
		}
		// A neighbour shard in the same database is not touched by the restore.
		other, err := OpenShard(db, 8)
		if err != nil {
			t.Fatal(err)
		}
		otherScript().run(t, other, 1)
		otherSum := stateSum(t, other)
		if err := restore(t, dst, data); err != nil {
			t.Fatal(err)
		}
		if got := stateSum(t, dst); got != wantSum {
			t.Fatalf("restored checksum %v, want %v", got, wantSum)
		}
		if got := view(t, dst); got != wantView {
			t.Fatalf("restored view:\n%s\nwant:\n%s", got, wantView)
		}
		if stateSum(t, other) != otherSum {
			t.Fatal("restore changed a neighbour shard")
		}
	})

	t.Run("over existing data", func(t *testing.T) {
		dst := newMemShard(t, testShardID)
		otherScript().run(t, dst, 1)
		if _, err := dst.ConvInfo("d:old:older"); err != nil {
			t.Fatalf("setup: %v", err)
		}
		if err := restore(t, dst, data); err != nil {
			t.Fatal(err)
		}
		if got := stateSum(t, dst); got != wantSum {
			t.Fatalf("restored checksum %v, want %v: old keys left behind?", got, wantSum)
		}
		if got := view(t, dst); got != wantView {
			t.Fatalf("restored view:\n%s\nwant:\n%s", got, wantView)
		}
		if _, err := dst.ConvInfo("d:old:older"); !errors.Is(err, ErrNoConversation) {
			t.Fatalf("old conversation survived the restore: %v", err)
		}
	})
}

func TestRestoreRejectsDamage(t *testing.T) {
	src := newMemShard(t, testShardID)
	baseScript(src).run(t, src, 1)
	data, wantView, wantSum := takeSnapshot(t, src)
	hdr := len(snapMagic) + 5

	dir := t.TempDir()
	db, dst := openDiskShard(t, dir, testShardID)
	defer func() { db.Close() }()
	otherScript().run(t, dst, 1)

	// A stream refused by its header (too short for one, not a snapshot, another version) leaves
	// the state as it was; one refused past it leaves the shard marked incomplete.
	refuse := func(what string, bad []byte) {
		t.Helper()
		inHeader := len(bad) < hdr || !bytes.Equal(bad[:len(snapMagic)+1], data[:len(snapMagic)+1]) // short, or magic or version
		wasIncomplete, err := dst.NeedsRestore()
		if err != nil {
			t.Fatal(err)
		}
		sumBefore := stateSum(t, dst)
		err = restore(t, dst, bad)
		if !errors.Is(err, ErrCorrupt) {
			t.Fatalf("%s: Restore = %v, want ErrCorrupt", what, err)
		}
		if !inHeader {
			checkNeedsRestore(t, dst, true)
			return
		}
		checkNeedsRestore(t, dst, wasIncomplete)
		if stateSum(t, dst) != sumBefore {
			t.Fatalf("%s: refused by its header, yet the state changed", what)
		}
	}
	good := func() {
		t.Helper()
		if err := restore(t, dst, data); err != nil {
			t.Fatal(err)
		}
		checkNeedsRestore(t, dst, false)
		if stateSum(t, dst) != wantSum || view(t, dst) != wantView {
			t.Fatal("good restore after a failed one did not reproduce the snapshot")
		}
	}

	cuts := []int{0, 1, len(snapMagic), hdr - 1, hdr, hdr + 1, hdr + 2, len(data) / 3, len(data) / 2,
		len(data) - 14, len(data) - 13, len(data) - 12, len(data) - 5, len(data) - 4, len(data) - 1}
	for _, cut := range cuts {
		refuse(fmt.Sprintf("cut at %d of %d", cut, len(data)), data[:cut])
	}
	good()

	// A failed restore is remembered across a restart: the state is incomplete.
	refuse("cut in half", data[:len(data)/2])
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	db, dst = openDiskShard(t, dir, testShardID)
	checkNeedsRestore(t, dst, true)
	good()

	// Every single flipped byte is detected (magic, version, records, trailer, checksum).
	stride := max(1, len(data)/400)
	for i := 0; i < len(data); i += stride {
		bad := bytes.Clone(data)
		bad[i] ^= 0x40
		refuse(fmt.Sprintf("byte %d of %d flipped", i, len(data)), bad)
	}
	for i := len(data) - 13; i < len(data); i++ { // the whole trailer, whatever the stride
		bad := bytes.Clone(data)
		bad[i] ^= 0x01
		refuse(fmt.Sprintf("trailer byte %d flipped", i), bad)
	}
	refuse("not a snapshot", []byte("hello, world, this is not a snapshot"))
	good()

	// A later version (a newer leader's, during a rolling upgrade) is refused whole: the state
	// stays complete and as it was, and the error says to upgrade.
	later := bytes.Clone(data)
	later[len(snapMagic)] = snapVersion + 1
	refuse("a later version", later)
	checkNeedsRestore(t, dst, false)
	if err := restore(t, dst, later); err == nil || !strings.Contains(err.Error(), "upgrade this node") {
		t.Fatalf("a later version: %v, want an error that says to upgrade", err)
	}
	if view(t, dst) != wantView {
		t.Fatal("a refused later version changed what the shard serves")
	}
}

// An empty shard snapshots and restores too (format key only).
func TestSnapshotEmptyShard(t *testing.T) {
	src := newMemShard(t, 5)
	data, wantView, wantSum := takeSnapshot(t, src)
	dst := newMemShard(t, 6)
	otherScript().run(t, dst, 1)
	if err := restore(t, dst, data); err != nil {
		t.Fatal(err)
	}
	if stateSum(t, dst) != wantSum || view(t, dst) != wantView {
		t.Fatal("empty snapshot not reproduced")
	}
}

// The writer caches log metas; a restore must drop them, or the next append would continue from
// the pre-restore head and break contiguity.
func TestRestoreDropsCachedMetas(t *testing.T) {
	s := newMemShard(t, testShardID)
	msg := func(i uint64) Append {
		return Append{Conv: "d:a:b", Sender: "a", ClientMsgID: fmt.Sprint("m", i), Kind: KindMessage,
			Body: []byte("x"), Members: []string{"a", "b"}}
	}
	for i := uint64(1); i <= 2; i++ {
		appendOK(t, s, Stamp{Index: i, Time: 100}, msg(i))
	}
	data, _, _ := takeSnapshot(t, s)
	for i := uint64(3); i <= 5; i++ { // the cache now says head 5
		appendOK(t, s, Stamp{Index: i, Time: 100}, msg(i))
	}
	if err := restore(t, s, data); err != nil {
		t.Fatal(err)
	}
	res := appendOK(t, s, Stamp{Index: 3, Time: 100}, msg(30))
	if res.ConvSeq != 3 {
		t.Fatalf("append after restore got conv_seq %d, want 3", res.ConvSeq)
	}
}

// failAfter accepts limit bytes, then fails every write: a snapshot file on a disk that filled
// up, or a follower that went away mid-stream.
type failAfter struct {
	limit, n   int
	afterFail  int // writes attempted after the first failure
	failedOnce bool
}

var errDiskFull = errors.New("no space left on device")

func (w *failAfter) Write(p []byte) (int, error) {
	if w.failedOnce {
		w.afterFail++
	}
	if w.n+len(p) <= w.limit {
		w.n += len(p)
		return len(p), nil
	}
	k := w.limit - w.n
	w.n, w.failedOnce = w.limit, true
	return k, errDiskFull
}

// TestSnapshotWriteToStopsAtWriterError: a writer failing anywhere in the stream (header,
// records, trailer, checksum) makes WriteTo return its error at once, reporting no more bytes
// than were written, and write nothing after it.
func TestSnapshotWriteToStopsAtWriterError(t *testing.T) {
	s := newMemShard(t, testShardID)
	baseScript(s).run(t, s, 1)
	full, _, _ := takeSnapshot(t, s)
	for _, limit := range []int{0, 5, len(full) / 2, len(full) - 5, len(full) - 1} {
		w := &failAfter{limit: limit}
		sn := s.NewSnapshot()
		n, err := sn.WriteTo(w)
		sn.Close()
		if !errors.Is(err, errDiskFull) {
			t.Fatalf("writer failing after %d of %d bytes: WriteTo = %d, %v", limit, len(full), n, err)
		}
		if n > int64(limit) || w.afterFail > 0 {
			t.Fatalf("writer failing after %d bytes: WriteTo reported %d bytes and wrote %d times after the failure", limit, n, w.afterFail)
		}
	}
}
