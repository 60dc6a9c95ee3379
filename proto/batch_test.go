package proto

import (
	"bytes"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// randomEntry returns an entry with each field present or zero at random, numbers around the
// msgpack width boundaries and bodies around the bin8/bin16 boundaries.
func randomEntry(r *rand.Rand, seq Position) Entry {
	num := func() uint64 {
		widths := []uint64{0, 1, 127, 128, 255, 256, 65535, 65536, 1<<32 - 1, 1 << 32, ^uint64(0)}
		return widths[r.IntN(len(widths))]
	}
	str := func() string { return strings.Repeat("abcdefgh", 5)[:r.IntN(40)] }
	e := Entry{Seq: seq, Kind: Kind(r.IntN(8)), MsgID: MsgID(str()), Conv: str(), ConvSeq: Position(num()),
		Sender: str(), Time: int64(num()) * int64(1-2*r.IntN(2)), UpTo: Position(num()), Target: MsgID(str()),
		Role: Role(r.IntN(4)), MemberCount: uint32(num()), Source: r.IntN(2) == 0}
	if r.IntN(2) == 0 {
		e.Body = bytes.Repeat([]byte{byte(seq)}, []int{0, 1, 255, 256, 300, 65535, 65536}[r.IntN(7)])
	}
	for range r.IntN(4) {
		e.Members = append(e.Members, str()+"m")
	}
	return e
}

// TestBatchBuilderIsAppendFrame: the frame a BatchBuilder builds is byte for byte what
// AppendFrame writes for the same Batch — for random entries, epochs and heads (zero ones
// included, which the encoding omits), batches of the user log, of sub-logs and of sources (with
// and without After, Frame and SourceFrame), and entry counts on both sides of the
// fixarray/array16 boundary up to MaxPage — in one builder reused from batch to batch, so that no
// batch carries bytes of the one before.
func TestBatchBuilderIsAppendFrame(t *testing.T) {
	// Frame writes Batch's fields itself: a field added to Batch must be added there too.
	var fields []string
	for f := range reflect.TypeFor[Batch]().Fields() {
		fields = append(fields, f.Name)
	}
	if want := []string{"Epoch", "Entries", "Head", "Sub", "Source", "After"}; !slices.Equal(fields, want) {
		t.Fatalf("Batch has the fields %v; BatchBuilder.Frame writes %v: teach it the new ones", fields, want)
	}
	r := rand.New(rand.NewPCG(1, 2))
	var b BatchBuilder
	counts := []int{0, 1, 2, 15, 16, 17, 255, 256, MaxPage, 3, 1}
	for round := range 60 {
		n := counts[round%len(counts)]
		epoch := Epoch([]uint64{0, 1, 9, 1 << 40, ^uint64(0)}[r.IntN(5)])
		head := Position([]uint64{0, 5, 1 << 20, ^uint64(0)}[r.IntN(4)])
		sub := []uint32{0, 1, MaxSubLogs - 1}[r.IntN(3)]
		want := &Batch{Epoch: epoch, Head: head, Sub: sub}
		if round%3 == 2 { // a source's batch (revision 6): no sub, a conversation id, maybe After
			want.Sub = 0
			want.Source = []string{"g", strings.Repeat("s", MaxIDLen)}[r.IntN(2)]
			want.After = Position([]uint64{0, 7, 1 << 40, ^uint64(0)}[r.IntN(4)])
		}
		b.Reset(1 << 30)
		for i := range n {
			e := randomEntry(r, Position(round*1000+i+1))
			if !b.Add(&e) {
				t.Fatalf("round %d: entry %d refused with room to spare", round, i)
			}
			want.Entries = append(want.Entries, e)
		}
		if b.Len() != n {
			t.Fatalf("round %d: Len %d, want %d", round, b.Len(), n)
		}
		var got []byte
		if want.Source != "" {
			got = b.SourceFrame(epoch, head, want.Source, want.After)
		} else {
			got = b.Frame(epoch, head, sub)
		}
		wantB, err := AppendFrame(nil, want)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, wantB) {
			t.Fatalf("round %d (%d entries, epoch %d, head %d, source %q, after %d): builder frame differs from AppendFrame\n got %x\nwant %x",
				round, n, epoch, head, want.Source, want.After, got[:min(len(got), 64)], wantB[:min(len(wantB), 64)])
		}
		f, err := NewReader(bytes.NewReader(got), MaxFrameLimit).Next()
		if err != nil || f.FrameType() != TypeBatch {
			t.Fatalf("round %d: the frame reads back as %v, %v", round, f, err)
		}
		if g := f.(*Batch); g.Source != want.Source || g.After != want.After || g.Sub != want.Sub {
			t.Fatalf("round %d: read back source %q after %d sub %d, want %q %d %d", round, g.Source, g.After, g.Sub, want.Source, want.After, want.Sub)
		}
	}
}

// TestBatchBuilderRoom: entries are taken while their encodings fit the room, the first one
// whatever its size; an entry refused leaves nothing of itself in the frame, which then holds
// exactly the accepted ones and fits room + PageOverhead.
func TestBatchBuilderRoom(t *testing.T) {
	var b BatchBuilder
	big := Entry{Seq: 1, Kind: KindMessage, MsgID: "1.1.0", Conv: "c", Sender: "s", Body: make([]byte, 1000)}
	b.Reset(10) // less than one entry: the first is taken anyway
	if !b.Add(&big) {
		t.Fatal("the first entry of a batch was refused")
	}
	second := big
	second.Seq = 2
	if b.Add(&second) {
		t.Fatal("a second entry beyond the room was taken")
	}
	if got, want := b.Frame(1, 2, 0), mustFrame(t, &Batch{Epoch: 1, Head: 2, Entries: []Entry{big}}); !bytes.Equal(got, want) {
		t.Fatal("the refused entry's bytes are in the frame")
	}

	room := 5 * big.EncodedLen()
	b.Reset(room)
	var taken []Entry
	for i := range 20 {
		e := big
		e.Seq = Position(i + 1)
		if !b.Add(&e) {
			break
		}
		taken = append(taken, e)
	}
	if len(taken) != 5 {
		t.Fatalf("%d entries of %d bytes taken in a room of %d, want 5", len(taken), big.EncodedLen(), room)
	}
	frame := b.Frame(7, 20, 0)
	if !bytes.Equal(frame, mustFrame(t, &Batch{Epoch: 7, Head: 20, Entries: taken})) {
		t.Fatal("frame differs from AppendFrame of the entries taken")
	}
	if l := len(frame) - 4; l > room+PageOverhead {
		t.Fatalf("frame of %d bytes for a room of %d: beyond room + PageOverhead", l, room)
	}
}

// TestBatchBuilderMisuse: Add or Frame without Reset panics rather than build a broken frame.
func TestBatchBuilderMisuse(t *testing.T) {
	mustPanic := func(name string, f func()) {
		t.Helper()
		defer func() {
			if recover() == nil {
				t.Errorf("%s did not panic", name)
			}
		}()
		f()
	}
	var b BatchBuilder
	e := fixtureEntry
	mustPanic("Add before Reset", func() { b.Add(&e) })
	b.Reset(1 << 20)
	b.Add(&e)
	b.Frame(1, 41, 0)
	mustPanic("Add after Frame", func() { b.Add(&e) })
	mustPanic("Frame twice", func() { b.Frame(1, 41, 0) })
	b.Release()
	mustPanic("Add after Release", func() { b.Add(&e) })
	b.Reset(1 << 20) // and usable again
	if !b.Add(&e) || !bytes.Equal(b.Frame(1, 41, 0), mustFrame(t, &Batch{Epoch: 1, Head: 41, Entries: []Entry{e}})) {
		t.Fatal("a builder reset after Release builds a wrong frame")
	}
}

func mustFrame(t *testing.T, f Frame) []byte {
	t.Helper()
	b, err := AppendFrame(nil, f)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// BenchmarkBatchBuilder encodes 256-entry batches of 256-byte messages with one reused builder,
// as a catching-up sync stream does; compare with BenchmarkAppendFrame/batch, which encodes an
// already built []Entry.
func BenchmarkBatchBuilder(b *testing.B) {
	src := benchBatch(256)
	var bb BatchBuilder
	var n int
	b.ReportAllocs()
	for b.Loop() {
		bb.Reset(DefaultMaxFrame - PageOverhead)
		for i := range src.Entries {
			bb.Add(&src.Entries[i])
		}
		n = len(bb.Frame(src.Epoch, src.Head, src.Sub))
	}
	b.SetBytes(int64(n))
	b.ReportMetric(float64(len(src.Entries)*b.N)/b.Elapsed().Seconds(), "entries/s")
}
