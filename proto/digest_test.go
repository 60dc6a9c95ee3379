package proto

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// digestVectorsPath holds the digest test vectors of docs/PROTOCOL.md §6 "Digest": entries given
// by their fields, each entry's record and each case's digest, in hex. Other implementations
// (client/js) test against the same file. TestDigestVectors rewrites it with -update; review
// the diff: a changed digest is a changed wire contract.
var digestVectorsPath = filepath.Join("testdata", "digest_vectors.json")

type digestVectors struct {
	About string         `json:"about"`
	Cases []digestVector `json:"cases"`
}

type digestVector struct {
	Name    string              `json:"name"`
	Entries []digestVectorEntry `json:"entries"`
	Records []string            `json:"records"` // hex of AppendDigestRecord, one per entry
	Count   int                 `json:"count"`
	Digest  string              `json:"digest"` // hex
}

type digestVectorEntry struct {
	Seq     uint64 `json:"seq"`
	Kind    uint8  `json:"kind"`
	MsgID   string `json:"msg_id,omitempty"`
	Conv    string `json:"conv,omitempty"`
	ConvSeq uint64 `json:"conv_seq,omitempty"`
	BodyHex string `json:"body_hex,omitempty"`
}

func (v digestVectorEntry) entry(t *testing.T) Entry {
	t.Helper()
	body, err := hex.DecodeString(v.BodyHex)
	if err != nil {
		t.Fatal(err)
	}
	return Entry{Seq: Position(v.Seq), Kind: Kind(v.Kind), MsgID: MsgID(v.MsgID), Conv: v.Conv, ConvSeq: Position(v.ConvSeq), Body: body}
}

func readDigestVectors(t *testing.T) digestVectors {
	t.Helper()
	data, err := os.ReadFile(digestVectorsPath)
	if err != nil {
		t.Fatal(err)
	}
	var vs digestVectors
	if err := json.Unmarshal(data, &vs); err != nil {
		t.Fatalf("%s: %v", digestVectorsPath, err)
	}
	if len(vs.Cases) < 4 {
		t.Fatalf("%s holds %d cases", digestVectorsPath, len(vs.Cases))
	}
	return vs
}

// TestDigestVectors: the digest of each vector's entries, and each entry's record, are the ones
// in the golden file (computed independently when the file was made, with Python's hashlib):
// the test fails if the computation drifts.
func TestDigestVectors(t *testing.T) {
	vs := readDigestVectors(t)
	for i, c := range vs.Cases {
		var d Digester
		records := []string{}
		entries := make([]Entry, len(c.Entries))
		for j, ve := range c.Entries {
			entries[j] = ve.entry(t)
			records = append(records, hex.EncodeToString(AppendDigestRecord(nil, &entries[j])))
			d.Add(&entries[j])
		}
		got := hex.EncodeToString(d.Sum())
		if *update {
			vs.Cases[i].Records, vs.Cases[i].Count, vs.Cases[i].Digest = records, len(entries), got
			continue
		}
		if strings.Join(records, " ") != strings.Join(c.Records, " ") {
			t.Errorf("%s: records\n%v\nwant\n%v", c.Name, records, c.Records)
		}
		if got != c.Digest || d.Count() != uint64(c.Count) {
			t.Errorf("%s: digest %s of %d entries, want %s of %d", c.Name, got, d.Count(), c.Digest, c.Count)
		}
		if again := hex.EncodeToString(DigestOf(entries)); again != got {
			t.Errorf("%s: DigestOf %s, the Digester %s", c.Name, again, got)
		}
	}
	if *update {
		data, err := json.MarshalIndent(vs, "", "  ")
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(digestVectorsPath, append(data, '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// TestProtocolDocHasDigestVectors keeps the test vectors printed in docs/PROTOCOL.md the ones of
// the golden file.
func TestProtocolDocHasDigestVectors(t *testing.T) {
	data, err := os.ReadFile("../docs/PROTOCOL.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range readDigestVectors(t).Cases {
		if !bytes.Contains(data, []byte(c.Digest)) {
			t.Errorf("PROTOCOL.md lacks the digest %s of the vector %q", c.Digest, c.Name)
		}
	}
}

// TestDigestCoversItsFields: changing any field the record covers changes the digest, and
// changing any other (sender, time, up_to, target, members, role, member_count) does not, so a
// Batch's copy of an entry and a HistoryResult's digest alike.
func TestDigestCoversItsFields(t *testing.T) {
	base := fixtureEntry
	want := DigestOf([]Entry{base})
	covered := map[string]func(e *Entry){
		"seq":      func(e *Entry) { e.Seq++ },
		"kind":     func(e *Entry) { e.Kind = KindReceipt },
		"msg_id":   func(e *Entry) { e.MsgID = "3.99.2" },
		"conv":     func(e *Entry) { e.Conv = "g2" },
		"conv_seq": func(e *Entry) { e.ConvSeq++ },
		"body":     func(e *Entry) { e.Body = []byte{0, 1, 0xfe} },
		"no body":  func(e *Entry) { e.Body = nil },
		// Lengths are prefixed: moving a byte from one id to the next is a different record.
		"id boundary": func(e *Entry) { e.MsgID, e.Conv = e.MsgID+"g", e.Conv[1:] },
	}
	for name, change := range covered {
		e := base
		change(&e)
		if bytes.Equal(DigestOf([]Entry{e}), want) {
			t.Errorf("changing %s leaves the digest as it was", name)
		}
	}
	other := base
	other.Sender, other.Time, other.UpTo, other.Target = "zed", 7, 99, "1.1.1"
	other.Members, other.Role, other.MemberCount = nil, RoleOwner, 40
	if !bytes.Equal(DigestOf([]Entry{other}), want) {
		t.Error("a field the record does not cover changes the digest")
	}
	if bytes.Equal(DigestOf([]Entry{base, base}), DigestOf([]Entry{base})) {
		t.Error("a repeated entry leaves the digest as it was")
	}
}

// TestDigesterState: the zero Digester is the digest of nothing; Sum does not end the digest;
// Reset starts over.
func TestDigesterState(t *testing.T) {
	var d Digester
	empty := d.Sum()
	if hex.EncodeToString(empty) != "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855" || d.Count() != 0 {
		t.Fatalf("zero digester: %x, %d", empty, d.Count())
	}
	one, two := fixtureEntry, fixtureRoleChange
	d.Add(&one)
	first := d.Sum()
	d.Add(&two)
	if !bytes.Equal(d.Sum(), DigestOf([]Entry{one, two})) || !bytes.Equal(first, DigestOf([]Entry{one})) || d.Count() != 2 {
		t.Fatal("Sum in the middle changed the digest")
	}
	d.Reset()
	if !bytes.Equal(d.Sum(), empty) || d.Count() != 0 {
		t.Fatal("Reset did not start over")
	}
	if len(first) != DigestLen {
		t.Fatalf("a digest of %d bytes", len(first))
	}
}

func TestReportKindNames(t *testing.T) {
	if ReportGap.String() != "gap" || ReportMismatch.String() != "mismatch" || ReportKind(3).String() != "report_kind(3)" {
		t.Error("report kinds misdescribed")
	}
	if !ReportGap.Valid() || !ReportMismatch.Valid() || ReportKind(0).Valid() || ReportKind(3).Valid() {
		t.Error("report kinds' validity")
	}
}

// TestDigestFoldedLikeOriginal: a folded entry digests like the entry it was before the fold,
// so a device that stored either agrees with the server (PROTOCOL §5, "Folded entries").
func TestDigestFoldedLikeOriginal(t *testing.T) {
	edit := Entry{Seq: 50, Kind: KindEdit, MsgID: "3.130.0", Conv: "g1", ConvSeq: 20, Sender: "alice", Time: 7, Target: "3.99.0", Body: []byte("hello, edited")}
	stub := Entry{Seq: 50, Kind: KindEdit, MsgID: "3.130.0", Conv: "g1", ConvSeq: 20, Sender: "alice", Time: 7, Target: "3.99.0", Folded: 53, BodyHash: fixtureHash("hello, edited")}
	receipt := Entry{Seq: 51, Kind: KindReceipt, MsgID: "3.120.0", Conv: "g1", ConvSeq: 13, Sender: "carol", UpTo: 12}
	folded := Entry{Seq: 51, Kind: KindReceipt, MsgID: "3.120.0", Conv: "g1", ConvSeq: 13, Sender: "carol", Folded: 54}
	for _, pair := range [][2]Entry{{edit, stub}, {receipt, folded}} {
		if a, b := AppendDigestRecord(nil, &pair[0]), AppendDigestRecord(nil, &pair[1]); !bytes.Equal(a, b) {
			t.Errorf("kind %v: the folded record differs:\n%x\n%x", pair[0].Kind, a, b)
		}
	}
	// A stub whose hash does not match is a different record.
	bad := stub
	bad.BodyHash = fixtureHash("something else")
	if bytes.Equal(AppendDigestRecord(nil, &edit), AppendDigestRecord(nil, &bad)) {
		t.Error("a folded entry with another body_hash digests like the original")
	}
}
