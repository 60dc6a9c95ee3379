// Package store is the Go SDK's embedded local store: one Pebble database in a directory, owned
// by one device of one user (PROTOCOL.md §8.1). It holds the durable outbox (outbox.go), the
// sync state — user-log entries, the cursor and its epoch — (syncstate.go), the sources' (large
// groups followed through their conversation log: their cursors and entries, sources.go), what the digest
// checks read of it and the rewind that repairs what they find (runs.go), the
// per-conversation view the app queries (queries.go), the members' delivery marks and the
// statuses of the user's messages they give (marks.go), all under the versioned key layout of
// keys.go.
//
// Every write that matters after an app kill — outbox changes, a batch of entries with its
// cursor (of a sub-log or of a source), a cursor jump, a rewind — is committed with pebble.Sync; a batch of entries and the
// cursor that covers it are one atomic Pebble batch, so the cursor never runs ahead of (or
// behind) the entries it stands for. On any error nothing is written.
//
// A [Store] is safe for concurrent use: readers share a read lock, and each write (a
// read-check-write) holds the write lock, so writes are serialized. Slices a method returns
// belong to the caller.
//
// The package is internal to the SDK: package client is its only user and re-exports what an
// app sees ([Status], [Message]). Its errors therefore keep the "client:" prefix, because that is
// the package they reach the app through.
package store
