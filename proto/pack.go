package proto

import (
	"strings"
	"sync"

	"github.com/vmihailenco/msgpack/v5"
)

// Packing pages into frames. Batch and HistoryResult carry a variable number of entries,
// ConvListResult a variable number of conversations. A sender fills such a page record by record,
// adding each record's encoded length (EncodedLen), and stops before the sum would exceed
// maxFrame - PageOverhead: the frame then fits the peer's max_frame whatever the other fields
// hold, and each record is encoded only once, when the frame is written. Sizes are those of the
// encoding, never of some stored form: a stored entry and its encoding differ by tens to
// hundreds of bytes (keys, msg_id, length prefixes), which 16 full-size messages were enough to
// turn into a frame beyond the limit.
//
//	 length field value (≤ max_frame)
//	┌──────────────────────────────────────────────────────────────────────────┐
//	│ version │ type │ map header, other fields, array header │ record │ record │ …
//	└──────────────────────────────────────────────────────────────────────────┘
//	 \________________ ≤ PageOverhead ________________/ \___ Σ EncodedLen ___/

// PageOverhead is the most bytes a Batch, HistoryResult or ConvListResult frame (the value of
// its length field: version, type and body) takes beyond the encodings of its records, whatever
// its other fields hold and with up to MaxPage records. A source's Batch (revision 6), the
// largest, needs 204 with a conversation id of MaxIDLen bytes in its Source (before revision 6
// HistoryResult was, with 70, and PageOverhead was 96); HistoryResult needs 70.
const PageOverhead = 256

// EncodedLen returns the length of e's encoding as a record of a Batch or HistoryResult body,
// without writing it anywhere (the encoder runs over a byte counter: nothing is copied).
func (e *Entry) EncodedLen() int { return encodedLen(e) }

// EncodedLen returns the length of c's encoding as a record of a ConvListResult body, without
// writing it anywhere.
func (c *ConvInfo) EncodedLen() int { return encodedLen(c) }

// MaxEntryLen returns the most bytes any Entry the server may send encodes to (EncodedLen) when
// message bodies are at most maxBody bytes: the larger of a message with a maxBody-byte body and
// a membership entry naming MaxMembers+1 users (a CreateGroup's members and its creator), every
// id MaxIDLen bytes long and every number at its widest. Config validation uses it to check that
// one entry always fits a page: MaxEntryLen(max_body) + PageOverhead ≤ max_frame.
func MaxEntryLen(maxBody int) int {
	msg := maxEntry()
	msg.Kind, msg.Body = KindMessage, make([]byte, max(maxBody, 0))
	return max(msg.EncodedLen(), maxMembershipLen())
}

// maxMembershipLen is the encoded length of the largest membership entry: MaxMembers+1 ids.
var maxMembershipLen = sync.OnceValue(func() int {
	e := maxEntry()
	e.Kind, e.Members = KindGroupCreate, make([]string, MaxMembers+1)
	for i := range e.Members {
		e.Members[i] = strings.Repeat("m", MaxIDLen)
	}
	return e.EncodedLen()
})

// maxEntry returns an entry whose fixed-size fields are all at their widest encoding: every id
// MaxIDLen bytes, msg_ids as long as a canonical one can be, numbers beyond 32 bits.
func maxEntry() Entry {
	id := strings.Repeat("x", MaxIDLen)
	msgID := MsgID("4294967295.18446744073709551615.4294967295")
	return Entry{Seq: ^Position(0), MsgID: msgID, Conv: id, ConvSeq: ^Position(0), Sender: id,
		Time: -1 << 63, UpTo: ^Position(0), Target: msgID, Role: RoleOwner, MemberCount: ^uint32(0),
		Source: true}
}

// countWriter counts the bytes written to it, for EncodedLen.
type countWriter struct{ n int }

// Write counts p.
func (w *countWriter) Write(p []byte) (int, error) { w.n += len(p); return len(p), nil }

// WriteByte counts one byte.
func (w *countWriter) WriteByte(byte) error { w.n++; return nil }

type sizeState struct {
	w   countWriter
	enc *msgpack.Encoder
}

var sizePool = sync.Pool{New: func() any {
	s := new(sizeState)
	s.enc = msgpack.NewEncoder(&s.w)
	return s
}}

// encodedLen runs the pinned encoder on v over a byte counter. Entry and ConvInfo hold only
// integers, strings, bytes and string slices, which always encode, so there is no error to
// return.
func encodedLen(v any) int {
	s := sizePool.Get().(*sizeState)
	s.w.n = 0
	s.enc.Reset(&s.w)
	configureEncoder(s.enc)
	_ = s.enc.Encode(v)
	n := s.w.n
	sizePool.Put(s)
	return n
}
