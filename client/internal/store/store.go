package store

import (
	"errors"
	"fmt"
	"log/slog"
	"sync"

	"github.com/cockroachdb/pebble/v2"
)

// ErrClosed is returned by every method of a Store after Close.
var ErrClosed = errors.New("client: store closed")

// Store is the device's local store: outbox, sync cursor, user-log entries and the message view.
// It is safe for concurrent use; writes are serialized (each is a read-check-write).
type Store struct {
	mu sync.RWMutex // read-locked by readers, locked by writers and close
	db *pebble.DB   // nil once closed
}

// Open opens (creating if needed) the store in dir. A new store gets the current format
// version; a store of another format, or a non-empty database without a format key, is refused.
// Pebble's own log lines go to logger (nil means slog.Default()), informational ones at debug
// level, so an app that configures the SDK's logger gets the store's warnings there too.
func Open(dir string, logger *slog.Logger) (*Store, error) {
	if logger == nil {
		logger = slog.Default()
	}
	db, err := pebble.Open(dir, &pebble.Options{Logger: pebbleLogger{logger}})
	if err != nil {
		return nil, fmt.Errorf("client: open store %s: %w", dir, err)
	}
	if err := checkFormat(db); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("client: store %s: %w", dir, err)
	}
	return &Store{db: db}, nil
}

// checkFormat writes the format version into an empty database and checks it otherwise.
func checkFormat(db *pebble.DB) error {
	v, ok, err := getUint(db, sk.format())
	switch {
	case err != nil:
		return err
	case ok && v != formatVersion:
		return fmt.Errorf("format version %d, this build reads %d", v, formatVersion)
	case ok:
		return nil
	}
	it, err := db.NewIter(nil)
	if err != nil {
		return err
	}
	nonEmpty := it.First()
	if err := errors.Join(it.Error(), it.Close()); err != nil {
		return err
	}
	if nonEmpty {
		return errors.New("database has data but no format version: not a syncd client store")
	}
	return db.Set(sk.format(), uintValue(formatVersion), pebble.Sync)
}

// Close closes the database. Later calls of any method return ErrClosed; closing twice is
// harmless.
func (s *Store) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.db == nil {
		return nil
	}
	err := s.db.Close()
	s.db = nil
	return err
}

// read returns the database for a reader, read-locked; the caller must call s.mu.RUnlock.
func (s *Store) read() (*pebble.DB, error) {
	s.mu.RLock()
	if s.db == nil {
		s.mu.RUnlock()
		return nil, ErrClosed
	}
	return s.db, nil
}

// write returns the database for a writer, locked; the caller must call s.mu.Unlock.
func (s *Store) write() (*pebble.DB, error) {
	s.mu.Lock()
	if s.db == nil {
		s.mu.Unlock()
		return nil, ErrClosed
	}
	return s.db, nil
}

// pebbleLogger sends Pebble's logs to slog: informational messages at debug level.
type pebbleLogger struct{ l *slog.Logger }

// Infof implements pebble.Logger.
func (p pebbleLogger) Infof(format string, args ...any) {
	p.l.Debug(fmt.Sprintf(format, args...), "component", "client/pebble")
}

// Errorf implements pebble.Logger.
func (p pebbleLogger) Errorf(format string, args ...any) {
	p.l.Error(fmt.Sprintf(format, args...), "component", "client/pebble")
}

// Fatalf implements pebble.Logger: Pebble cannot go on (e.g. a corrupt store), so it panics
// rather than exiting the app's process behind its back.
func (p pebbleLogger) Fatalf(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	p.l.Error(msg, "component", "client/pebble")
	panic("client: pebble: " + msg)
}
