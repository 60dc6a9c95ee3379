package proto

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"reflect"
	"sync"

	"github.com/vmihailenco/msgpack/v5"
)

// The msgpack conventions of the wire format are pinned here and nowhere else:
//
//   - a frame body is a msgpack map keyed by the short snake_case names in the struct tags
//     (never an array-encoded struct), so other languages decode it by name and fields can be
//     added;
//   - fields holding their zero value are omitted, and a missing key decodes as the zero value;
//   - integers use the smallest msgpack encoding that holds them; times are int64 Unix
//     nanoseconds, never the msgpack timestamp extension;
//   - body is bin, ids and names are str;
//   - unknown keys are skipped (forward compatibility), and checkBody bounds the shape of a body
//     before the decoder sees it (see check.go).

// configureEncoder pins the encoder options; msgpack.Encoder.Reset clears them, so it runs
// after every Reset.
func configureEncoder(e *msgpack.Encoder) {
	e.UseArrayEncodedStructs(false) // maps keyed by field name
	e.SetOmitEmpty(true)            // zero fields are absent; absent decodes as zero
	e.UseCompactInts(true)          // smallest integer encoding
	e.UseInternedStrings(false)
}

// configureDecoder pins the decoder options; msgpack.Decoder.Reset clears them.
func configureDecoder(d *msgpack.Decoder) {
	d.DisallowUnknownFields(false) // skip keys a newer peer added
	d.UseInternedStrings(false)
	d.UseLooseInterfaceDecoding(false)
	d.DisableAllocLimit(false)
}

// appendWriter is the io.Writer (and io.ByteWriter, which msgpack uses directly) that appends
// to a slice.
type appendWriter struct{ b []byte }

// Write appends p.
func (w *appendWriter) Write(p []byte) (int, error) {
	w.b = append(w.b, p...)
	return len(p), nil
}

// WriteByte appends c.
func (w *appendWriter) WriteByte(c byte) error {
	w.b = append(w.b, c)
	return nil
}

type encState struct {
	w   appendWriter
	enc *msgpack.Encoder
}

var encPool = sync.Pool{New: func() any {
	s := new(encState)
	s.enc = msgpack.NewEncoder(&s.w)
	return s
}}

type decState struct {
	r   bytes.Reader
	dec *msgpack.Decoder
}

var decPool = sync.Pool{New: func() any {
	s := new(decState)
	s.dec = msgpack.NewDecoder(&s.r)
	return s
}}

// AppendFrame appends the encoding of f (header and body) to dst and returns the extended
// slice. It fails, leaving dst's contents unchanged, if f's type is unknown, f is a nil
// pointer, or the frame would exceed MaxFrameLimit (ErrFrameTooLarge). It does not check the
// peer's limit nor run Validate: a sender keeps its frames within the announced max_frame.
func AppendFrame(dst []byte, f Frame) ([]byte, error) {
	if f == nil {
		return dst, fmt.Errorf("proto: nil frame")
	}
	t := f.FrameType()
	if !t.Known() {
		return dst, fmt.Errorf("%w: %d", ErrUnknownType, t)
	}
	start := len(dst)
	dst = append(dst, 0, 0, 0, 0, FrameVersion, byte(t))

	s := encPool.Get().(*encState)
	s.w.b = dst
	s.enc.Reset(&s.w)
	configureEncoder(s.enc)
	err := s.enc.Encode(f)
	dst = s.w.b
	s.w.b = nil
	encPool.Put(s)

	switch {
	case err != nil:
		return dst[:start], fmt.Errorf("proto: encoding %s: %w", t, err)
	case len(dst) == start+HeaderLen || !isMapCode(dst[start+HeaderLen]):
		return dst[:start], fmt.Errorf("proto: encoding %s: nil frame", t)
	case len(dst)-start-4 > MaxFrameLimit:
		return dst[:start], fmt.Errorf("%w: %s frame of %d bytes, limit %d", ErrFrameTooLarge, t, len(dst)-start-4, MaxFrameLimit)
	}
	binary.BigEndian.PutUint32(dst[start:], uint32(len(dst)-start-4))
	return dst, nil
}

// bufPool holds frame buffers for WriteFrame; buffers that grew past maxPooledBuf are dropped.
var bufPool = sync.Pool{New: func() any { return new([]byte) }}

const maxPooledBuf = 64 << 10

// WriteFrame encodes f and writes it to w with a single Write call. Calls for the same w must
// not overlap (give each stream one writer). Errors are those of AppendFrame and of w.
func WriteFrame(w io.Writer, f Frame) error { return WriteFrameWithin(w, f, MaxFrameLimit) }

// WriteFrameWithin is WriteFrame for a peer that accepts frames of at most maxFrame bytes (the
// length field's value; after Welcome, its max_frame): a longer frame is not written, and the
// error wraps ErrFrameTooLarge. Nothing reaches w then, so the stream stays usable.
func WriteFrameWithin(w io.Writer, f Frame, maxFrame int) error {
	bp := bufPool.Get().(*[]byte)
	b, err := AppendFrame((*bp)[:0], f)
	if err == nil && len(b)-4 > maxFrame {
		err = fmt.Errorf("%w: %s frame of %d bytes, the peer's limit is %d", ErrFrameTooLarge, f.FrameType(), len(b)-4, maxFrame)
	}
	if err == nil {
		_, err = w.Write(b)
	}
	if cap(b) <= maxPooledBuf {
		*bp = b[:0]
		bufPool.Put(bp)
	}
	return err
}

// Decode decodes the body of a frame of type typ (the bytes after the header). It returns a
// pointer to a new frame struct (*Send for TypeSend, …) whose slices do not alias body, or an
// error wrapping ErrUnknownType or ErrMalformed. Decode does not run Validate.
//
// Decoding allocates in proportion to len(body), whatever the body holds: the shape check
// (check.go) bounds every declared length by the bytes actually present, records per array by
// MaxPage and nesting by maxDepth, so a body of n bytes costs at most about 16·n bytes plus
// 300 KB.
func Decode(typ Type, body []byte) (Frame, error) {
	f := newFrame(typ)
	if f == nil {
		return nil, fmt.Errorf("%w: %d", ErrUnknownType, typ)
	}
	if err := checkBody(body); err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrMalformed, typ, err)
	}
	s := decPool.Get().(*decState)
	s.r.Reset(body)
	s.dec.Reset(&s.r)
	configureDecoder(s.dec)
	err := s.dec.Decode(f)
	if err == nil && s.r.Len() != 0 {
		err = fmt.Errorf("%d trailing bytes", s.r.Len())
	}
	s.r.Reset(nil)
	s.dec.Reset(&s.r)
	decPool.Put(s)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrMalformed, typ, err)
	}
	return f, nil
}

// EncodeMsgpack encodes e exactly as the pinned reflective encoder would (the keys of the struct
// tags, zero fields omitted, compact integers) but without reflection or allocation: entries are
// the bulk of the sync stream. It implements msgpack.CustomEncoder; decoding uses the tags.
func (e *Entry) EncodeMsgpack(enc *msgpack.Encoder) error {
	w := fieldWriter{enc: enc, counting: true}
	e.writeFields(&w)
	if err := enc.EncodeMapLen(w.n); err != nil {
		return err
	}
	w.counting = false
	e.writeFields(&w)
	return w.err
}

// DecodeMsgpack decodes e exactly as the pinned reflective decoder would, without reflection:
// entries are the bulk of what a catching-up client decodes. A map (what every encoder writes)
// is decoded field by field with the decoder's own functions for each field's type, in whatever
// order and repetition the keys come, unknown keys skipped; anything else (an array-encoded
// struct) goes to the reflective decoder. It implements msgpack.CustomDecoder;
// TestEntryDecodeMsgpackIsReflective and FuzzEntryDecodeMsgpack hold it to the reflective one.
func (e *Entry) DecodeMsgpack(d *msgpack.Decoder) error {
	if c, err := d.PeekCode(); err != nil || !isMapCode(c) {
		return d.DecodeValue(reflect.ValueOf((*reflectEntry)(e)).Elem())
	}
	n, err := d.DecodeMapLen()
	if err != nil {
		return err
	}
	var scratch [16]byte // every key of Entry is shorter
	for range n {
		kl, err := d.DecodeBytesLen() // as the reflective decoder reads a key: str, bin or nil
		if err != nil {
			return err
		}
		var key []byte
		if kl > len(scratch) {
			key = make([]byte, kl) // no field has such a name: it is read and skipped
		} else {
			key = scratch[:max(kl, 0)]
		}
		if err := d.ReadFull(key); err != nil {
			return err
		}
		if err := e.decodeField(d, key); err != nil {
			return err
		}
	}
	return nil
}

// reflectEntry is Entry without its methods (EncodeMsgpack, DecodeMsgpack): what the reflective
// encoder and decoder see, from the struct tags; the tests hold the methods to it.
type reflectEntry Entry

// decodeField decodes the value of the field named key (or skips it), as the reflective decoder
// does for the field's kind: uints with DecodeUint64 (truncated to the field's width, as
// reflect's SetUint does), strings with DecodeString, the body with DecodeBytes, the member list
// as a string slice decoded into the one there (nil leaves it as it is), the source flag with
// DecodeBool (nil is false).
func (e *Entry) decodeField(d *msgpack.Decoder, key []byte) (err error) {
	u := func() uint64 {
		var v uint64
		v, err = d.DecodeUint64()
		return v
	}
	str := func() string {
		var v string
		v, err = d.DecodeString()
		return v
	}
	switch string(key) {
	case "seq":
		e.Seq = Position(u())
	case "kind":
		e.Kind = Kind(u())
	case "msg_id":
		e.MsgID = MsgID(str())
	case "conv":
		e.Conv = str()
	case "conv_seq":
		e.ConvSeq = Position(u())
	case "sender":
		e.Sender = str()
	case "time":
		e.Time, err = d.DecodeInt64()
	case "body":
		e.Body, err = d.DecodeBytes()
	case "up_to":
		e.UpTo = Position(u())
	case "target":
		e.Target = MsgID(str())
	case "members":
		err = decodeStrings(d, &e.Members)
	case "role":
		e.Role = Role(u())
	case "member_count":
		e.MemberCount = uint32(u())
	case "source":
		e.Source, err = d.DecodeBool()
	case "reaction":
		e.Reaction = str()
	case "remove":
		e.Remove, err = d.DecodeBool()
	case "folded":
		e.Folded = Position(u())
	case "body_hash":
		e.BodyHash, err = d.DecodeBytes()
	default:
		err = d.Skip()
	}
	return err
}

// decodeStrings decodes a string array into *ss as the reflective decoder decodes a []string
// field: nil leaves *ss as it is, an array replaces it (a non-nil slice, even when empty).
func decodeStrings(d *msgpack.Decoder, ss *[]string) error {
	n, err := d.DecodeArrayLen()
	if err != nil || n == -1 {
		return err
	}
	out := (*ss)[:0]
	if out == nil {
		out = make([]string, 0, min(n, maxDecodedStrings))
	}
	for range n {
		s, err := d.DecodeString()
		if err != nil {
			return err
		}
		out = append(out, s)
	}
	*ss = out
	return nil
}

// maxDecodedStrings is the most items decodeStrings allocates room for before it has read them,
// the reflective decoder's own limit.
const maxDecodedStrings = 1e6

// writeFields visits the fields in declaration order, as the reflective encoder does.
func (e *Entry) writeFields(w *fieldWriter) {
	w.uint("seq", uint64(e.Seq))
	w.uint("kind", uint64(e.Kind))
	w.str("msg_id", string(e.MsgID))
	w.str("conv", e.Conv)
	w.uint("conv_seq", uint64(e.ConvSeq))
	w.str("sender", e.Sender)
	w.int("time", e.Time)
	w.bytes("body", e.Body)
	w.uint("up_to", uint64(e.UpTo))
	w.str("target", string(e.Target))
	w.strs("members", e.Members)
	w.uint("role", uint64(e.Role))
	w.uint("member_count", uint64(e.MemberCount))
	w.bool("source", e.Source)
	w.str("reaction", e.Reaction)
	w.bool("remove", e.Remove)
	w.uint("folded", uint64(e.Folded))
	w.bytes("body_hash", e.BodyHash)
}

// fieldWriter writes the non-zero fields of a map, or only counts them.
type fieldWriter struct {
	enc      *msgpack.Encoder
	counting bool
	n        int
	err      error
}

// key counts a non-zero field or writes its key, and reports whether to write the value.
func (w *fieldWriter) key(k string, nonZero bool) bool {
	if !nonZero || w.err != nil {
		return false
	}
	if w.counting {
		w.n++
		return false
	}
	w.err = w.enc.EncodeString(k)
	return w.err == nil
}

func (w *fieldWriter) uint(k string, v uint64) {
	if w.key(k, v != 0) {
		w.err = w.enc.EncodeUint(v)
	}
}

func (w *fieldWriter) bool(k string, v bool) {
	if w.key(k, v) {
		w.err = w.enc.EncodeBool(true)
	}
}

func (w *fieldWriter) int(k string, v int64) {
	if w.key(k, v != 0) {
		w.err = w.enc.EncodeInt(v)
	}
}

func (w *fieldWriter) str(k, v string) {
	if w.key(k, v != "") {
		w.err = w.enc.EncodeString(v)
	}
}

func (w *fieldWriter) bytes(k string, v []byte) {
	if w.key(k, len(v) != 0) {
		w.err = w.enc.EncodeBytes(v)
	}
}

func (w *fieldWriter) strs(k string, v []string) {
	if !w.key(k, len(v) != 0) {
		return
	}
	w.err = w.enc.EncodeArrayLen(len(v))
	for _, s := range v {
		if w.err == nil {
			w.err = w.enc.EncodeString(s)
		}
	}
}
