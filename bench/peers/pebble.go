package main

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"sync"

	"github.com/cockroachdb/pebble/v2"
)

// measurePebble runs the shapes on raw Pebble in this process: the floor under every durable
// store here (syncd keeps its logs in Pebble; the ceiling of what a synced commit on this disk
// costs). An append is one batch of one key, committed with pebble.Sync, so Pebble's commit
// pipeline group-commits the concurrent writers' fsyncs, as it does syncd's. There is no server
// and no network: its CPU is this process's (writers included), and it has no push.
func measurePebble(ctx context.Context, sh shapes) error {
	sys := system{name: "raw Pebble, Sync commits (in-process)", nodes: 1, self: true}
	dir, err := os.MkdirTemp("", "syncbench-pebble-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	db, err := pebble.Open(dir, &pebble.Options{})
	if err != nil {
		sys.fail(err)
		return nil
	}
	st := &pebbleStore{db: db, next: map[string]uint64{}}
	progress("%s: in %s (Pebble's default options)", sys.name, dir)
	measure(ctx, st, sys, sh)
	return db.Close()
}

// pebbleStore keeps a user's log under the prefix "u/<user>/", one key per entry, its suffix the
// position (big-endian, so key order is log order), taken from a per-log counter here, as the
// etcd store does.
type pebbleStore struct {
	db   *pebble.DB
	mu   sync.Mutex
	next map[string]uint64
}

func logPrefix(user string) []byte { return []byte("u/" + user + "/") }

func (st *pebbleStore) append(_ context.Context, user string, value []byte) error {
	st.mu.Lock()
	st.next[user]++
	pos := st.next[user]
	st.mu.Unlock()
	key := binary.BigEndian.AppendUint64(logPrefix(user), pos)
	b := st.db.NewBatch()
	defer b.Close()
	if err := b.Set(key, value, nil); err != nil {
		return err
	}
	return b.Commit(pebble.Sync)
}

// errNoPush: raw Pebble has no subscriptions.
var errNoPush = fmt.Errorf("raw Pebble has no push: %w", errors.ErrUnsupported)

func (st *pebbleStore) subscribe(context.Context, string, func([]byte), func(error)) error {
	return errNoPush
}

// read reads the log with one iterator over its prefix (a page is not a round trip here).
func (st *pebbleStore) read(ctx context.Context, user string, _ int, fn func([]byte)) (int, error) {
	lo := logPrefix(user)
	hi := append(logPrefix(user)[:len(lo)-1], '/'+1)
	it, err := st.db.NewIterWithContext(ctx, &pebble.IterOptions{LowerBound: lo, UpperBound: hi})
	if err != nil {
		return 0, err
	}
	n := 0
	for it.First(); it.Valid(); it.Next() {
		fn(it.Value())
		n++
	}
	if err := it.Error(); err != nil {
		it.Close()
		return n, err
	}
	return n, it.Close()
}
