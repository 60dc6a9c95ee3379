package proto

import (
	"crypto/sha256"
	"encoding/binary"
	"hash"
	"slices"
)

// Reconciliation digests (docs/PROTOCOL.md §6 "Digest", §8.7). A client asks the server for the
// digest of a range of its own user log, or of a conversation's history, and compares it with
// the digest of what it stored over the same range: equal digests mean it holds exactly the
// server's entries there; a mismatch is refetched and reported ([Report]). The server and every
// client compute it the same way, here for Go (the server and the Go SDK share this one copy):
//
//	digest = SHA-256( record(e₁) ‖ record(e₂) ‖ … )        entries in ascending seq order
//
//	record(e), 57 bytes and the two ids (an entry a frame can carry has ids far below 4 GiB):
//	┌──────────┬────────┬────────────┬────────┬──────────┬──────┬──────────┬──────────────────┐
//	│ seq      │ kind   │ len(msg_id)│ msg_id │ len(conv)│ conv │ conv_seq │ SHA-256(body)    │
//	│ u64 BE   │ u8     │ u32 BE     │ bytes  │ u32 BE   │ bytes│ u64 BE   │ 32 bytes         │
//	└──────────┴────────┴────────────┴────────┴──────────┴──────┴──────────┴──────────────────┘
//
// seq is the entry's position in the log the digest is of (Entry.Seq: the user log's seq, or the
// conv_seq for a conversation's history); an absent field is its zero value (an empty msg_id or
// conv has length 0), and an entry without a body (every kind but message, or an empty message)
// hashes the empty body: SHA-256("") = e3b0c442…b855. A folded entry (revision 7: Folded set)
// hashes its body_hash in place of SHA-256(body) — the hash of the body it had before the fold,
// or of the empty body if body_hash is absent — so a device that stored the entry before it was
// folded and one that stored the stub compute the same record. The digest of no entries is
// SHA-256 of nothing, the same e3b0c442…b855.
//
// Why these fields: they are the ones every client stores for every entry and that are the same
// wherever the entry is read. msg_id names the conversation entry, and the server never changes
// what a msg_id stands for, so sender, time, up_to, target and role are covered through it; the
// body is hashed as well because it is the one large field a client stores and shows, the one a
// storage bug would truncate or mangle. members and member_count are left out: a user log carries
// a membership entry's list only up to 32 users (§5), so they are not the same in a Batch and in
// a HistoryResult, and a client that paged them with Members stores them elsewhere.

// emptyBodyHash is SHA-256(""), what an entry without a body hashes.
var emptyBodyHash = sha256.Sum256(nil)

// DigestLen is the length of a digest: a SHA-256.
const DigestLen = sha256.Size

// digestRecordFixed is the length of a record without its msg_id and conv bytes.
const digestRecordFixed = 8 + 1 + 4 + 4 + 8 + sha256.Size

// AppendDigestRecord appends e's record (the diagram above) to dst and returns the extended
// slice: what a [Digester] hashes for e. It is exported for the test vectors and for
// implementers comparing their records byte by byte.
func AppendDigestRecord(dst []byte, e *Entry) []byte {
	dst = slices.Grow(dst, digestRecordFixed+len(e.MsgID)+len(e.Conv))
	dst = binary.BigEndian.AppendUint64(dst, uint64(e.Seq))
	dst = append(dst, byte(e.Kind))
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(e.MsgID)))
	dst = append(dst, e.MsgID...)
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(e.Conv)))
	dst = append(dst, e.Conv...)
	dst = binary.BigEndian.AppendUint64(dst, uint64(e.ConvSeq))
	if e.Folded != 0 { // revision 7: the hash of the body the entry had before it was folded
		if len(e.BodyHash) == sha256.Size {
			return append(dst, e.BodyHash...)
		}
		return append(dst, emptyBodyHash[:]...)
	}
	body := sha256.Sum256(e.Body)
	return append(dst, body[:]...)
}

// Digester accumulates the digest of a run of entries, added in ascending seq order: the
// server's answer to a [Digest] query, and what a client computes over the entries it stored to
// compare with it. It does not check the order or contiguity of what it is given: a client
// digests exactly the positions the answer covered. The zero value is ready; a Digester is not
// safe for concurrent use. It keeps nothing of the entries it was given.
type Digester struct {
	h   hash.Hash
	n   uint64
	rec []byte // the record being hashed, reused
}

// Add adds e's record.
func (d *Digester) Add(e *Entry) {
	if d.h == nil {
		d.h = sha256.New()
	}
	d.rec = AppendDigestRecord(d.rec[:0], e)
	d.h.Write(d.rec)
	d.n++
}

// Count returns how many entries were added since the Digester was made or Reset.
func (d *Digester) Count() uint64 { return d.n }

// Sum returns the digest of the entries added so far (DigestLen bytes, a new slice the caller
// owns). Adding more entries afterwards goes on from there.
func (d *Digester) Sum() []byte {
	if d.h == nil {
		d.h = sha256.New()
	}
	return d.h.Sum(make([]byte, 0, DigestLen))
}

// Reset forgets every entry added, for a new digest.
func (d *Digester) Reset() {
	if d.h != nil {
		d.h.Reset()
	}
	d.n = 0
}

// DigestOf returns the digest of entries, in the order given (DigestLen bytes).
func DigestOf(entries []Entry) []byte {
	var d Digester
	for i := range entries {
		d.Add(&entries[i])
	}
	return d.Sum()
}

// Digest asks for the digest of a range of one log the user may read: its own user log (Conv
// empty; a sub-log with Sub) by seq, or the history of a conversation it is a member of by
// conv_seq (CodeNotMember, CodeNoConversation). The range is [From, To] in the log's epoch Epoch;
// the server answers [DigestResult] for the part of it it covers — from From up to To, its head
// or a page's worth of entries, whichever comes first — so a client pages by asking again from
// the answer's To+1. A From below the first retained position is refused with CodeTooOld (never
// a silently shorter range), an Epoch other than the log's with CodeEpochChanged.
type Digest struct {
	ID   uint64 `msgpack:"id"`   // request id
	Conv string `msgpack:"conv"` // a conversation id; "" = the user's own log
	// Sub is the sub-log of the user's stream (revision 3; the user log only): 0 = the user log.
	Sub   uint32   `msgpack:"sub"`
	Epoch Epoch    `msgpack:"epoch"` // the epoch of the log the range is in (not 0)
	From  Position `msgpack:"from"`  // the first position of the range, at least 1
	To    Position `msgpack:"to"`    // the last position of the range; 0 = the log's head
}

// FrameType implements Frame.
func (*Digest) FrameType() Type { return TypeDigest }

// RequestID implements Request.
func (d *Digest) RequestID() uint64 { return d.ID }

// Validate checks the request id, the conversation id when set, the sub-log (below MaxSubLogs,
// and only for the user log), the epoch (not 0) and the range (From at least 1, To 0 or at least
// From), all with CodeInvalidArgument.
func (d *Digest) Validate() error {
	if err := checkRequestID(d.ID); err != nil {
		return err
	}
	if err := checkScope(d.Conv, d.Sub); err != nil {
		return err
	}
	switch {
	case d.Epoch == 0:
		return invalid("digest without an epoch: name the epoch of the log the range is in")
	case d.From == 0:
		return invalid("digest from position 0: positions start at 1")
	case d.To != 0 && d.To < d.From:
		return invalid("digest of the range %d..%d: to is below from", d.From, d.To)
	}
	return nil
}

// checkScope checks the log a Digest or a Report names: a conversation (no sub-log), or the user
// log or one of its sub-logs.
func checkScope(conv string, sub uint32) error {
	if conv != "" {
		if err := checkID("conversation id", conv); err != nil {
			return err
		}
		if sub != 0 {
			return invalid("sub-log %d named with conversation %s: sub-logs are the user log's", sub, quote(conv))
		}
		return nil
	}
	if sub >= MaxSubLogs {
		return invalid("sub-log %d: a stream has at most %d", sub, MaxSubLogs)
	}
	return nil
}

// DigestResult answers Digest: the digest of the entries at positions From..To of the log, and
// the log's retained range. To is where the answer stops — the request's To, the log's head or
// the end of a page — and From-1 when there is nothing at From yet (Count 0, the digest of no
// entries): a replica behind the client's cursor is not a mismatch. A client compares Digest with
// its own digest of exactly From..To, then asks for To+1 onwards if it wants more.
type DigestResult struct {
	ID     uint64   `msgpack:"id"`     // request id
	Epoch  Epoch    `msgpack:"epoch"`  // the log's epoch (the request's)
	From   Position `msgpack:"from"`   // the first position covered: the request's From
	To     Position `msgpack:"to"`     // the last position covered; From-1 when none is
	Count  uint64   `msgpack:"count"`  // entries covered: To-From+1
	Digest []byte   `msgpack:"digest"` // DigestLen bytes: the digest of the entries From..To
	First  Position `msgpack:"first"`  // the log's first retained position
	Head   Position `msgpack:"head"`   // the log's last position
}

// FrameType implements Frame.
func (*DigestResult) FrameType() Type { return TypeDigestResult }

// RequestID implements Response.
func (d *DigestResult) RequestID() uint64 { return d.ID }
