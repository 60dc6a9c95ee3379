package proto

import "github.com/syncd-dev/syncd/proto/ident"

// The sync stream. The client opens it with SyncStart carrying its stored cursor; the server
// answers with Batches of contiguous entries from there, then keeps the stream open, pushing
// new entries as they are appended and a Heartbeat while idle (or Stale, while the replica
// serving the stream is cut off from its shard's leader). TooOld, EpochChanged and Rebase
// are final: the server closes the stream after sending one, and the client restarts with a
// new stream. The client sends CursorAck after storing entries. Restarting a sync (after a gap,
// for example) always means closing the stream and opening a new one.
//
// Besides the user log, one stream serves the user's sub-logs (revision 3: the frames' Sub) and
// the sources it follows (revision 6: large groups read from their conversation log, the
// frames' Source; see sources.go).

// SyncStart opens a sync stream from the client's cursor. It is the stream's first and only
// client frame besides CursorAck. The server answers EpochChanged, TooOld or Rebase (checked in
// that order), or else streams Batches from Pos+1; a Pos beyond the head (a lagging replica),
// up to 2⁶⁴−1, just waits for the log to get there. A new SyncStart of the same device on the
// same node supersedes the older stream (CodeSuperseded).
type SyncStart struct {
	// Epoch is the user log's epoch the cursor belongs to; 0 for a device that has never
	// stored an entry (then Pos must be 0 and the client adopts the epoch of the first Batch).
	Epoch Epoch `msgpack:"epoch"`
	// Pos is the last position the device stored; 0 = from the start of the log.
	Pos Position `msgpack:"pos"`
	// Ceiling, when non-zero, caps the catch-up: if head-Pos exceeds it, the server answers
	// Rebase instead of replaying.
	Ceiling uint64 `msgpack:"ceiling"`
	// MaxBatch caps entries per Batch: 0 = the server's Limits.MaxBatch; larger values are
	// lowered to it.
	MaxBatch uint32 `msgpack:"max_batch"`
	// Subs (revision 3) is the vector cursor: the device's cursor in each sub-log of the user's
	// stream it knows, Subs[0] being Epoch and Pos again. A user whose stream an operator split
	// is served only to a client that sends it (else CodeNeedsUpgrade); one whose stream is not
	// split has one sub-log. Sub-logs the client does not list start from (0, 0).
	Subs []SubCursor `msgpack:"subs"`
	// Sources (revision 6) is the device's cursor in each source it follows: a large group's
	// conversation log, which the stream serves like a log of its own (positions are conv_seqs,
	// the epoch is the conversation log's). At most MaxSources, each conversation once. The
	// stream serves every source the user follows, listed or not: one not listed starts after
	// the conv_seq of the user-log entry that started the following (Batch.After says where). A
	// revision-6 client sends it, empty when it follows none; for a user who follows a source, a
	// SyncStart without it (an older client) is answered CodeNeedsUpgrade. An empty list and an
	// absent one are the same on the wire (docs/PROTOCOL.md §4).
	Sources []SourceCursor `msgpack:"sources"`
}

// SubCursor is a device's cursor in one sub-log of the user's stream: like SyncStart's Epoch
// and Pos, for that sub-log.
type SubCursor struct {
	Epoch Epoch    `msgpack:"epoch"`
	Pos   Position `msgpack:"pos"`
}

// MaxSubLogs is the most sub-logs a user's stream has: Sub fields are below it.
const MaxSubLogs = ident.MaxSubLogs

// FrameType implements Frame.
func (*SyncStart) FrameType() Type { return TypeSyncStart }

// Validate checks that a non-zero Pos comes with its Epoch (CodeInvalidArgument): a position
// without the epoch it belongs to cannot be checked against the log. The same holds for each
// cursor of Subs, which start with the scalar cursor, and of Sources, which name at most
// MaxSources valid conversation ids, each once (all CodeInvalidArgument).
func (s *SyncStart) Validate() error {
	if s.Pos != 0 && s.Epoch == 0 {
		return invalid("cursor position %d without an epoch", s.Pos)
	}
	if len(s.Subs) > MaxSubLogs {
		return invalid("a vector cursor of %d sub-logs: a stream has at most %d", len(s.Subs), MaxSubLogs)
	}
	for i, c := range s.Subs {
		if c.Pos != 0 && c.Epoch == 0 {
			return invalid("sub-log %d's cursor position %d without an epoch", i, c.Pos)
		}
	}
	if len(s.Subs) > 0 && s.Subs[0] != (SubCursor{s.Epoch, s.Pos}) {
		return invalid("subs[0] is (%d, %d), not the cursor's epoch and pos (%d, %d)", s.Subs[0].Epoch, s.Subs[0].Pos, s.Epoch, s.Pos)
	}
	return checkSources(s.Sources)
}

// Batch carries entries of the user log, contiguous: the first is at the position after the
// cursor (SyncStart.Pos for the first Batch, the last entry of the previous Batch after that),
// each next one at the following position. A Batch always holds at least one entry. A Batch of
// a sub-log (Sub) or of a source (Source) is the same for that log, with its own cursor.
type Batch struct {
	Epoch   Epoch    `msgpack:"epoch"`   // the user log's epoch
	Entries []Entry  `msgpack:"entries"` // contiguous user-log entries, Seq ascending by 1
	Head    Position `msgpack:"head"`    // the log's head when the batch was read (for progress)
	Sub     uint32   `msgpack:"sub"`     // the sub-log it is of (revision 3; 0: the user's own log)
	// Source (revision 6) names the source the entries are of: a large group's conversation id.
	// The entries' Seq is then their conv_seq, and contiguity, Epoch and Head are the
	// conversation log's. "" on the batches of the user log and its sub-logs; Sub is 0 on a
	// source's.
	Source string `msgpack:"source"`
	// After (revision 6, a source's batches only) is the position the first entry follows: the
	// entries are contiguous from After+1. A source's first Batch on a stream carries it. It is
	// the device's cursor, except (a) for a source the SyncStart did not name, where it is the
	// conv_seq of the user-log entry (Entry.Source) that started the following, and (b) after
	// the user was removed from the group and added again, where it is the conv_seq of the
	// member_add that added it again. A later Batch carries it only in case (b). A client
	// accepts an After other than its cursor only in those two cases, which its own log shows,
	// and then checks Follows(After); anything else is a gap. 0 (absent) when not needed.
	// Batches are not validated on decode: After without Source is never sent, and a client
	// checks such a batch against its cursor alone.
	After Position `msgpack:"after"`
}

// FrameType implements Frame.
func (*Batch) FrameType() Type { return TypeBatch }

// Follows reports whether b continues a log stored up to pos: it holds at least one entry, the
// first at pos+1 and each next one at the following position. A client that gets false must not
// store any of it: it restarts the sync from its stored cursor.
func (b *Batch) Follows(pos Position) bool {
	if len(b.Entries) == 0 {
		return false
	}
	for i := range b.Entries {
		if b.Entries[i].Seq != pos+1+Position(i) {
			return false
		}
	}
	return true
}

// Heartbeat is sent on an idle sync stream every Limits.HeartbeatMs, and right after SyncStart
// when there is nothing to replay (so the client learns the head at once). Head is the user
// log's last position: a client whose stored position stays below Head for several heartbeats without a
// Batch knows the stream is stalled and restarts it. A Heartbeat proves the head: the replica
// serving the stream heard from its shard's leader within the server's lease (a few seconds), so
// a client at Head has everything that was committed up to that long ago. A replica that cannot
// say so sends [Stale] instead, and no Heartbeat until it can again.
type Heartbeat struct {
	Epoch      Epoch    `msgpack:"epoch"`       // the user log's epoch (0 while it does not exist)
	Head       Position `msgpack:"head"`        // the user log's last position
	ServerTime int64    `msgpack:"server_time"` // server clock, Unix nanoseconds
	Sub        uint32   `msgpack:"sub"`         // the sub-log it is of (revision 3; 0: the user's own log)
	// Source (revision 6) is the source it is of (a large group's conversation id; "" for the
	// user log and its sub-logs): Epoch and Head are then the conversation log's.
	Source string `msgpack:"source"`
}

// FrameType implements Frame.
func (*Heartbeat) FrameType() Type { return TypeHeartbeat }

// Stale is sent on a sync stream instead of a Heartbeat while the replica serving it has not
// heard from the leader of the user log's shard within the server's lease: the node is cut off
// from its cluster, or the shard has no leader. Head is the last head it knows, which may be
// behind: entries after it may exist and arrive late. Stale comes when the stream is idle and the
// lease lapses (within a tick), then once per Limits.HeartbeatMs while it lasts; the stream stays
// open, and Batches and Heartbeats resume once the replica hears from a leader again. A client
// shows that it is connecting, keeps the stream, and after a while (the Go SDK: 5 s) reconnects
// through another node of the cluster if it knows one. Protocol revision 2; a server never sends
// it on a connection of revision 1 (it sends nothing there while stale, and such a client's
// silence check restarts the stream).
type Stale struct {
	Epoch     Epoch    `msgpack:"epoch"`      // the user log's epoch as last known (0 if none)
	Head      Position `msgpack:"head"`       // the user log's last position as last known
	UnheardMs uint64   `msgpack:"unheard_ms"` // since the replica last heard from its leader, in ms
	Sub       uint32   `msgpack:"sub"`        // the sub-log it is of (revision 3; 0: the user's own log)
	// Source (revision 6) is the source it is of (a large group's conversation id; "" for the
	// user log and its sub-logs): Epoch and Head are then the conversation log's, and the replica
	// is one of the conversation's shard.
	Source string `msgpack:"source"`
}

// FrameType implements Frame.
func (*Stale) FrameType() Type { return TypeStale }

// TooOld answers a SyncStart whose next position (Pos+1) was trimmed by retention: the retained
// log is [First, Head]. The client rebases (ConvList/ConvState), then syncs from Head. The
// server closes the stream after it.
type TooOld struct {
	Epoch Epoch    `msgpack:"epoch"` // the user log's epoch
	First Position `msgpack:"first"` // first retained position
	Head  Position `msgpack:"head"`  // last position
	Sub   uint32   `msgpack:"sub"`   // the sub-log it is of (revision 3; 0: the user's own log)
	// Source (revision 6) is the source it is about (a large group's conversation id; "" for
	// the user log and its sub-logs): the positions are then the conversation log's conv_seqs.
	// The client rebases that source alone, then restarts the stream.
	Source string `msgpack:"source"`
}

// FrameType implements Frame.
func (*TooOld) FrameType() Type { return TypeTooOld }

// EpochChanged answers a SyncStart whose Epoch is not the user log's: the log was re-created
// and positions from the old epoch mean nothing in it. The client drops its cursor for the old
// epoch and resyncs under the new one — unless Continues says the cursor holds in the new epoch.
// The server closes the stream after it.
type EpochChanged struct {
	Epoch Epoch    `msgpack:"epoch"` // the log's current epoch
	First Position `msgpack:"first"` // first retained position
	Head  Position `msgpack:"head"`  // last position
	Sub   uint32   `msgpack:"sub"`   // the sub-log it is of (revision 3; 0: the user's own log)
	// Source (revision 6) is the source it is about (a large group's conversation id; "" for
	// the user log and its sub-logs): the positions are then the conversation log's conv_seqs.
	// The client rebases that source alone, then restarts the stream.
	Source string `msgpack:"source"`
	// Continues (revision 8): the log was restored from a backup that holds every position up
	// to the client's cursor, so the cursor's position names the same entries in the new epoch.
	// The client keeps what it stored, sets its cursor to (Epoch, its position) and restarts the
	// stream; no resync. A client that resyncs instead is still correct.
	Continues bool `msgpack:"continues"`
}

// FrameType implements Frame.
func (*EpochChanged) FrameType() Type { return TypeEpochChanged }

// Rebase answers a SyncStart whose catch-up (Head-Pos) exceeds its Ceiling. The client rebases
// as for TooOld, then syncs from Head. The server closes the stream after it.
type Rebase struct {
	Epoch Epoch    `msgpack:"epoch"` // the user log's epoch
	Head  Position `msgpack:"head"`  // last position
	Sub   uint32   `msgpack:"sub"`   // the sub-log it is of (revision 3; 0: the user's own log)
	// Source (revision 6) is the source it is about (a large group's conversation id; "" for
	// the user log and its sub-logs): the positions are then the conversation log's conv_seqs.
	// The client rebases that source alone, then restarts the stream.
	Source string `msgpack:"source"`
}

// FrameType implements Frame.
func (*Rebase) FrameType() Type { return TypeRebase }

// CursorAck is the storage ack: the device has durably stored the user log up to Pos. The
// server records it as the device's cursor (delivery status, lag, retention); acks may be
// coalesced and only move the cursor forward. The server does not wait for them to send more.
// Besides Validate, the server refuses (CodeInvalidArgument, the stream going on) an ack of
// another epoch than the stream's or beyond the last entry the stream sent: a device cannot have
// stored more.
type CursorAck struct {
	Epoch Epoch    `msgpack:"epoch"` // the user log's epoch
	Pos   Position `msgpack:"pos"`   // last stored position, at least 1
	Sub   uint32   `msgpack:"sub"`   // the sub-log it is of (revision 3; 0: the user's own log)
	// Source (revision 6) is the source acknowledged (a large group's conversation id; "" for
	// the user log and its sub-logs): Epoch is then the conversation log's and Pos a conv_seq.
	// It is checked as a sub-log's ack is; a source's ack moves the user's delivered mark there
	// (counts only, no entry).
	Source string `msgpack:"source"`
}

// FrameType implements Frame.
func (*CursorAck) FrameType() Type { return TypeCursorAck }

// Validate checks that the cursor has an epoch and a position of at least 1, and names one log:
// a sub-log below MaxSubLogs, or a source whose id is a valid conversation id and which then
// names no sub-log (all CodeInvalidArgument).
func (c *CursorAck) Validate() error {
	if c.Epoch == 0 || c.Pos == 0 {
		return invalid("cursor ack needs an epoch and a position of at least 1")
	}
	if c.Source != "" {
		if err := checkID("source conversation id", c.Source); err != nil {
			return err
		}
		if c.Sub != 0 {
			return invalid("cursor ack of source %s and sub-log %d: a source is not a sub-log", quote(c.Source), c.Sub)
		}
	}
	if c.Sub >= MaxSubLogs {
		return invalid("cursor ack of sub-log %d: a stream has at most %d", c.Sub, MaxSubLogs)
	}
	return nil
}
