package proto

import (
	"bytes"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/vmihailenco/msgpack/v5"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/golden")

// TestFixturesCoverEveryType keeps fixtures() complete and checks the type table.
func TestFixturesCoverEveryType(t *testing.T) {
	var got []Type
	for _, f := range fixtures() {
		got = append(got, f.FrameType())
		if reflect.ValueOf(f).Elem().IsZero() {
			t.Errorf("%s fixture is zero", f.FrameType())
		}
	}
	if !reflect.DeepEqual(got, Types()) {
		t.Fatalf("fixtures cover %v, known types are %v", got, Types())
	}
	names := map[string]bool{}
	for _, typ := range Types() {
		f := newFrame(typ)
		if f == nil || f.FrameType() != typ {
			t.Errorf("newFrame(%d) = %T", typ, f)
		}
		if names[typ.String()] || strings.HasPrefix(typ.String(), "type(") {
			t.Errorf("bad or duplicate name %q", typ)
		}
		names[typ.String()] = true
		_, isReq := f.(Request)
		_, isResp := f.(Response)
		wantReq := typ.FromClient() && typ.Stream() == StreamRequest
		wantResp := typ.Stream() == StreamRequest || typ == TypeError // every Request has RequestID too
		if isReq != wantReq || isResp != wantResp {
			t.Errorf("%s: Request %v (want %v), Response %v (want %v)", typ, isReq, wantReq, isResp, wantResp)
		}
		if _, ok := f.(interface{ Validate() error }); ok != typ.FromClient() {
			t.Errorf("%s: has Validate %v, sent by the client %v", typ, ok, typ.FromClient())
		}
	}
	if Type(99).Known() || Type(99).String() != "type(99)" || Type(99).Stream() != 0 {
		t.Errorf("unknown type 99 misdescribed")
	}
}

// TestRoundTrip writes every fixture and fixture variant on one stream and reads them back,
// whole and one byte at a time.
func TestRoundTrip(t *testing.T) {
	var stream bytes.Buffer
	for _, f := range allFixtures() {
		if err := WriteFrame(&stream, f); err != nil {
			t.Fatalf("WriteFrame(%s): %v", f.FrameType(), err)
		}
	}
	readers := map[string]func([]byte) io.Reader{
		"whole":    func(b []byte) io.Reader { return bytes.NewReader(b) },
		"one-byte": func(b []byte) io.Reader { return iotest.OneByteReader(bytes.NewReader(b)) },
		"half":     func(b []byte) io.Reader { return iotest.HalfReader(bytes.NewReader(b)) },
		"data-err": func(b []byte) io.Reader { return iotest.DataErrReader(bytes.NewReader(b)) },
	}
	for name, mk := range readers {
		t.Run(name, func(t *testing.T) {
			r := NewReader(mk(stream.Bytes()), 0)
			for _, want := range allFixtures() {
				got, err := r.Next()
				if err != nil {
					t.Fatalf("Next (%s): %v", want.FrameType(), err)
				}
				if !reflect.DeepEqual(got, want) {
					t.Fatalf("round trip changed the frame:\n got %+v\nwant %+v", got, want)
				}
			}
			if f, err := r.Next(); err != io.EOF {
				t.Fatalf("after the last frame: %v, %v; want io.EOF", f, err)
			}
		})
	}
}

// TestZeroFrames: a zero frame encodes as an empty map and decodes to itself.
func TestZeroFrames(t *testing.T) {
	for _, typ := range Types() {
		b, err := AppendFrame(nil, newFrame(typ))
		if err != nil {
			t.Fatal(err)
		}
		if want := []byte{0, 0, 0, 3, FrameVersion, byte(typ), 0x80}; !bytes.Equal(b, want) {
			t.Errorf("zero %s = %x, want %x", typ, b, want)
		}
		f, err := Decode(typ, b[HeaderLen:])
		if err != nil || !reflect.DeepEqual(f, newFrame(typ)) {
			t.Errorf("zero %s decodes to %+v, %v", typ, f, err)
		}
	}
}

func TestAppendFrameErrors(t *testing.T) {
	prefix := []byte("keep")
	for name, f := range map[string]Frame{
		"nil":         nil,
		"nil pointer": (*Send)(nil),
		"unknown":     unknownFrame{},
		"too large":   &Batch{Entries: []Entry{{Body: make([]byte, MaxFrameLimit)}}},
	} {
		b, err := AppendFrame(bytes.Clone(prefix), f)
		if err == nil || !bytes.Equal(b, prefix) {
			t.Errorf("%s: AppendFrame = %q, %v; want the prefix and an error", name, b, err)
		}
	}
	_, err := AppendFrame(nil, &Batch{Entries: []Entry{{Body: make([]byte, MaxFrameLimit)}}})
	if !errors.Is(err, ErrFrameTooLarge) {
		t.Errorf("oversized frame: %v, want ErrFrameTooLarge", err)
	}
	if err := WriteFrame(failWriter{}, &HeadCheck{ID: 1}); err == nil || !strings.Contains(err.Error(), "boom") {
		t.Errorf("WriteFrame to a failing writer: %v", err)
	}
}

type unknownFrame struct{}

func (unknownFrame) FrameType() Type { return 99 }

type failWriter struct{}

func (failWriter) Write([]byte) (int, error) { return 0, errors.New("boom") }

func TestBatchFollows(t *testing.T) {
	b := &Batch{Entries: []Entry{{Seq: 5}, {Seq: 6}, {Seq: 7}}}
	for pos, want := range map[Position]bool{4: true, 3: false, 5: false, 0: false} {
		if got := b.Follows(pos); got != want {
			t.Errorf("Follows(%d) = %v, want %v", pos, got, want)
		}
	}
	if (&Batch{Entries: []Entry{{Seq: 5}, {Seq: 7}}}).Follows(4) {
		t.Error("a batch with a hole follows")
	}
	if (&Batch{}).Follows(0) {
		t.Error("an empty batch follows")
	}
}

func TestMsgIDValid(t *testing.T) {
	for s, want := range map[MsgID]bool{
		"3.99.0": true, "0.1.0": true, "4294967295.18446744073709551615.4294967295": true,
		"": false, "3.0.0": false, "3.99": false, "3.99.0.1": false, "03.99.0": false, "3.099.0": false,
		"3.99.00": false, "+3.99.0": false, "-3.99.0": false, "3..0": false, "4294967296.1.0": false,
		"1.18446744073709551616.0": false, "a.b.c": false, " 3.99.0": false,
	} {
		if got := s.Valid(); got != want {
			t.Errorf("MsgID(%q).Valid() = %v, want %v", s, got, want)
		}
	}
}

func TestKindNames(t *testing.T) {
	want := []string{"message", "receipt", "recall", "group_create", "member_add", "member_remove", "role_change", "delivered", "edit", "reaction"}
	for i, n := range want {
		if k := Kind(i + 1); !k.Valid() || k.String() != n {
			t.Errorf("Kind(%d) = %q valid %v, want %q", i+1, k, k.Valid(), n)
		}
	}
	if Kind(0).Valid() || Kind(11).Valid() || Kind(11).String() != "kind(11)" || KindDelivered != 8 || KindReaction != 10 {
		t.Error("kinds 0, 8, 10 and 11 misdescribed")
	}
	if ConvDirect.String() != "direct" || ConvGroup.String() != "group" || ConvKind(3).String() != "conv_kind(3)" {
		t.Error("conversation kinds misdescribed")
	}
}

// TestGolden pins the wire encoding of every frame type: the current encoder must produce the
// bytes in testdata/golden (one file per frame type, <type>.v1.hex, and one per fixture
// variant, variants/<type>.<variant>.v1.hex) and those bytes must decode to the fixture. After an
// intended change (adding a field is one; renaming or renumbering is not allowed), run
// `go test ./proto -run TestGolden -update` and review the diff: a new key belongs in a new
// variant, so that the files of earlier revisions keep their bytes.
func TestGolden(t *testing.T) {
	type golden struct {
		name, path string
		f          Frame
	}
	var cases []golden
	for _, f := range fixtures() {
		name := f.FrameType().String()
		cases = append(cases, golden{name, filepath.Join("testdata", "golden", name+".v1.hex"), f})
	}
	for _, v := range fixtureVariants() {
		if typ, _, _ := strings.Cut(v.name, "."); typ != v.f.FrameType().String() {
			t.Errorf("variant %s is a %s frame: name it %s.<variant>", v.name, v.f.FrameType(), v.f.FrameType())
		}
		cases = append(cases, golden{v.name, filepath.Join("testdata", "golden", "variants", v.name+".v1.hex"), v.f})
	}
	for _, c := range cases {
		name, path, f := c.name, c.path, c.f
		t.Run(name, func(t *testing.T) {
			got, err := AppendFrame(nil, f)
			if err != nil {
				t.Fatal(err)
			}
			if *update {
				writeHex(t, path, name, got)
			}
			want := readHex(t, path)
			if !bytes.Equal(got, want) {
				t.Errorf("encoding changed:\n got %x\nwant %x\n(the wire format changed: see the doc comment)", got, want)
			}
			dec, err := NewReader(bytes.NewReader(want), 0).Next()
			if err != nil {
				t.Fatalf("golden bytes no longer decode: %v", err)
			}
			if !reflect.DeepEqual(dec, f) {
				t.Errorf("golden bytes decode to\n%+v\nwant\n%+v", dec, f)
			}
		})
	}
}

func writeHex(t *testing.T, path, name string, b []byte) {
	t.Helper()
	var s strings.Builder
	fmt.Fprintf(&s, "# %s frame, version %d: %d bytes (golden; regenerate with -update, see frame_test.go)\n", name, FrameVersion, len(b))
	h := hex.EncodeToString(b)
	for len(h) > 64 {
		s.WriteString(h[:64] + "\n")
		h = h[64:]
	}
	s.WriteString(h + "\n")
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(s.String()), 0o644); err != nil {
		t.Fatal(err)
	}
}

func readHex(t *testing.T, path string) []byte {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	var h strings.Builder
	for _, line := range strings.Split(string(data), "\n") {
		if !strings.HasPrefix(line, "#") {
			h.WriteString(strings.TrimSpace(line))
		}
	}
	b, err := hex.DecodeString(h.String())
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return b
}

// everyFieldEntry returns fixtureEntry with every field set, for the tests that zero each subset
// of an entry's fields: a field added to Entry must be set here.
func everyFieldEntry(t *testing.T) Entry {
	t.Helper()
	e := fixtureEntry
	e.Role, e.MemberCount, e.Source = RoleAdmin, 40, true
	e.Reaction, e.Remove, e.Folded, e.BodyHash = "👍", true, 50, []byte{0xe3, 0xb0}
	v := reflect.ValueOf(e)
	for i := 0; i < v.NumField(); i++ {
		if v.Field(i).IsZero() {
			t.Fatalf("everyFieldEntry leaves %s zero: set it", v.Type().Field(i).Name)
		}
	}
	return e
}

// TestEntryEncoderMatchesTags: the hand-written Entry encoder produces the bytes the pinned
// reflective encoder produces from the struct tags, for every subset of zero fields.
func TestEntryEncoderMatchesTags(t *testing.T) {
	base := everyFieldEntry(t)
	full := reflect.ValueOf(base)
	for mask := 0; mask < 1<<full.NumField(); mask++ {
		e := base
		v := reflect.ValueOf(&e).Elem()
		for i := 0; i < v.NumField(); i++ {
			if mask&(1<<i) != 0 {
				v.Field(i).SetZero()
			}
		}
		custom := encodeWith(t, &e)
		plain := encodeWith(t, (*reflectEntry)(&e))
		if !bytes.Equal(custom, plain) {
			t.Fatalf("mask %b: custom %x, reflective %x", mask, custom, plain)
		}
	}
}

func encodeWith(t *testing.T, v any) []byte {
	t.Helper()
	var w appendWriter
	enc := msgpack.NewEncoder(&w)
	configureEncoder(enc)
	if err := enc.Encode(v); err != nil {
		t.Fatal(err)
	}
	return w.b
}

func TestLimitsWithDefaults(t *testing.T) {
	got := Limits{}.WithDefaults()
	want := Limits{MaxFrame: DefaultMaxFrame, MaxBody: MaxBody, MaxBatch: DefaultMaxBatch, HeartbeatMs: DefaultHeartbeatMs}
	if got != want {
		t.Errorf("zero limits: %+v, want %+v", got, want)
	}
	big := Limits{MaxFrame: 1 << 30, MaxBody: 1 << 20, MaxBatch: 5000, SendRatePerS: 7, HeartbeatMs: 1, MaxStreams: 3, SendBurst: 4, QueryRatePerS: 5, QueryBurst: 6, RequestIdleMs: 8}.WithDefaults()
	if want := (Limits{MaxFrame: MaxFrameLimit, MaxBody: MaxBody, MaxBatch: MaxPage, SendRatePerS: 7, HeartbeatMs: 1, MaxStreams: 3, SendBurst: 4, QueryRatePerS: 5, QueryBurst: 6, RequestIdleMs: 8}); big != want {
		t.Errorf("large limits: %+v, want %+v", big, want)
	}
}
