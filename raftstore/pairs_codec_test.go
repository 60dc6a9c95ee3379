package raftstore

import (
	"bytes"
	"encoding/binary"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// pairSamples are requests and responses of every kind, with every field set somewhere: entries
// with and without data, extensions and AppendedAt (the zero time, before 1970, nanoseconds).
func pairSamples() []any {
	hdr := raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte("n1"), Addr: []byte("127.0.0.1:18201")}
	return []any{
		&raft.AppendEntriesRequest{RPCHeader: hdr, Term: 9, PrevLogEntry: 100, PrevLogTerm: 8,
			LeaderCommitIndex: 99, Entries: []*raft.Log{
				{Index: 101, Term: 9, Type: raft.LogCommand, Data: []byte("hello"), Extensions: []byte{1, 2}, AppendedAt: time.Unix(1_700_000_000, 123_456_789).UTC()},
				{Index: 102, Term: 9, Type: raft.LogNoop},
				{Index: 103, Term: 9, Type: raft.LogConfiguration, Data: bytes.Repeat([]byte{0xff}, 300), AppendedAt: time.Unix(-5, 1).UTC()},
			}},
		heartbeatReq("n1", 4),
		&raft.AppendEntriesResponse{RPCHeader: hdr, Term: 9, LastLog: 103, Success: true, NoRetryBackoff: true},
		&raft.RequestVoteRequest{RPCHeader: hdr, Term: 10, LastLogIndex: 5, LastLogTerm: 4, LeadershipTransfer: true},
		&raft.RequestVoteResponse{RPCHeader: hdr, Term: 10, Peers: []byte("p"), Granted: true},
		&raft.RequestPreVoteRequest{RPCHeader: hdr, Term: 11, LastLogIndex: 6, LastLogTerm: 5},
		&raft.RequestPreVoteResponse{RPCHeader: hdr, Term: 11, Granted: true},
		&raft.TimeoutNowRequest{RPCHeader: hdr},
		&raft.TimeoutNowResponse{RPCHeader: hdr},
	}
}

// emptyLike returns a new zero value of msg's type, to decode into.
func emptyLike(msg any) any { return reflect.New(reflect.TypeOf(msg).Elem()).Interface() }

// Every message decodes to what was encoded, AppendedAt to the same instant, the zero time to the
// zero time.
func TestPairCodecRoundTrip(t *testing.T) {
	for _, msg := range pairSamples() {
		b := appendPairMessage(nil, msg)
		got := emptyLike(msg)
		if err := decodePairMessage(b, got); err != nil {
			t.Fatalf("%T: %v", msg, err)
		}
		if !reflect.DeepEqual(got, msg) {
			t.Errorf("%T: decoded %+v, want %+v", msg, got, msg)
		}
		if len(b) > 1 {
			if err := decodePairMessage(b[:len(b)-1], emptyLike(msg)); err == nil {
				t.Errorf("%T: a truncated message decoded", msg)
			}
			if err := decodePairMessage(append(b, 0), emptyLike(msg)); err == nil {
				t.Errorf("%T: a message with a trailing byte decoded", msg)
			}
		}
	}
	// A whole request frame: kind, id and shard around the message.
	frame, err := appendPairRequest(nil, 77, 12, pairSamples()[0])
	if err != nil {
		t.Fatal(err)
	}
	if n := binary.BigEndian.Uint32(frame); int(n) != len(frame)-4 {
		t.Fatalf("frame length %d, have %d bytes", n, len(frame)-4)
	}
	f, err := decodePairFrame(frame[4:], true)
	if err != nil || f.kind != pairAppend || f.id != 77 || f.shard != 12 {
		t.Fatalf("frame decoded to %+v, %v", f, err)
	}
}

// A request larger than the frame limit is refused by the encoder with a clear error (the shard
// transport then sends it on its NetworkTransport), leaving the buffer as it was; a frame header
// announcing more than the limit is refused by the reader before anything is allocated.
func TestPairFrameLimit(t *testing.T) {
	big := &raft.AppendEntriesRequest{Entries: []*raft.Log{{Index: 1, Data: make([]byte, maxPairFrame)}}}
	prefix := []byte("queued frames")
	b, err := appendPairRequest(prefix, 1, 1, big)
	if err == nil || !strings.Contains(err.Error(), "exceeds the node-pair frame limit") || string(b) != "queued frames" {
		t.Fatalf("oversized request: %q…, %v", b[:min(len(b), 20)], err)
	}
	hdr := binary.BigEndian.AppendUint32(nil, maxPairFrame+1)
	if _, err := readFrame(bytes.NewReader(hdr), maxPairFrame); err == nil || !strings.Contains(err.Error(), "exceeds the limit") {
		t.Fatalf("oversized frame read: %v", err)
	}
}

// FuzzPairCodec feeds arbitrary bytes to the node-pair decoders (a frame's header, then the
// message of every kind): nothing panics, and whatever decodes encodes back to a message that
// decodes to the same value.
func FuzzPairCodec(f *testing.F) {
	for _, msg := range pairSamples() {
		f.Add(append([]byte{pairKind(msg), 1, 3}, appendPairMessage(nil, msg)...))
	}
	f.Add([]byte{pairAppend, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0x0f})
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, request := range []bool{true, false} {
			fr, err := decodePairFrame(data, request)
			if err != nil {
				continue
			}
			for _, msg := range pairSamples() {
				got := emptyLike(msg)
				if decodePairMessage(fr.body, got) != nil {
					continue
				}
				again := emptyLike(msg)
				if err := decodePairMessage(appendPairMessage(nil, got), again); err != nil {
					t.Fatalf("%T re-encoded does not decode: %v", msg, err)
				}
				if !reflect.DeepEqual(got, again) {
					t.Fatalf("%T: %+v re-encoded decodes to %+v", msg, got, again)
				}
			}
		}
	})
}
