// Fuzz targets for everything that reads bytes from a peer. They prove the G7 promise for the
// wire: hostile input never panics, costs bounded memory, and fails only with the documented
// errors; and every body that decodes re-encodes canonically to bytes that decode to the same
// frame.
//
// Seeds come from AppendFrame output of the fixtures and their variants (allFixtures) plus
// truncations and corruptions, and from
// testdata/fuzz/<FuzzName>/. Run one with: go test -run='^$' -fuzz=FuzzReader ./proto/
package proto

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"io"
	"reflect"
	"runtime"
	"testing"
)

// fuzzMaxFrame is the Reader limit in FuzzReader; fuzzAllocLimit bounds what one Next may
// allocate (decoding a frame of n bytes costs a small multiple of n plus at most MaxPage
// records).
const (
	fuzzMaxFrame   = 64 << 10
	fuzzAllocLimit = 64 * fuzzMaxFrame
)

// checkRoundTrip re-encodes a decoded frame and checks the encoding is canonical and stable.
func checkRoundTrip(t *testing.T, f Frame) {
	t.Helper()
	enc1, err := AppendFrame(nil, f)
	if err != nil {
		t.Fatalf("decoded %s does not re-encode: %v", f.FrameType(), err)
	}
	f2, err := Decode(f.FrameType(), enc1[HeaderLen:])
	if err != nil {
		t.Fatalf("re-encoding %x of %+v does not decode: %v", enc1, f, err)
	}
	enc2, err := AppendFrame(nil, f2)
	if err != nil || !bytes.Equal(enc1, enc2) {
		t.Fatalf("encoding not canonical:\n%x\n%x (%v)", enc1, enc2, err)
	}
	f3, err := Decode(f.FrameType(), enc2[HeaderLen:])
	if err != nil || !reflect.DeepEqual(f2, f3) {
		t.Fatalf("round trip changed the frame:\n%+v\n%+v (%v)", f2, f3, err)
	}
	if v, ok := f.(interface{ Validate() error }); ok {
		if err := v.Validate(); err != nil {
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("Validate returned %T %v, want *Error", err, err)
			}
		}
	}
}

// addSeeds adds each byte string, its truncations, a flipped byte and a trailing byte.
func addSeeds(f *testing.F, seeds ...[]byte) {
	for _, b := range seeds {
		f.Add(b)
		for _, cut := range []int{0, 1, 2, 5, 6, 7, len(b) / 2, len(b) - 1} {
			if cut >= 0 && cut < len(b) {
				f.Add(bytes.Clone(b[:cut]))
			}
		}
		if len(b) > 7 {
			c := bytes.Clone(b)
			c[7] ^= 0x10
			f.Add(c)
		}
		f.Add(append(bytes.Clone(b), 0))
	}
}

// FuzzDecode decodes data[1:] as the body of a frame of type data[0]: it never panics, fails
// only with ErrMalformed or ErrUnknownType, allocates within the documented bound (about 16
// bytes per body byte plus MaxPage records), and what it decodes round-trips.
func FuzzDecode(f *testing.F) {
	var seeds [][]byte
	for _, fr := range allFixtures() {
		b, err := AppendFrame(nil, fr)
		if err != nil {
			f.Fatal(err)
		}
		seeds = append(seeds, append([]byte{byte(fr.FrameType())}, b[HeaderLen:]...))
	}
	addSeeds(f, seeds...)
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) == 0 {
			return
		}
		typ := Type(data[0])
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		fr, err := Decode(typ, data[1:])
		runtime.ReadMemStats(&after)
		if grew, limit := after.TotalAlloc-before.TotalAlloc, uint64(20*len(data))+1<<20; grew > limit {
			t.Fatalf("decoding %d bytes allocated %d, limit %d", len(data), grew, limit)
		}
		if err != nil {
			if !errors.Is(err, ErrMalformed) && !errors.Is(err, ErrUnknownType) {
				t.Fatalf("Decode error %v wraps neither ErrMalformed nor ErrUnknownType", err)
			}
			if errors.Is(err, ErrUnknownType) != !typ.Known() {
				t.Fatalf("type %d: %v", typ, err)
			}
			return
		}
		if fr.FrameType() != typ {
			t.Fatalf("decoded %T for type %s", fr, typ)
		}
		checkRoundTrip(t, fr)
	})
}

// FuzzReader reads an arbitrary byte stream with a Reader until it stops. Next never panics,
// never allocates beyond fuzzAllocLimit per call, ends with io.EOF, io.ErrUnexpectedEOF or
// ErrFrameTooLarge, and everything it decodes round-trips.
func FuzzReader(f *testing.F) {
	var all []byte
	for _, fr := range allFixtures() {
		b, err := AppendFrame(nil, fr)
		if err != nil {
			f.Fatal(err)
		}
		addSeeds(f, b)
		all = append(all, b...)
	}
	f.Add(all)
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, FrameVersion, byte(TypeBatch)})
	f.Add(append(frameOf(FrameVersion, 99, []byte{0x80}), frameOf(2, byte(TypeHello), []byte{0x80})...))
	f.Fuzz(func(t *testing.T, data []byte) {
		r := NewReader(bytes.NewReader(data), fuzzMaxFrame)
		var before, after runtime.MemStats
		for i := 0; ; i++ {
			runtime.ReadMemStats(&before)
			fr, err := r.Next()
			runtime.ReadMemStats(&after)
			if grew := after.TotalAlloc - before.TotalAlloc; grew > fuzzAllocLimit {
				t.Fatalf("Next allocated %d bytes, limit %d", grew, fuzzAllocLimit)
			}
			switch {
			case err == nil:
				checkRoundTrip(t, fr)
			case err == io.EOF, err == io.ErrUnexpectedEOF, errors.Is(err, ErrFrameTooLarge):
				return
			case errors.Is(err, ErrMalformed), errors.Is(err, ErrUnknownType), errors.Is(err, ErrBadVersion):
			default:
				t.Fatalf("unexpected error %v", err)
			}
			if i > len(data) {
				t.Fatal("Reader does not make progress")
			}
		}
	})
}

// FuzzDigestRecord: a digest record (AppendDigestRecord) reads back as exactly the fields it was
// made of, and a run of records splits back into its entries, so two different runs of entries
// never hash the same bytes: only a SHA-256 collision could make two different logs agree.
func FuzzDigestRecord(f *testing.F) {
	f.Add(uint64(41), uint8(KindMessage), "3.99.1", "g1", uint64(12), []byte{0, 1, 0xff}, "2.1.0", "g")
	f.Add(uint64(0), uint8(0), "", "", uint64(0), []byte(nil), "", "")
	f.Add(uint64(1<<63), uint8(255), "1.1.0g", "", uint64(1), []byte("x"), "1.1.0", "g")
	f.Fuzz(func(t *testing.T, seq uint64, kind uint8, msgID, conv string, convSeq uint64, body []byte, msgID2, conv2 string) {
		a := Entry{Seq: Position(seq), Kind: Kind(kind), MsgID: MsgID(msgID), Conv: conv, ConvSeq: Position(convSeq), Body: body}
		b := Entry{Seq: a.Seq + 1, Kind: a.Kind, MsgID: MsgID(msgID2), Conv: conv2, ConvSeq: a.ConvSeq}
		run := AppendDigestRecord(AppendDigestRecord(nil, &a), &b)
		for _, want := range []*Entry{&a, &b} {
			got, n, ok := parseDigestRecord(run)
			wantBody := sha256.Sum256(want.Body)
			if !ok || got.seq != want.Seq || got.kind != want.Kind || got.msgID != want.MsgID || got.conv != want.Conv ||
				got.convSeq != want.ConvSeq || got.body != wantBody {
				t.Fatalf("record %x reads back as %+v (ok %v), want %+v", run, got, ok, want)
			}
			if n != digestRecordFixed+len(want.MsgID)+len(want.Conv) {
				t.Fatalf("record of %d bytes for ids of %d and %d", n, len(want.MsgID), len(want.Conv))
			}
			run = run[n:]
		}
		if len(run) != 0 {
			t.Fatalf("%d bytes after the records", len(run))
		}
	})
}

// digestRecord is a record read back by parseDigestRecord.
type digestRecord struct {
	seq, convSeq Position
	kind         Kind
	msgID        MsgID
	conv         string
	body         [sha256.Size]byte
}

// parseDigestRecord reads the record at the start of b as PROTOCOL §6 lays it out, written here
// from the diagram rather than from AppendDigestRecord, and returns its length.
func parseDigestRecord(b []byte) (r digestRecord, n int, ok bool) {
	take := func(k int) []byte {
		if ok = ok && len(b)-n >= k; !ok {
			return make([]byte, min(k, 8)) // enough for the fixed-width reads; nothing is trusted now
		}
		n += k
		return b[n-k : n]
	}
	ok = true
	r.seq = Position(binary.BigEndian.Uint64(take(8)))
	r.kind = Kind(take(1)[0])
	r.msgID = MsgID(take(int(binary.BigEndian.Uint32(take(4)))))
	r.conv = string(take(int(binary.BigEndian.Uint32(take(4)))))
	r.convSeq = Position(binary.BigEndian.Uint64(take(8)))
	copy(r.body[:], take(sha256.Size))
	return r, n, ok
}
