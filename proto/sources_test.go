package proto

import (
	"bytes"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/vmihailenco/msgpack/v5"
)

// TestSourceEndType: SourceEnd is frame type 28, a server-to-client frame of the sync stream
// named "source_end", decoded by Decode into a *SourceEnd.
func TestSourceEndType(t *testing.T) {
	if TypeSourceEnd != 28 || !TypeSourceEnd.Known() || TypeSourceEnd.String() != "source_end" ||
		TypeSourceEnd.Stream() != StreamSync || TypeSourceEnd.FromClient() {
		t.Fatalf("type %d %q known %v stream %d from client %v", TypeSourceEnd, TypeSourceEnd,
			TypeSourceEnd.Known(), TypeSourceEnd.Stream(), TypeSourceEnd.FromClient())
	}
	want := &SourceEnd{Source: "big", Last: 7002}
	b := mustFrame(t, want)
	f, err := Decode(TypeSourceEnd, b[HeaderLen:])
	if err != nil || !reflect.DeepEqual(f, want) {
		t.Fatalf("SourceEnd decodes to %#v, %v; want %#v", f, err, want)
	}
}

// TestProtoVersionIsDocumented: ProtoVersion is the last revision docs/PROTOCOL.md §9 lists.
func TestProtoVersionIsDocumented(t *testing.T) {
	data, err := os.ReadFile("../docs/PROTOCOL.md")
	if err != nil {
		t.Fatal(err)
	}
	_, versioning, ok := strings.Cut(string(data), "## 9. Versioning")
	if !ok {
		t.Fatal("PROTOCOL.md has no section 9. Versioning")
	}
	last := 1
	for _, m := range regexp.MustCompile(`Revision\s+(\d+)\s+adds`).FindAllStringSubmatch(versioning, -1) {
		n, _ := strconv.Atoi(m[1])
		last = max(last, n)
	}
	if ProtoVersion != last {
		t.Errorf("ProtoVersion is %d; PROTOCOL.md §9 describes revisions up to %d", ProtoVersion, last)
	}
}

// revision6Keys are the keys revision 6 added, by frame type (those of the records a frame holds
// included: an Entry's and a ConvInfo's "source", a SourceCursor's "conv").
var revision6Keys = map[Type][]string{
	TypeSyncStart:       {"sources", "conv"},
	TypeBatch:           {"source", "after"},
	TypeHeartbeat:       {"source"},
	TypeStale:           {"source"},
	TypeTooOld:          {"source"},
	TypeEpochChanged:    {"source"},
	TypeRebase:          {"source"},
	TypeCursorAck:       {"source"},
	TypeSourceEnd:       {"source", "last"},
	TypeConvStateResult: {"source"},
}

// TestRevision6Keys: the fixtures of the frame types revision 6 extended encode none of its keys,
// so their golden files keep the bytes of earlier revisions (new keys are omitted when zero);
// the fixture variants encode every one of them, so round trips, golden files and fuzz seeds
// cover them.
func TestRevision6Keys(t *testing.T) {
	for _, f := range fixtures() {
		if f.FrameType() == TypeSourceEnd {
			continue
		}
		got := bodyKeys(t, mustFrame(t, f)[HeaderLen:])
		for _, k := range revision6Keys[f.FrameType()] {
			if slices.Contains(got, k) {
				t.Errorf("%s fixture encodes the revision-6 key %q", f.FrameType(), k)
			}
		}
	}
	seen := map[Type][]string{}
	for _, f := range allFixtures() {
		seen[f.FrameType()] = append(seen[f.FrameType()], bodyKeys(t, mustFrame(t, f)[HeaderLen:])...)
	}
	for typ, keys := range revision6Keys {
		for _, k := range keys {
			if !slices.Contains(seen[typ], k) {
				t.Errorf("no fixture or variant of %s encodes the key %q", typ, k)
			}
		}
	}
}

// bodyKeys returns every map key in the msgpack value b, at any depth.
func bodyKeys(t *testing.T, b []byte) []string {
	t.Helper()
	var v any
	if err := msgpack.Unmarshal(b, &v); err != nil {
		t.Fatal(err)
	}
	var keys []string
	var walk func(any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			for k, x := range v {
				keys = append(keys, k)
				walk(x)
			}
		case []any:
			for _, x := range v {
				walk(x)
			}
		}
	}
	walk(v)
	return keys
}

// TestReceiptWithoutConvSeq: the user's own receipt in a large group (revision 6) has conv_seq 0.
// It is encoded without the key, decodes (in a Batch, through the hand-written entry decoder) to
// itself, and is digested with conv_seq 0 like an entry of any other kind.
func TestReceiptWithoutConvSeq(t *testing.T) {
	e := fixtureBigReceipt
	if e.Kind != KindReceipt || e.ConvSeq != 0 || e.UpTo == 0 {
		t.Fatalf("fixtureBigReceipt is %+v", e)
	}
	enc := encodeWith(t, &e)
	if slices.Contains(bodyKeys(t, enc), "conv_seq") {
		t.Errorf("a receipt without conv_seq encodes the key: %x", enc)
	}
	b := &Batch{Epoch: 9, Entries: []Entry{e}}
	f, err := Decode(TypeBatch, mustFrame(t, b)[HeaderLen:])
	if err != nil || !reflect.DeepEqual(f, b) {
		t.Fatalf("decoded %+v, %v; want %+v", f, err, b)
	}
	rec := AppendDigestRecord(nil, &e)
	got, _, ok := parseDigestRecord(rec)
	if !ok || got.convSeq != 0 || got.kind != KindReceipt || got.conv != e.Conv {
		t.Errorf("digest record %x reads back as %+v", rec, got)
	}
}

// TestEntrySource: Entry.Source goes through the hand-written entry encoder and decoder as the
// reflective ones take it: the key "source" with true when set, nothing when not; false and nil
// decode as not set.
func TestEntrySource(t *testing.T) {
	for _, e := range []Entry{fixtureFollow, fixtureUnfollow} {
		custom := encodeWith(t, &e)
		if plain := encodeWith(t, (*reflectEntry)(&e)); !bytes.Equal(custom, plain) {
			t.Fatalf("entry %+v encodes as %x, reflectively %x", e, custom, plain)
		}
		if !bytes.Contains(custom, []byte("\xa6source\xc3")) {
			t.Errorf("entry %+v: no source: true in %x", e, custom)
		}
		var got Entry
		if err := msgpack.Unmarshal(custom, &got); err != nil || !reflect.DeepEqual(got, e) {
			t.Errorf("entry %+v decodes to %+v, %v", e, got, err)
		}
	}
	if enc := encodeWith(t, &fixtureEntry); bytes.Contains(enc, []byte("source")) {
		t.Errorf("an entry without Source encodes the key: %x", enc)
	}
	for _, v := range []any{false, nil} {
		b, err := msgpack.Marshal(map[string]any{"seq": 1, "source": v})
		if err != nil {
			t.Fatal(err)
		}
		got := Entry{Source: true} // decoding sets it whatever it was
		if err := msgpack.Unmarshal(b, &got); err != nil || got.Source || got.Seq != 1 {
			t.Errorf("source: %v decodes to %+v, %v", v, got, err)
		}
	}
}

// TestConvInfoSource: ConvInfo.Source is the key "source", true for a large group, absent
// otherwise; a ConvListResult page still fits PageOverhead (TestPageOverhead sets it too).
func TestConvInfoSource(t *testing.T) {
	c := fixtureConv
	if enc := encodeWith(t, &c); bytes.Contains(enc, []byte("source")) {
		t.Errorf("a conversation that is no source encodes the key: %x", enc)
	}
	c.Source = true
	enc := encodeWith(t, &c)
	if !bytes.HasSuffix(enc, []byte("\xa6source\xc3")) || c.EncodedLen() != len(enc) {
		t.Errorf("a source conversation encodes as %x (EncodedLen %d)", enc, c.EncodedLen())
	}
	r := &ConvListResult{ID: 1, Convs: []ConvInfo{c, fixtureConv}}
	f, err := Decode(TypeConvListResult, mustFrame(t, r)[HeaderLen:])
	if err != nil || !reflect.DeepEqual(f, r) {
		t.Fatalf("decoded %+v, %v; want %+v", f, err, r)
	}
}

// TestSourceFrames: every sync-stream frame names its source in the key "source", and a Batch
// its After in "after"; each decodes back with them.
func TestSourceFrames(t *testing.T) {
	for _, f := range []Frame{
		&Batch{Epoch: 1, Entries: []Entry{{Seq: 8}}, Head: 9, Source: "big", After: 7},
		&Heartbeat{Epoch: 1, Head: 9, Source: "big"},
		&Stale{Epoch: 1, Head: 9, UnheardMs: 1, Source: "big"},
		&TooOld{Epoch: 1, First: 5, Head: 9, Source: "big"},
		&EpochChanged{Epoch: 2, First: 1, Head: 9, Source: "big"},
		&Rebase{Epoch: 1, Head: 9, Source: "big"},
		&CursorAck{Epoch: 1, Pos: 8, Source: "big"},
		&SourceEnd{Source: "big", Last: 9},
	} {
		body := mustFrame(t, f)[HeaderLen:]
		if !bytes.Contains(body, []byte("\xa6source\xa3big")) {
			t.Errorf("%s: no source key in %x", f.FrameType(), body)
		}
		if _, ok := f.(*Batch); ok && !bytes.Contains(body, []byte("\xa5after\x07")) {
			t.Errorf("batch: no after key in %x", body)
		}
		got, err := Decode(f.FrameType(), body)
		if err != nil || !reflect.DeepEqual(got, f) {
			t.Errorf("%s decodes to %+v, %v; want %+v", f.FrameType(), got, err, f)
		}
	}
}

// TestSourceBatchFollows: a source's batch carrying After is checked with Follows(After), its
// entries' Seq being conv_seqs.
func TestSourceBatchFollows(t *testing.T) {
	b := &Batch{Epoch: fixtureBigEpoch, Entries: []Entry{fixtureBigMessage}, Source: "big", After: 7000}
	if !b.Follows(b.After) || b.Follows(b.After+1) {
		t.Errorf("a source's batch from %d does not follow its After %d", b.Entries[0].Seq, b.After)
	}
}

// TestSyncStartSources: a SyncStart with sources round-trips with each cursor's keys, a zero
// cursor with its conv alone; a SyncStart without them has no "sources" key.
func TestSyncStartSources(t *testing.T) {
	s := &SyncStart{Epoch: 3, Pos: 9, Sources: []SourceCursor{{Conv: "big", Epoch: 5, Pos: 7000}, {Conv: "new"}}}
	body := mustFrame(t, s)[HeaderLen:]
	if !bytes.Contains(body, []byte("\xa7sources\x92\x83\xa4conv\xa3big")) || !bytes.Contains(body, []byte("\x81\xa4conv\xa3new")) {
		t.Errorf("sources encode as %x", body)
	}
	f, err := Decode(TypeSyncStart, body)
	if err != nil || !reflect.DeepEqual(f, s) {
		t.Fatalf("decoded %+v, %v; want %+v", f, err, s)
	}
	if err := f.(*SyncStart).Validate(); err != nil {
		t.Errorf("Validate: %v", err)
	}
}
