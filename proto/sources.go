package proto

// Sources (revision 6; docs/PROTOCOL.md §6, "Sources: large groups"). A group with more members
// than the server's large_group_threshold is a large group: its entries are not copied into its
// members' logs. A member's device reads them from the conversation log itself, as a source of
// its sync stream, with a cursor of its own: (the conversation log's epoch, a conv_seq). The
// user log still carries what concerns the user's own membership: the membership entry that
// starts the following and the one that ends it (both with Entry.Source set), and the user's own
// receipts there (kind 2 with conv_seq 0: not conversation entries). The client lists its
// sources' cursors in SyncStart.Sources; the server names a source in the Source of the sync
// frames (Batch, Heartbeat, Stale, TooOld, EpochChanged, Rebase) and says when the user's part
// of one ends with SourceEnd; the client acknowledges with CursorAck.Source.

// MaxSources is the most sources one SyncStart lists (SyncStart.Sources): MaxPage, the longest
// array of maps the shape check every body passes allows (docs/PROTOCOL.md §4).
const MaxSources = MaxPage

// SourceCursor (revision 6) is a device's cursor in one source of its sync stream: like
// SyncStart's Epoch and Pos, for the conversation log of the large group Conv.
type SourceCursor struct {
	Conv  string   `msgpack:"conv"`  // the large group's conversation id
	Epoch Epoch    `msgpack:"epoch"` // the conversation log's epoch the cursor belongs to
	Pos   Position `msgpack:"pos"`   // the last conv_seq the device stored; non-zero requires Epoch
}

// checkSources checks SyncStart.Sources: at most MaxSources cursors, each of a valid
// conversation id named once, and each non-zero Pos with its Epoch (all CodeInvalidArgument).
func checkSources(sources []SourceCursor) error {
	if len(sources) > MaxSources {
		return invalid("%d sources, at most %d", len(sources), MaxSources)
	}
	if len(sources) == 0 {
		return nil
	}
	seen := make(map[string]struct{}, len(sources))
	for _, c := range sources {
		if err := checkID("source conversation id", c.Conv); err != nil {
			return err
		}
		if c.Pos != 0 && c.Epoch == 0 {
			return invalid("source %s's cursor position %d without an epoch", quote(c.Conv), c.Pos)
		}
		if _, dup := seen[c.Conv]; dup {
			return invalid("source %s listed twice: each conversation at most once", quote(c.Conv))
		}
		seen[c.Conv] = struct{}{}
	}
	return nil
}

// SourceEnd (revision 6) tells the client that the user has no entry of the source Source after
// Last: the user was removed from the group at Last+1 (the member_remove, with Entry.Source set,
// in its own log), or the SyncStart listed a source the user does not follow after the listed
// position (Last is then that position). The server sends it once the stream has sent the source
// up to Last. The client drops the source's cursor; if the user is added again, its log gets a
// new entry with Entry.Source set and the source's frames come again.
type SourceEnd struct {
	Source string   `msgpack:"source"` // the large group's conversation id
	Last   Position `msgpack:"last"`   // the last conv_seq of the source that was the user's
}

// FrameType implements Frame.
func (*SourceEnd) FrameType() Type { return TypeSourceEnd }
