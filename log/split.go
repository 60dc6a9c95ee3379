package log

import (
	"encoding/binary"
	"hash/fnv"
	"maps"
	"slices"

	"github.com/cockroachdb/pebble/v2"

	"github.com/syncd-dev/syncd/proto/ident"
)

// Splits: where a source shard's outbox sends the entries of a user whose stream is split into
// sub-logs (docs/MOVES.md, "Sub-logs").
//
// A user U split into k sub-logs receives each conversation's entries in one sub-log,
// SubLogOf(conv, k); sub-log 0 is U's own log and the others are ordinary user logs named
// SubLog(U, i), each routed to its shard like any user. Every source shard X switches at a
// position of its own outbox, p, like a move's cutover: records up to p still go to U's own log,
// later ones to their conversation's sub-log. p is X's outbox head when X applies the split, so a
// record's log is a function of its position and X's replicated state, the same on every replica
// and for every resend of a batch.
//
//	0x68 | uid 0x00    version u8 | k u8 | p u64

const tagSplit byte = 0x68

func (k keys) split(uid string) []byte { return appendID(k.table(tagSplit, len(uid)+1), uid) }

// MaxSubLogs is the most sub-logs one user's stream can be split into.
const MaxSubLogs = ident.MaxSubLogs

// SubLog returns the id of the log holding sub-log i of uid's stream: uid itself for 0,
// otherwise "uid i", which no user id can be (ids have no space).
func SubLog(uid string, i int) string { return ident.SubLog(uid, i) }

// ParseLog returns the user and the sub-log index of a user-log id; ok is false if id names no
// user's log.
func ParseLog(id string) (uid string, sub int, ok bool) { return ident.ParseLog(id) }

// SubLogOf returns the sub-log of a user split into k that receives conversation conv's
// entries: every entry of a conversation goes to one sub-log, so each conversation's order is
// one sub-log's. It is part of the persisted layout (it decides where entries live), so it must
// never change. FNV-1a over a prefix of its own, so it is independent of the hash slots.
func SubLogOf(conv string, k int) int {
	if k <= 1 {
		return 0
	}
	h := fnv.New64a()
	h.Write([]byte("sub:" + conv))
	return int(h.Sum64() % uint64(k))
}

// userSplit is one split user's routing on a source shard.
type userSplit struct {
	k  int    // sub-logs
	at uint64 // records up to this outbox position go to the user's own log
}

const splitV1 = 1

func (s userSplit) encode() []byte {
	return binary.BigEndian.AppendUint64([]byte{splitV1, byte(s.k)}, s.at)
}

func decodeSplit(b []byte) (userSplit, error) {
	if len(b) != 10 || b[0] != splitV1 || b[1] < 2 || int(b[1]) > MaxSubLogs {
		return userSplit{}, corruptf("split record of %d bytes", len(b))
	}
	return userSplit{k: int(b[1]), at: binary.BigEndian.Uint64(b[2:])}, nil
}

// logFor returns the log the record at pos of conversation conv goes to, for the split user uid.
func (s userSplit) logFor(uid, conv string, pos uint64) string {
	if pos <= s.at {
		return uid
	}
	return SubLog(uid, SubLogOf(conv, s.k))
}

// SplitUser switches uid's later records in this shard's outbox to uid's k sub-logs: records up
// to the outbox head now (this Tx's earlier appends included) go to uid's own log, later ones
// to their conversation's sub-log. It returns that position. Repeating it returns the same
// position and changes nothing; a split into another number of sub-logs is refused, since the
// entries already routed would be in the wrong sub-logs for it.
func (t *Tx) SplitUser(uid string, k int) (uint64, error) {
	if !ValidID(uid) || k < 2 || k > MaxSubLogs {
		return 0, invalidf("split: bad user id %q, or %d sub-logs (2 to %d)", uid, k, MaxSubLogs)
	}
	key := t.s.k.split(uid)
	v, ok, err := getValue(t.b, key)
	if err != nil {
		return 0, err
	}
	if ok {
		s, err := decodeSplit(v)
		if err != nil {
			return 0, err
		}
		if s.k != k {
			return 0, invalidf("split: user %q is split into %d sub-logs already, not %d", uid, s.k, k)
		}
		return s.at, nil
	}
	info, err := t.outboxInfo()
	if err != nil {
		return 0, err
	}
	t.s.splits.Store(true)
	t.routed = true
	return info.Head, t.set(key, userSplit{k: k, at: info.Head}.encode())
}

// InstallSplits applies SplitUser for every user of splits (user → sub-logs) this shard has no
// split of yet. A move's first step on its destination runs it with the cluster's splits, so a
// shard added after a split routes the split users' entries of the conversations moving in as
// their old home did.
func (t *Tx) InstallSplits(splits map[string]int) error {
	for _, uid := range slices.Sorted(maps.Keys(splits)) {
		if _, err := t.SplitUser(uid, splits[uid]); err != nil {
			return err
		}
	}
	return nil
}

// readSplits returns every split user's routing from r, or nil if the shard has none.
func (s *Shard) readSplits(r pebble.Reader) (map[string]userSplit, error) {
	if !s.splits.Load() {
		return nil, nil
	}
	return readIDTable(r, s.k, tagSplit, decodeSplit)
}

// baseUser returns the user whose stream the log id belongs to: the user itself for a user id,
// the split user for a sub-log's.
func baseUser(id string) string {
	if uid, sub, ok := ident.ParseLog(id); ok && sub > 0 {
		return uid
	}
	return id
}

// toSubLogs returns the logs the record at pos of conversation conv goes to: recipients, each
// split user's replaced by its sub-log where the record is past the split, sorted again. The
// recipients are not changed in place (they may be a record's cached decoding).
func toSubLogs(splits map[string]userSplit, recipients []string, conv string, pos uint64) []string {
	var out []string
	for i, uid := range recipients {
		sp, ok := splits[uid]
		if !ok {
			continue
		}
		if id := sp.logFor(uid, conv, pos); id != uid {
			if out == nil {
				out = slices.Clone(recipients)
			}
			out[i] = id
		}
	}
	if out == nil {
		return recipients
	}
	slices.Sort(out)
	return out
}

// addGroups changes the group count of the log id's meta by delta. A user's own count stays at
// least 0; a sub-log's may go below (a group joined before the split and left after it), since
// the user's count is the sum over its sub-logs.
func (m *logMeta) addGroups(id string, delta int) {
	m.Groups += delta
	if baseUser(id) == id {
		m.Groups = max(m.Groups, 0)
	}
}
