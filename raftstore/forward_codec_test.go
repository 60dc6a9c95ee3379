package raftstore

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/syncd-dev/syncd/log"
)

// fwdResponses covers every kind of forwarded answer.
func fwdResponses() []fwdResponse {
	return []fwdResponse{
		{id: 1, res: Result{Append: log.AppendResult{MsgID: log.MsgID{Shard: 3, Index: 99, Sub: 1}, ConvSeq: 7,
			Time: 1_700_000_000_000_000_000, Epoch: 5, Duplicate: true, NoOp: true}, Deliver: log.DeliverResult{Mark: 9, Appended: 4}, First: 2}},
		{id: 2, err: log.RejectionFromCode(2, "log: client_msg_id reused with a different payload")},
		{id: 3, err: &log.OutOfOrderError{Source: 4, Mark: 10, Prev: 12}},
		{id: 4, err: &NotLeaderError{LeaderID: "n2", LeaderAddr: "127.0.0.1:7402"}},
		{id: 5, err: ErrTimeout},
		{id: 6, err: ErrLeadershipLost},
		{id: 7, err: ErrShutdown},
		{id: 8, err: ErrNoShard},
		{id: 9, err: errors.New("disk on fire")},
		{id: 10, err: fmt.Errorf("%w: no node \"n9\"", ErrMetaRefused)},
		{id: 11, err: ErrLowDisk},
		{id: 12, res: Result{First: 3, Deliveries: []DeliveryOutcome{
			{Result: log.DeliverResult{Mark: 40, Appended: 7}},
			{Err: &log.OutOfOrderError{Source: 5, Mark: 2, Prev: 9}},
			{Err: log.RejectionFromCode(1, "log: delivery item at 3: users must be valid, sorted and unique")},
		}}},
		{id: 13, res: Result{Move: 1 << 40}},       // a MoveCommand's answer (fwdOKMove)
		{id: 14, res: Result{CheckIndex: 1 << 33}}, // a ChecksumCommand's answer (fwdOKCheck)
	}
}

// TestForwardCodec: every answer kind survives the wire with its sentinel and fields.
func TestForwardCodec(t *testing.T) {
	for _, want := range fwdResponses() {
		frame := want.encode()
		got, err := decodeFwdResponse(frame[4:])
		if err != nil {
			t.Fatalf("response %d: %v", want.id, err)
		}
		if got.id != want.id || !reflect.DeepEqual(got.res, want.res) {
			t.Fatalf("response %d: got %+v", want.id, got)
		}
		switch {
		case want.err == nil:
			if got.err != nil {
				t.Fatalf("response %d: error %v", want.id, got.err)
			}
		case log.Rejected(want.err):
			if !log.Rejected(got.err) || got.err.Error() != want.err.Error() {
				t.Fatalf("response %d: refusal came back as %v", want.id, got.err)
			}
			var ooo *log.OutOfOrderError
			if errors.As(want.err, &ooo) && !reflect.DeepEqual(got.err, want.err) {
				t.Fatalf("response %d: %#v, want %#v", want.id, got.err, want.err)
			}
		default:
			for _, s := range []error{ErrNotLeader, ErrTimeout, ErrLeadershipLost, ErrShutdown, ErrNoShard, ErrMetaRefused, ErrLowDisk} {
				if errors.Is(want.err, s) != errors.Is(got.err, s) {
					t.Fatalf("response %d: %v came back as %v", want.id, want.err, got.err)
				}
			}
		}
	}
	for _, req := range []fwdRequest{
		{id: 77, kind: fwdPropose, shard: 1<<32 - 1, timeoutMS: 1500, command: []byte{1, 2, 0, 3}},
		{id: 80, kind: fwdPropose, shard: MetaShard, command: []byte(`{"v":1,"op":"join"}`)},
		{id: 78, kind: fwdStatusReq},
		{id: 79, kind: fwdCall, timeoutMS: 20, method: "read", command: []byte(`{"op":"x"}`)},
	} {
		got, err := decodeFwdRequest(req.encode()[4:])
		if err != nil || !reflect.DeepEqual(got, req) {
			t.Fatalf("request: %+v %v", got, err)
		}
	}
	status := fwdResponse{id: 10, body: []byte(`{"id":"n1"}`)}
	if got, err := decodeFwdResponse(status.encode()[4:]); err != nil || string(got.body) != `{"id":"n1"}` || got.err != nil {
		t.Fatalf("status response: %+v %v", got, err)
	}
}

// TestForwardedProposalTimeRefused: a forwarded proposal names no proposer time (the leader
// stamps it); one that does is refused by the decoder, whatever the time, so a caller cannot
// choose the time its entries get. Forwarding itself strips a time set on the Command.
func TestForwardedProposalTimeRefused(t *testing.T) {
	cmd := AppendCommand(&log.Append{Conv: "d:alice:bob", Sender: "alice", ClientMsgID: "m1", Body: []byte("hi"),
		Members: []string{"alice", "bob"}})
	for _, stamp := range []int64{1, -1, 1_700_000_000_000_000_000} {
		cmd.Time = stamp
		data, err := cmd.encode()
		if err != nil {
			t.Fatal(err)
		}
		req := fwdRequest{id: 1, kind: fwdPropose, shard: 3, command: data}
		if _, err := decodeFwdRequest(req.encode()[4:]); err == nil || !strings.Contains(err.Error(), "only the leader stamps") {
			t.Fatalf("time %d: decoded with %v, want a refusal", stamp, err)
		}
		data, err = forwardable(cmd)
		if err != nil {
			t.Fatal(err)
		}
		req.command = data
		got, err := decodeFwdRequest(req.encode()[4:])
		if err != nil {
			t.Fatalf("time %d, forwardable: %v", stamp, err)
		}
		if c, err := decodeCommand(got.command); err != nil || c.time != 0 {
			t.Fatalf("time %d, forwardable: command time %d (%v), want 0", stamp, c.time, err)
		}
	}
}

// FuzzForwardFrames feeds arbitrary bytes to both decoders: they must fail cleanly, never panic,
// and what they accept must re-encode to a frame that decodes the same.
func FuzzForwardFrames(f *testing.F) {
	for _, r := range fwdResponses() {
		f.Add(r.encode()[4:])
	}
	f.Add((&fwdRequest{id: 1, kind: fwdPropose, shard: 2, command: []byte{1, 1, 0}}).encode()[4:])
	f.Add((&fwdRequest{id: 2, kind: fwdStatusReq}).encode()[4:])
	f.Add((&fwdRequest{id: 4, kind: fwdCall, method: "m", command: []byte("x")}).encode()[4:])
	f.Add((&fwdResponse{id: 3, body: []byte("{}")}).encode()[4:])
	f.Add([]byte{})
	for _, b := range goldenSeeds(f, "fwd_", true) { // every request and answer kind
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if req, err := decodeFwdRequest(data); err == nil {
			again, err := decodeFwdRequest(req.encode()[4:])
			if err != nil || !reflect.DeepEqual(again, req) {
				t.Fatalf("request re-encoding: %+v %v", again, err)
			}
		}
		if resp, err := decodeFwdResponse(data); err == nil {
			again, err := decodeFwdResponse(resp.encode()[4:])
			if err != nil || again.id != resp.id || !reflect.DeepEqual(again.res, resp.res) ||
				(again.err == nil) != (resp.err == nil) || string(again.body) != string(resp.body) {
				t.Fatalf("response re-encoding: %+v %v", again, err)
			}
		}
	})
}
