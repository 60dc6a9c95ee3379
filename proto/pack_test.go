package proto

import (
	"bytes"
	"errors"
	"reflect"
	"strings"
	"testing"
)

// TestEncodedLenIsTheEncoding: EncodedLen is the length of the bytes the encoder writes, for an
// entry with every subset of zero fields, bodies around the bin8/bin16/bin32 boundaries, and a
// conversation.
func TestEncodedLenIsTheEncoding(t *testing.T) {
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
		if got, want := e.EncodedLen(), len(encodeWith(t, &e)); got != want {
			t.Fatalf("mask %b: EncodedLen %d, encoding %d bytes", mask, got, want)
		}
	}
	for _, n := range []int{255, 256, 65535, 65536, MaxBody} {
		e := fixtureEntry
		e.Body = make([]byte, n)
		if got, want := e.EncodedLen(), len(encodeWith(t, &e)); got != want {
			t.Fatalf("body of %d bytes: EncodedLen %d, encoding %d bytes", n, got, want)
		}
	}
	c := fixtureConv
	if got, want := c.EncodedLen(), len(encodeWith(t, &c)); got != want {
		t.Fatalf("conversation: EncodedLen %d, encoding %d bytes", got, want)
	}
}

// widest sets every field of the page frame v except its records (the field named records) to
// its widest encoding, so that what the frame adds to its records is as large as it can be.
func widest(t *testing.T, v reflect.Value, records string) {
	t.Helper()
	for i := 0; i < v.NumField(); i++ {
		f, name := v.Field(i), v.Type().Field(i).Name
		switch {
		case name == records:
		case f.Kind() == reflect.Uint64 || f.Kind() == reflect.Uint32:
			f.SetUint(^uint64(0) >> (64 - f.Type().Bits()))
		case f.Kind() == reflect.Bool:
			f.SetBool(true)
		case f.Kind() == reflect.String: // an id: a source's conversation id
			f.SetString(strings.Repeat("s", MaxIDLen))
		default:
			t.Fatalf("%s.%s: a field of a kind this test does not know how to widen (%v): extend it", v.Type(), name, f.Kind())
		}
	}
}

// TestPageOverhead: whatever the other fields of Batch, HistoryResult and ConvListResult hold, a
// frame of MaxPage records is at most PageOverhead bytes longer than its records' EncodedLen.
func TestPageOverhead(t *testing.T) {
	entries := make([]Entry, MaxPage)
	convs := make([]ConvInfo, MaxPage)
	sumEntries, sumConvs := 0, 0
	for i := range entries {
		entries[i] = Entry{Seq: Position(i + 1), Kind: KindMessage, Body: []byte("x")}
		convs[i] = ConvInfo{Conv: "c", Kind: ConvGroup}
		sumEntries += entries[i].EncodedLen()
		sumConvs += convs[i].EncodedLen()
	}
	pages := []struct {
		f       Frame
		records string
		sum     int
	}{
		{&Batch{Entries: entries}, "Entries", sumEntries},
		{&HistoryResult{Entries: entries}, "Entries", sumEntries},
		{&ConvListResult{Convs: convs}, "Convs", sumConvs},
	}
	for _, p := range pages {
		widest(t, reflect.ValueOf(p.f).Elem(), p.records)
		b, err := AppendFrame(nil, p.f)
		if err != nil {
			t.Fatal(err)
		}
		if overhead := len(b) - 4 - p.sum; overhead > PageOverhead {
			t.Errorf("%v: %d bytes besides its records, PageOverhead is %d", p.f.FrameType(), overhead, PageOverhead)
		} else {
			t.Logf("%v: %d bytes besides its records", p.f.FrameType(), overhead)
		}
	}
}

// TestLargestEntryFitsSmallestFrame: a page holding the largest entry the server may send — a
// full-size message or a CreateGroup of MaxMembers long ids — fits MinFrameLimit, so a server
// may announce any max_frame from MinFrameLimit on and still send every entry.
func TestLargestEntryFitsSmallestFrame(t *testing.T) {
	largest := MaxEntryLen(MaxBody)
	if largest+PageOverhead > MinFrameLimit {
		t.Fatalf("MaxEntryLen(MaxBody) %d + PageOverhead %d exceeds MinFrameLimit %d", largest, PageOverhead, MinFrameLimit)
	}
	t.Logf("largest entry: %d bytes; room left at MinFrameLimit: %d", largest, MinFrameLimit-PageOverhead-largest)

	msg := maxEntry()
	msg.Kind, msg.Body = KindMessage, make([]byte, MaxBody)
	group := maxEntry()
	group.Kind = KindGroupCreate
	for range MaxMembers + 1 {
		group.Members = append(group.Members, strings.Repeat("u", MaxIDLen))
	}
	for _, e := range []Entry{msg, group} {
		if e.EncodedLen() > largest {
			t.Errorf("%v entry of %d bytes, above MaxEntryLen %d", e.Kind, e.EncodedLen(), largest)
		}
		for _, f := range []Frame{
			&Batch{Epoch: ^Epoch(0), Head: ^Position(0), Entries: []Entry{e}},
			&HistoryResult{ID: ^uint64(0), Epoch: ^Epoch(0), First: ^Position(0), Head: ^Position(0), Entries: []Entry{e}},
		} {
			if err := WriteFrameWithin(&bytes.Buffer{}, f, MinFrameLimit); err != nil {
				t.Errorf("%v with one %v entry: %v", f.FrameType(), e.Kind, err)
			}
		}
	}
}

// TestWriteFrameWithin: a frame over the peer's limit is refused with ErrFrameTooLarge and
// nothing is written; a frame of exactly the limit is written.
func TestWriteFrameWithin(t *testing.T) {
	f := &Send{ID: 1, Conv: "c", ClientMsgID: "m", Body: make([]byte, 1000)}
	b, err := AppendFrame(nil, f)
	if err != nil {
		t.Fatal(err)
	}
	exact := len(b) - 4
	var w bytes.Buffer
	if err := WriteFrameWithin(&w, f, exact-1); !errors.Is(err, ErrFrameTooLarge) || w.Len() != 0 {
		t.Fatalf("limit %d: err %v, %d bytes written; want ErrFrameTooLarge and nothing", exact-1, err, w.Len())
	}
	if err := WriteFrameWithin(&w, f, exact); err != nil || !bytes.Equal(w.Bytes(), b) {
		t.Fatalf("limit %d: err %v, wrote %d bytes, want the %d-byte frame", exact, err, w.Len(), len(b))
	}
}
