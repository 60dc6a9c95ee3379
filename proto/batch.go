package proto

import (
	"encoding/binary"

	"github.com/vmihailenco/msgpack/v5"
)

// Building Batch frames entry by entry. A sync stream catching up sends Batch after Batch of up
// to MaxPage entries; AppendFrame would have it build a []Entry, measure each entry
// (EncodedLen), then encode the frame into a buffer grown from nothing. A BatchBuilder encodes
// each entry once, straight into the buffer the frame is written from, and keeps that buffer
// from one batch to the next:
//
//	 buf
//	┌────────────────────────── gap ─────────────────────────┬─────────┬─────────┬───┬────────┐
//	│ (unused) │ length │ version │ type │ map header, epoch, │ entry 1 │ entry 2 │ … │ "head" │
//	│          │        │         │      │ "entries", array n │         │         │   │  head  │
//	└────────────────────────────────────────────────────────┴─────────┴─────────┴───┴────────┘
//	            \_______________ Frame() returns from here to the end _______________________/
//
// The entries are encoded first, after a gap of HeaderLen + PageOverhead bytes; once their number
// is known, Frame writes the header and the fields before them right-aligned into the gap, and
// the Batch's fields that follow them (head, sub, and for a source's batch source and after)
// after them. The bytes are those AppendFrame writes for the same Batch
// (TestBatchBuilderIsAppendFrame), so the wire does not change.

// batchGap is the room reserved before the entries for the header and the fields before them.
const batchGap = HeaderLen + PageOverhead

// BatchBuilder builds Batch frames entry by entry (see [BatchBuilder.Add]) into one buffer that
// it keeps across batches: Reset starts each batch (the first too) in the same buffer, Release
// lets it go. The zero value is ready for Reset. A BatchBuilder is not safe for concurrent use.
type BatchBuilder struct {
	w    appendWriter // w.b: the gap, then the entries' encodings
	pool *[]byte      // the bufPool holder w.b came from, if it did
	enc  *msgpack.Encoder
	n    int  // entries added
	room int  // most bytes the entries may take (but the first)
	done bool // Frame was called, or Reset was not: Add and Frame panic
}

// Reset starts a new, empty batch whose entries may take room bytes in all (a page's room: the
// peer's max_frame less PageOverhead), keeping the buffer. The frame last returned by Frame is
// overwritten by the next Add.
func (b *BatchBuilder) Reset(room int) {
	if b.enc == nil {
		b.enc = msgpack.NewEncoder(&b.w)
		configureEncoder(b.enc)
	}
	if b.w.b == nil { // a small buffer from the pool WriteFrame uses; it grows with the batches
		b.pool = bufPool.Get().(*[]byte)
		b.w.b = *b.pool
	}
	if cap(b.w.b) < batchGap {
		b.w.b = make([]byte, 0, batchGap+4<<10)
	}
	b.w.b = b.w.b[:batchGap]
	b.n, b.room, b.done = 0, room, false
}

// Add appends the encoding of e to the batch if it fits the room given to Reset, or if the
// batch is empty (Config validation makes sure one entry always fits a page), and reports
// whether it did. An entry that does not fit leaves the batch as it was: it goes in the next.
// Add before Reset, or after Frame before the next Reset, panics.
func (b *BatchBuilder) Add(e *Entry) bool {
	if b.done || b.enc == nil {
		panic("proto: BatchBuilder.Add without Reset")
	}
	start := len(b.w.b)
	// An Entry holds only integers, strings, bytes and string slices, which always encode, and
	// the appendWriter never fails: there is no error to handle (as in encodedLen).
	_ = e.EncodeMsgpack(b.enc)
	if b.n > 0 && len(b.w.b)-batchGap > b.room {
		b.w.b = b.w.b[:start]
		return false
	}
	b.n++
	return true
}

// Len returns the number of entries added since Reset.
func (b *BatchBuilder) Len() int { return b.n }

// Frame completes the batch with its epoch, head and sub-log and returns the whole frame (header
// and body), as AppendFrame would encode &Batch{Epoch: epoch, Entries: <the entries added>, Head:
// head, Sub: sub}. The slice is the builder's buffer: it is valid until the next Reset or Release, and
// must not be modified. Frame (or SourceFrame) may be called once per batch. It does not check
// the peer's max_frame: the sender does (the frame's length field is len(frame)-4).
func (b *BatchBuilder) Frame(epoch Epoch, head Position, sub uint32) []byte {
	return b.frame(epoch, head, sub, "", 0)
}

// SourceFrame is Frame for a batch of a source (revision 6): it completes the batch with the
// conversation log's epoch and head, the source's conversation id and, when the batch needs it,
// the position its first entry follows, as AppendFrame would encode &Batch{Epoch: epoch,
// Entries: <the entries added>, Head: head, Source: source, After: after}.
func (b *BatchBuilder) SourceFrame(epoch Epoch, head Position, source string, after Position) []byte {
	return b.frame(epoch, head, 0, source, after)
}

// frame writes the Batch's fields around the entries: those before them into the gap, those
// after them (in the order of the struct) after the entries.
func (b *BatchBuilder) frame(epoch Epoch, head Position, sub uint32, source string, after Position) []byte {
	if b.done || b.enc == nil {
		panic("proto: BatchBuilder.Frame without Reset")
	}
	b.done = true
	// The header and the fields before the entries, into a scratch buffer, then into the gap.
	var scratch [batchGap]byte
	entries := len(b.w.b) // the prefix is encoded after the entries, then moved into the gap
	fields := 0
	for _, nonZero := range []bool{epoch != 0, b.n > 0, head != 0, sub != 0, source != "", after != 0} {
		if nonZero {
			fields++
		}
	}
	b.w.b = append(b.w.b, 0, 0, 0, 0, FrameVersion, byte(TypeBatch))
	_ = b.enc.EncodeMapLen(fields)
	if epoch != 0 {
		_ = b.enc.EncodeString("epoch")
		_ = b.enc.EncodeUint(uint64(epoch))
	}
	if b.n > 0 {
		_ = b.enc.EncodeString("entries")
		_ = b.enc.EncodeArrayLen(b.n)
	}
	prefix := copy(scratch[:], b.w.b[entries:])
	b.w.b = b.w.b[:entries]
	if head != 0 {
		_ = b.enc.EncodeString("head")
		_ = b.enc.EncodeUint(uint64(head))
	}
	if sub != 0 {
		_ = b.enc.EncodeString("sub")
		_ = b.enc.EncodeUint(uint64(sub))
	}
	if source != "" {
		_ = b.enc.EncodeString("source")
		_ = b.enc.EncodeString(source)
	}
	if after != 0 {
		_ = b.enc.EncodeString("after")
		_ = b.enc.EncodeUint(uint64(after))
	}
	start := batchGap - prefix
	copy(b.w.b[start:batchGap], scratch[:prefix])
	frame := b.w.b[start:]
	binary.BigEndian.PutUint32(frame, uint32(len(frame)-4))
	return frame
}

// Release lets the builder's buffer go, so a stream that has caught up holds none while idle:
// back to WriteFrame's pool if it is small (the size of a few pushed entries), else to the
// garbage collector. The next Reset takes a buffer from the pool again.
func (b *BatchBuilder) Release() {
	if b.pool != nil && cap(b.w.b) <= maxPooledBuf {
		*b.pool = b.w.b[:0]
		bufPool.Put(b.pool)
	}
	b.w.b, b.pool = nil, nil
	b.n, b.done = 0, true
}
