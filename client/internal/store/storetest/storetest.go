// Package storetest damages a closed client store on purpose, for tests of the SDK's digest
// checks (PROTOCOL.md §8.7): it opens the Pebble database directly and changes it as a storage
// bug, a bad restore or a hand edit would, behind the store's back. It knows the key layout of
// format version 1 (store/keys.go) and refuses a store of another format, so a layout change
// breaks its tests rather than making it damage the wrong keys.
package storetest

import (
	"encoding/binary"
	"errors"
	"fmt"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/syncd-dev/syncd/proto"
)

// Damage is an open store to damage. Not safe for concurrent use; the store must not be open
// elsewhere (Pebble's lock refuses it).
type Damage struct {
	t  testing.TB
	db *pebble.DB
}

// Open opens the store in dir (closed by its Client) for damage, failing the test if it cannot
// or if the store is not of format version 1. Close it before the store is opened again.
func Open(t testing.TB, dir string) *Damage {
	t.Helper()
	db, err := pebble.Open(dir, &pebble.Options{Logger: testLogger{t}})
	if err != nil {
		t.Fatalf("storetest: open %s: %v", dir, err)
	}
	d := &Damage{t: t, db: db}
	if v := d.get([]byte{0x01, 'v'}); len(v) != 8 || binary.BigEndian.Uint64(v) != 1 {
		db.Close()
		t.Fatalf("storetest: %s is not a store of format version 1 (format value %x)", dir, v)
	}
	return d
}

// Close closes the database.
func (d *Damage) Close() {
	d.t.Helper()
	if err := d.db.Close(); err != nil {
		d.t.Fatalf("storetest: close: %v", err)
	}
}

// entryKey is the key of the entry at seq of sub-log sub: 0x10 seq, or 0x18 sub seq.
func entryKey(sub uint32, seq proto.Position) []byte {
	k := []byte{0x10}
	if sub != 0 {
		k = []byte{0x18, byte(sub)}
	}
	return binary.BigEndian.AppendUint64(k, uint64(seq))
}

// viewKey is the key of the message-view record of (conv, convSeq): 0x12 conv 0x00 conv_seq.
func viewKey(conv string, convSeq proto.Position) []byte {
	return binary.BigEndian.AppendUint64(append(append([]byte{0x12}, conv...), 0), uint64(convSeq))
}

// get returns the value at key, nil if none.
func (d *Damage) get(key []byte) []byte {
	d.t.Helper()
	v, closer, err := d.db.Get(key)
	if errors.Is(err, pebble.ErrNotFound) {
		return nil
	}
	if err != nil {
		d.t.Fatalf("storetest: get %x: %v", key, err)
	}
	defer closer.Close()
	return append([]byte(nil), v...)
}

// set writes a value, synced.
func (d *Damage) set(key, value []byte) {
	d.t.Helper()
	if err := d.db.Set(key, value, pebble.Sync); err != nil {
		d.t.Fatalf("storetest: set %x: %v", key, err)
	}
}

// rewrite decodes the value at key (a version byte 1, then msgpack) into v, lets change alter it
// and writes it back. The key must hold a value.
func (d *Damage) rewrite(key []byte, v any, change func()) {
	d.t.Helper()
	old := d.get(key)
	if len(old) == 0 || old[0] != 1 {
		d.t.Fatalf("storetest: no value of version 1 at %x", key)
	}
	if err := msgpack.Unmarshal(old[1:], v); err != nil {
		d.t.Fatalf("storetest: decode %x: %v", key, err)
	}
	change()
	b, err := msgpack.Marshal(v)
	if err != nil {
		d.t.Fatalf("storetest: encode %x: %v", key, err)
	}
	d.set(key, append([]byte{1}, b...))
}

// SetEntryBody replaces the body of the stored entry at seq of sub-log sub: a mangled message.
func (d *Damage) SetEntryBody(sub uint32, seq proto.Position, body []byte) {
	d.t.Helper()
	var e proto.Entry
	d.rewrite(entryKey(sub, seq), &e, func() { e.Body = body })
}

// DeleteEntry deletes the stored entry at seq of sub-log sub: a lost write.
func (d *Damage) DeleteEntry(sub uint32, seq proto.Position) {
	d.t.Helper()
	if d.get(entryKey(sub, seq)) == nil {
		d.t.Fatalf("storetest: no entry at %d of sub-log %d", seq, sub)
	}
	if err := d.db.Delete(entryKey(sub, seq), pebble.Sync); err != nil {
		d.t.Fatalf("storetest: delete: %v", err)
	}
}

// SetMessageBody replaces the body of the message at (conv, convSeq) in the message view: what
// the app shows, mangled.
func (d *Damage) SetMessageBody(conv string, convSeq proto.Position, body []byte) {
	d.t.Helper()
	var m map[string]any
	d.rewrite(viewKey(conv, convSeq), &m, func() { m["body"] = body })
}

// testLogger sends Pebble's errors to the test log and drops its chatter (WAL replays).
type testLogger struct{ t testing.TB }

// Infof implements pebble.Logger.
func (testLogger) Infof(string, ...any) {}

// Errorf implements pebble.Logger.
func (l testLogger) Errorf(format string, args ...any) {
	l.t.Logf("storetest: pebble: "+format, args...)
}

// Fatalf implements pebble.Logger: Pebble cannot go on, and may be on a goroutine of its own,
// where t.Fatal must not be called.
func (testLogger) Fatalf(format string, args ...any) {
	panic("storetest: pebble: " + fmt.Sprintf(format, args...))
}
