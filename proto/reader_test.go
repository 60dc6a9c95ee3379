package proto

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"reflect"
	"runtime"
	"strings"
	"testing"
	"testing/iotest"
	"unsafe"
)

func mustAppend(t testing.TB, dst []byte, f Frame) []byte {
	t.Helper()
	b, err := AppendFrame(dst, f)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// rawFrame builds a frame by hand: header with the given length field, version, type, body.
func rawFrame(length uint32, version, typ byte, body []byte) []byte {
	b := binary.BigEndian.AppendUint32(nil, length)
	return append(append(b, version, typ), body...)
}

func frameOf(version, typ byte, body []byte) []byte {
	return rawFrame(uint32(2+len(body)), version, typ, body)
}

var okFrame = &Send{ID: 9, Conv: "c", ClientMsgID: "m", Body: []byte("after")}

// expectContinue checks that the stream yields err first, then okFrame, then io.EOF.
func expectContinue(t *testing.T, stream []byte, target error) {
	t.Helper()
	r := NewReader(bytes.NewReader(stream), 0)
	if _, err := r.Next(); !errors.Is(err, target) {
		t.Fatalf("first frame: %v, want %v", err, target)
	}
	f, err := r.Next()
	if err != nil || !reflect.DeepEqual(f, okFrame) {
		t.Fatalf("the frame after a bad one: %+v, %v", f, err)
	}
	if _, err := r.Next(); err != io.EOF {
		t.Fatalf("end: %v", err)
	}
}

func TestReaderUnknownTypeContinues(t *testing.T) {
	stream := frameOf(FrameVersion, 99, []byte{0x81, 0xa1, 'x', 0x01})
	expectContinue(t, mustAppend(t, stream, okFrame), ErrUnknownType)
}

func TestReaderMalformedContinues(t *testing.T) {
	for name, body := range map[string][]byte{
		"empty body":      {},
		"not a map":       {0x93, 1, 2, 3},
		"truncated map":   {0x82, 0xa2, 'i', 'd', 0x01},
		"trailing bytes":  {0x80, 0x00},
		"wrong type":      {0x81, 0xa2, 'i', 'd', 0xa1, 'x'},
		"ext type":        {0x81, 0xa1, 'x', 0xd4, 0x01, 0x00},
		"reserved 0xc1":   {0x81, 0xa1, 'x', 0xc1},
		"int key":         {0x81, 0x01, 0x01},
		"huge array":      {0x81, 0xa1, 'x', 0xdd, 0xff, 0xff, 0xff, 0xff},
		"huge str":        {0x81, 0xa1, 'x', 0xdb, 0x7f, 0xff, 0xff, 0xff},
		"deep nesting":    append([]byte{0x81, 0xa1, 'x'}, bytes.Repeat([]byte{0x91}, 20)...),
		"nil body":        {0xc0},
		"float in an int": {0x81, 0xa2, 'i', 'd', 0xcb, 0x40, 0, 0, 0, 0, 0, 0, 0},
	} {
		t.Run(name, func(t *testing.T) {
			expectContinue(t, mustAppend(t, frameOf(FrameVersion, byte(TypeSend), body), okFrame), ErrMalformed)
		})
	}
	t.Run("length below header", func(t *testing.T) {
		for _, n := range []uint32{0, 1} {
			stream := append(rawFrame(n, 0, 0, nil)[:4+n], mustAppend(t, nil, okFrame)...)
			expectContinue(t, stream, ErrMalformed)
		}
	})
}

func TestReaderBadVersion(t *testing.T) {
	stream := frameOf(2, byte(TypeSend), []byte{0x80})
	expectContinue(t, mustAppend(t, stream, okFrame), ErrBadVersion)
	if CodeOf(ErrBadVersion) != CodeUnsupportedVersion {
		t.Error("ErrBadVersion does not map to CodeUnsupportedVersion")
	}
}

// TestReaderTruncated cuts a stream of every fixture at every byte: the frames before the cut
// decode, then Next returns io.EOF at a frame boundary or io.ErrUnexpectedEOF inside a frame,
// and keeps returning it.
func TestReaderTruncated(t *testing.T) {
	var stream []byte
	ends := map[int]bool{0: true}
	for _, f := range fixtures() {
		stream = mustAppend(t, stream, f)
		ends[len(stream)] = true
	}
	for cut := 0; cut < len(stream); cut++ {
		r := NewReader(bytes.NewReader(stream[:cut]), 0)
		var err error
		for err == nil {
			_, err = r.Next()
		}
		want := io.ErrUnexpectedEOF
		if ends[cut] {
			want = io.EOF
		}
		if err != want {
			t.Fatalf("cut at %d: %v, want %v", cut, err, want)
		}
		if _, again := r.Next(); again != want {
			t.Fatalf("cut at %d: error not sticky: %v", cut, again)
		}
	}
}

// hugeReader declares a 4 GB frame and then supplies zeros forever.
type hugeReader struct{ n int }

func (h *hugeReader) Read(p []byte) (int, error) {
	hdr := []byte{0xff, 0xff, 0xff, 0xff, FrameVersion, byte(TypeBatch)}
	n := 0
	for n < len(p) {
		if h.n < len(hdr) {
			p[n] = hdr[h.n]
		} else {
			p[n] = 0
		}
		n++
		h.n++
	}
	return n, nil
}

// TestReaderOversized: a declared length above the limit fails without reading the frame or
// allocating for it, and the error is sticky.
func TestReaderOversized(t *testing.T) {
	for _, max := range []int{0, 100, MaxFrameLimit, 1 << 40} {
		src := &hugeReader{}
		r := NewReader(src, max)
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		_, err := r.Next()
		runtime.ReadMemStats(&after)
		if !errors.Is(err, ErrFrameTooLarge) || CodeOf(err) != CodeFrameTooLarge {
			t.Fatalf("max %d: %v, want ErrFrameTooLarge", max, err)
		}
		if src.n != 4 {
			t.Errorf("max %d: read %d bytes, want only the 4 of the length", max, src.n)
		}
		if grew := after.TotalAlloc - before.TotalAlloc; grew > 64<<10 {
			t.Errorf("max %d: allocated %d bytes", max, grew)
		}
		if _, err2 := r.Next(); !errors.Is(err2, ErrFrameTooLarge) {
			t.Errorf("max %d: error not sticky: %v", max, err2)
		}
	}
}

// TestReaderLimitIsInclusive: a frame exactly at the limit is read; one byte more is refused.
func TestReaderLimitIsInclusive(t *testing.T) {
	frame := mustAppend(t, nil, okFrame)
	n := len(frame) - 4
	if f, err := NewReader(bytes.NewReader(frame), n).Next(); err != nil || !reflect.DeepEqual(f, okFrame) {
		t.Fatalf("frame at the limit: %v", err)
	}
	if _, err := NewReader(bytes.NewReader(frame), n-1).Next(); !errors.Is(err, ErrFrameTooLarge) {
		t.Fatalf("frame above the limit: %v", err)
	}
	r := NewReader(bytes.NewReader(append(bytes.Clone(frame), frame...)), n-1)
	r.SetMaxFrame(n)
	for i := 0; i < 2; i++ {
		if _, err := r.Next(); err != nil {
			t.Fatalf("after SetMaxFrame: %v", err)
		}
	}
}

// TestReaderLargeFrame reads a frame bigger than the buffer step through one-byte reads, then
// a small one, and checks the large buffer is not kept.
func TestReaderLargeFrame(t *testing.T) {
	big := &Batch{Epoch: 1, Head: 300}
	for i := 0; i < 300; i++ {
		big.Entries = append(big.Entries, Entry{Seq: Position(i + 1), Kind: KindMessage, Body: bytes.Repeat([]byte{byte(i)}, 1000)})
	}
	stream := mustAppend(t, mustAppend(t, nil, big), okFrame)
	r := NewReader(iotest.OneByteReader(bytes.NewReader(stream)), 0)
	f, err := r.Next()
	if err != nil || !reflect.DeepEqual(f, big) {
		t.Fatalf("large frame: %v", err)
	}
	if cap(r.small) > smallBuf {
		t.Errorf("kept a %d-byte buffer after a large frame", cap(r.small))
	}
	if f, err := r.Next(); err != nil || !reflect.DeepEqual(f, okFrame) {
		t.Fatalf("frame after the large one: %v", err)
	}
}

// TestReaderBufferReuse: reading frames of every buffer class allocates only the decoded
// frames, once the buffers exist.
func TestReaderBufferReuse(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts vary under the race detector")
	}
	for name, f := range map[string]Frame{
		"small":  &HeadCheck{ID: 1},
		"pooled": &Send{ID: 1, Conv: "c", ClientMsgID: "m", Body: make([]byte, MaxBody)},
	} {
		frame := mustAppend(t, nil, f)
		src := bytes.NewReader(frame)
		r := NewReader(src, 0)
		allocs := testing.AllocsPerRun(100, func() {
			src.Reset(frame)
			if _, err := r.Next(); err != nil {
				t.Fatal(err)
			}
		})
		want := map[string]float64{"small": 1, "pooled": 5}[name] // the frame, its strings and body
		if allocs > want {
			t.Errorf("%s frame: %.0f allocations per Next, want at most %.0f", name, allocs, want)
		}
	}
}

// TestReaderIOError passes a read error through and keeps it.
func TestReaderIOError(t *testing.T) {
	boom := errors.New("boom")
	r := NewReader(io.MultiReader(bytes.NewReader(mustAppend(t, nil, okFrame)[:7]), iotest.ErrReader(boom)), 0)
	if _, err := r.Next(); err != boom {
		t.Fatalf("got %v, want boom", err)
	}
	if _, err := r.Next(); err != boom {
		t.Fatalf("not sticky: %v", err)
	}
}

// TestDecodeDoesNotAlias: decoded slices do not point into the body buffer.
func TestDecodeDoesNotAlias(t *testing.T) {
	b := mustAppend(t, nil, okFrame)[HeaderLen:]
	f, err := Decode(TypeSend, b)
	if err != nil {
		t.Fatal(err)
	}
	for i := range b {
		b[i] = 0
	}
	if !reflect.DeepEqual(f, okFrame) {
		t.Fatalf("decoded frame changed with its buffer: %+v", f)
	}
}

// TestDecodeForwardCompatible: unknown keys of any shape are skipped; known ones still decode.
func TestDecodeForwardCompatible(t *testing.T) {
	body := []byte{0x83,
		0xa9, 'n', 'e', 'w', '_', 'f', 'i', 'e', 'l', 'd', 0x82, 0xa1, 'a', 0x92, 0x01, 0xc3, 0xa1, 'b', 0xcb, 0x3f, 0xf0, 0, 0, 0, 0, 0, 0,
		0xa2, 'i', 'd', 0x2a,
		0xa4, 'c', 'o', 'n', 'v', 0xa1, 'c',
	}
	f, err := Decode(TypeConvState, body)
	if err != nil || !reflect.DeepEqual(f, &ConvState{ID: 42, Conv: "c"}) {
		t.Fatalf("got %+v, %v", f, err)
	}
}

// TestDecodeRecordLimit: an array of more than MaxPage maps is refused; MaxPage is accepted.
func TestDecodeRecordLimit(t *testing.T) {
	body := func(n int) []byte {
		b := append([]byte{0x81, 0xa7}, "entries"...)
		b = binary.BigEndian.AppendUint16(append(b, 0xdc), uint16(n))
		return append(b, bytes.Repeat([]byte{0x80}, n)...)
	}
	if f, err := Decode(TypeBatch, body(MaxPage)); err != nil || len(f.(*Batch).Entries) != MaxPage {
		t.Fatalf("MaxPage entries: %v", err)
	}
	if _, err := Decode(TypeBatch, body(MaxPage+1)); !errors.Is(err, ErrMalformed) {
		t.Fatalf("MaxPage+1 entries: %v", err)
	}
}

// TestDecodeShapeLimits covers the shape rules of checkBody one by one.
func TestDecodeShapeLimits(t *testing.T) {
	key := func(k string) []byte { return append([]byte{0xa0 | byte(len(k))}, k...) }
	array16 := func(n int, elem []byte) []byte {
		b := binary.BigEndian.AppendUint16([]byte{0xdc}, uint16(n))
		return append(b, bytes.Repeat(elem, n)...)
	}
	nest := func(depth int) []byte { // depth maps nested under the top-level one
		b := []byte{0x80}
		for i := 0; i < depth; i++ {
			b = append(append([]byte{0x81}, key("x")...), b...)
		}
		return b
	}
	cases := []struct {
		name string
		typ  Type
		body []byte
		ok   bool
	}{
		{"MaxPage nil entries", TypeBatch, append(key("entries"), array16(MaxPage, []byte{0xc0})...), true},
		{"MaxPage+1 nil entries", TypeBatch, append(key("entries"), array16(MaxPage+1, []byte{0xc0})...), false},
		{"MaxPage+1 int entries", TypeBatch, append(key("entries"), array16(MaxPage+1, []byte{0x01})...), false},
		{"65535 member ids", TypeCreateGroup, append(key("members"), array16(65535, []byte{0xa1, 'u'})...), true},
		{"duplicate key", TypeSend, append(append(key("id"), 1), append(key("id"), 2)...), false},
		{"duplicate unknown key", TypeSend, append(append(key("zz"), 1), append(key("zz"), 2)...), false},
		{"depth limit", TypeSend, append(key("x"), nest(maxDepth-2)...), true},
		{"too deep", TypeSend, append(key("x"), nest(maxDepth-1)...), false},
		{"str8 key", TypeSend, []byte{0xd9, 2, 'i', 'd', 0x05}, true},
		{"str16 key", TypeSend, []byte{0xda, 0, 2, 'i', 'd', 0x05}, true},
		{"str32 key", TypeSend, []byte{0xdb, 0, 0, 0, 2, 'i', 'd', 0x05}, true},
		{"bin key", TypeSend, []byte{0xc4, 2, 'i', 'd', 0x05}, false},
		{"long key", TypeSend, append([]byte{0xd9, maxKeyLen + 1}, append(bytes.Repeat([]byte{'k'}, maxKeyLen+1), 0x01)...), false},
	}
	for _, c := range cases {
		keys := 1
		if strings.HasPrefix(c.name, "duplicate") {
			keys = 2
		}
		body := append([]byte{0x80 | byte(keys)}, c.body...)
		_, err := Decode(c.typ, body)
		if c.ok != (err == nil) {
			t.Errorf("%s: %v, want ok=%v", c.name, err, c.ok)
		}
		if err != nil && !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: %v does not wrap ErrMalformed", c.name, err)
		}
	}
}

// TestDecodeAllocBound decodes the most allocation-hungry shapes the rules allow and checks the
// cost stays within the documented bound: about 16 bytes per body byte plus twice MaxPage
// records.
func TestDecodeAllocBound(t *testing.T) {
	key := func(k string) []byte { return append([]byte{0xa0 | byte(len(k))}, k...) }
	array := func(n int, elem []byte) []byte {
		b := binary.BigEndian.AppendUint16([]byte{0xdc}, uint16(n))
		return append(b, bytes.Repeat(elem, n)...)
	}
	// MaxPage entries, each with a members list of empty strings, filling about 1 MiB.
	entry := append([]byte{0x81}, key("members")...)
	entry = append(entry, array(1000, []byte{0xa0})...)
	shapes := map[string]struct {
		typ  Type
		body []byte
	}{
		"nil entries":     {TypeBatch, append(append([]byte{0x81}, key("entries")...), array(MaxPage, []byte{0xc0})...)},
		"member lists":    {TypeBatch, append(append([]byte{0x81}, key("entries")...), array(MaxPage, entry)...)},
		"empty member id": {TypeAddMembers, append(append([]byte{0x81}, key("members")...), array(65535, []byte{0xa0})...)},
		"nil convs":       {TypeConvListResult, append(append([]byte{0x81}, key("convs")...), array(MaxPage, []byte{0xc0})...)},
	}
	for name, s := range shapes {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		_, err := Decode(s.typ, s.body)
		runtime.ReadMemStats(&after)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		grew := after.TotalAlloc - before.TotalAlloc
		limit := uint64(20*len(s.body)) + 2*MaxPage*uint64(unsafe.Sizeof(Entry{})) + 64<<10 // the decoder copies a grown slice once
		t.Logf("%s: %d-byte body, %d bytes allocated (%.1f per byte)", name, len(s.body), grew, float64(grew)/float64(len(s.body)))
		if grew > limit {
			t.Errorf("%s: %d-byte body allocated %d bytes, bound %d", name, len(s.body), grew, limit)
		}
	}
}
