package store

import (
	"errors"
	"log/slog"
	"path/filepath"
	"testing"

	"github.com/cockroachdb/pebble/v2"

	"github.com/syncd-dev/syncd/proto"
)

func TestStoreFormatVersion(t *testing.T) {
	dir := t.TempDir()
	s := stOpen(t, dir)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second close: %v", err)
	}
	if _, _, err := s.Cursor(); !errors.Is(err, ErrClosed) {
		t.Fatalf("cursor after close: %v, want ErrClosed", err)
	}
	if _, err := s.AddOutbox(OutboxItem{Kind: proto.KindMessage, Conv: "c"}); !errors.Is(err, ErrClosed) {
		t.Fatalf("addOutbox after close: %v, want ErrClosed", err)
	}

	// A store of a future format is refused.
	db, err := pebble.Open(dir, &pebble.Options{Logger: pebbleLogger{slog.New(slog.DiscardHandler)}})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Set(sk.format(), uintValue(formatVersion+1), pebble.Sync); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if s, err := Open(dir, nil); err == nil {
		_ = s.Close()
		t.Fatal("Open of a newer format: no error")
	}

	// So is a database with data but no format key.
	other := filepath.Join(t.TempDir(), "other")
	db, err = pebble.Open(other, &pebble.Options{Logger: pebbleLogger{slog.New(slog.DiscardHandler)}})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Set([]byte("foreign"), []byte("x"), pebble.Sync); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if s, err := Open(other, nil); err == nil {
		_ = s.Close()
		t.Fatal("Open of a foreign database: no error")
	}
}
