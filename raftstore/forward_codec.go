package raftstore

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/syncd-dev/syncd/log"
)

// Wire format of forwarded proposals (see forward.go). Each message is a frame:
//
//	length u32 big-endian | body
//
// Request body:  version u8 (1) | id uvarint | kind u8 | fields of the kind
//   kind 1, propose: shard uvarint | timeout_ms uvarint (0: none) |
//                    command (the Raft command encoding with proposer time 0, which the leader
//                    stamps; a nonzero time is refused, closing the connection; for the meta
//                    shard, a meta command)
//   kind 2, status:  nothing (the node answers its NodeStatus)
//   kind 3, call:    method string | payload (the rest): a request for the application's handler
//                    (App.Serve), such as a read of a shard this node hosts
// Response body: version u8 (1) | id uvarint | answer kind u8 | result, status or error fields
//
// A response with kind fwdOK carries the Result (for a DeliverBatchesCommand followed by each
// batch's outcome, see appendDeliveries; the other answers end before; fwdOKMove and fwdOKCheck
// add the field of a MoveCommand's and a ChecksumCommand's answer), fwdBody the bytes of a status (NodeStatus as
// JSON, an operator view free to grow) or of a call's answer; any other kind carries an error's fields, so that errors.Is and errors.As
// work on the forwarding node as if it had proposed locally.

const fwdVersion = 1

// maxForwardFrame bounds a frame: a command is at most a delivery batch of entries, and anything
// larger is refused rather than allocated.
const maxForwardFrame = 64 << 20

// Request kinds.
const (
	fwdPropose   uint8 = 1
	fwdStatusReq uint8 = 2
	fwdCall      uint8 = 3
)

// Answer kinds of a response.
const (
	fwdOK             uint8 = 0
	fwdRejected       uint8 = 1 // code u8 | message
	fwdOutOfOrder     uint8 = 2 // source | mark | prev
	fwdNotLeader      uint8 = 3 // leader id | leader addr
	fwdTimeout        uint8 = 4 // message
	fwdLeadershipLost uint8 = 5 // message
	fwdShutdown       uint8 = 6
	fwdNoShard        uint8 = 7
	fwdOther          uint8 = 8  // message
	fwdBody           uint8 = 9  // a status (NodeStatus as JSON) or a call's answer
	fwdMetaRefused    uint8 = 10 // message
	fwdLowDisk        uint8 = 11
	fwdOKMove         uint8 = 12 // fwdOK's fields, then Result.Move: a MoveCommand's answer
	fwdOKCheck        uint8 = 13 // fwdOK's fields, then Result.CheckIndex: a ChecksumCommand's answer
)

type fwdRequest struct {
	id        uint64
	kind      uint8
	shard     ShardID
	timeoutMS uint64
	command   []byte // fwdPropose: the command; fwdCall: the payload
	method    string // fwdCall
}

func (r *fwdRequest) encode() []byte {
	b := make([]byte, 4, 4+1+30+len(r.command))
	b = append(b, fwdVersion)
	b = binary.AppendUvarint(b, r.id)
	b = append(b, r.kind)
	switch r.kind {
	case fwdPropose:
		b = binary.AppendUvarint(b, uint64(r.shard))
		b = binary.AppendUvarint(b, r.timeoutMS)
		b = append(b, r.command...)
	case fwdCall:
		b = binary.AppendUvarint(b, r.timeoutMS)
		b = appendStr(b, r.method)
		b = append(b, r.command...)
	}
	binary.BigEndian.PutUint32(b, uint32(len(b)-4))
	return b
}

func decodeFwdRequest(body []byte) (fwdRequest, error) {
	d := fwdDecoder{b: body}
	if v := d.u8(); v != fwdVersion {
		return fwdRequest{}, fmt.Errorf("raftstore: forwarded request version %d", v)
	}
	r := fwdRequest{id: d.uvarint(), kind: d.u8()}
	switch {
	case d.err != nil:
	case r.kind == fwdStatusReq:
		if len(d.b) > 0 {
			d.err = errors.New("raftstore: forwarded status request: trailing bytes")
		}
	case r.kind == fwdCall:
		r.timeoutMS = d.uvarint()
		r.method = d.str()
		r.command = d.b
	case r.kind == fwdPropose:
		shard := d.uvarint()
		r.timeoutMS = d.uvarint()
		if d.err == nil && shard > 1<<32-1 {
			d.err = errors.New("raftstore: forwarded request: shard out of range")
		}
		r.shard, r.command = ShardID(shard), d.b
		if d.err == nil && r.shard != MetaShard {
			// Only the leader stamps a proposal's time: a forwarded command naming one is refused,
			// so that no caller can choose the time its entries get (nor be trusted to).
			if c, err := decodeCommand(r.command); err != nil {
				d.err = fmt.Errorf("raftstore: forwarded proposal: %w", err)
			} else if c.time != 0 {
				d.err = fmt.Errorf("raftstore: forwarded proposal carries proposer time %d; only the leader stamps proposals", c.time)
			}
		}
	default:
		d.err = fmt.Errorf("raftstore: forwarded request of unknown kind %d", r.kind)
	}
	return r, d.err
}

type fwdResponse struct {
	id   uint64
	res  Result
	body []byte // a status (NodeStatus as JSON) or a call's answer
	err  error
}

func (r *fwdResponse) encode() []byte {
	b := make([]byte, 4, 64)
	b = append(b, fwdVersion)
	b = binary.AppendUvarint(b, r.id)
	var (
		nl  *NotLeaderError
		ooo *log.OutOfOrderError
	)
	switch err := r.err; {
	case err == nil && r.body != nil:
		b = appendStr(append(b, fwdBody), string(r.body))
	case err == nil:
		// A kind of its own for the answers with a field of their own, so that every other
		// answer keeps the bytes it had (and a node that predates the field never sees it).
		kind := fwdOK
		switch {
		case r.res.Move != 0:
			kind = fwdOKMove
		case r.res.CheckIndex != 0:
			kind = fwdOKCheck
		}
		b = append(b, kind)
		a := r.res.Append
		b = binary.BigEndian.AppendUint32(b, uint32(a.MsgID.Shard))
		b = binary.AppendUvarint(b, a.MsgID.Index)
		b = binary.AppendUvarint(b, uint64(a.MsgID.Sub))
		b = binary.AppendUvarint(b, uint64(a.ConvSeq))
		b = binary.AppendVarint(b, a.Time)
		b = binary.AppendUvarint(b, uint64(a.Epoch))
		b = append(b, boolByte(a.Duplicate)|boolByte(a.NoOp)<<1)
		b = binary.AppendUvarint(b, r.res.Deliver.Mark)
		b = binary.AppendUvarint(b, uint64(r.res.Deliver.Appended))
		b = binary.AppendUvarint(b, r.res.First)
		switch kind {
		case fwdOKMove:
			b = binary.AppendUvarint(b, r.res.Move)
		case fwdOKCheck:
			b = binary.AppendUvarint(b, r.res.CheckIndex)
		}
		if len(r.res.Deliveries) > 0 {
			b = appendDeliveries(b, r.res.Deliveries)
		}
	case errors.As(err, &ooo):
		b = append(b, fwdOutOfOrder)
		b = binary.AppendUvarint(b, uint64(ooo.Source))
		b = binary.AppendUvarint(b, ooo.Mark)
		b = binary.AppendUvarint(b, ooo.Prev)
	case log.Rejected(err):
		code, _ := log.RejectionCode(err)
		b = appendStr(append(b, fwdRejected, code), err.Error())
	case errors.As(err, &nl):
		b = appendStr(appendStr(append(b, fwdNotLeader), nl.LeaderID), nl.LeaderAddr)
	case errors.Is(err, ErrMetaRefused):
		b = appendStr(append(b, fwdMetaRefused), err.Error())
	case errors.Is(err, ErrTimeout):
		b = appendStr(append(b, fwdTimeout), err.Error())
	case errors.Is(err, ErrLeadershipLost):
		b = appendStr(append(b, fwdLeadershipLost), err.Error())
	case errors.Is(err, ErrShutdown):
		b = append(b, fwdShutdown)
	case errors.Is(err, ErrNoShard):
		b = append(b, fwdNoShard)
	case errors.Is(err, ErrLowDisk):
		b = append(b, fwdLowDisk)
	default:
		b = appendStr(append(b, fwdOther), err.Error())
	}
	binary.BigEndian.PutUint32(b, uint32(len(b)-4))
	return b
}

// decodeFwdResponse decodes a response body. Errors of the response itself (the remote's
// refusal, say) are in the returned fwdResponse; the error return is for a malformed body.
func decodeFwdResponse(body []byte) (fwdResponse, error) {
	d := fwdDecoder{b: body}
	if v := d.u8(); v != fwdVersion {
		return fwdResponse{}, fmt.Errorf("raftstore: forwarded response version %d", v)
	}
	r := fwdResponse{id: d.uvarint()}
	switch kind := d.u8(); kind {
	case fwdOK, fwdOKMove, fwdOKCheck:
		a := &r.res.Append
		a.MsgID.Shard = log.ShardID(d.u32())
		a.MsgID.Index = d.uvarint()
		a.MsgID.Sub = uint32(d.uvarint())
		a.ConvSeq = log.Position(d.uvarint())
		a.Time = d.varint()
		a.Epoch = log.Epoch(d.uvarint())
		flags := d.u8()
		a.Duplicate, a.NoOp = flags&1 != 0, flags&2 != 0
		r.res.Deliver.Mark = d.uvarint()
		r.res.Deliver.Appended = int(d.uvarint())
		r.res.First = d.uvarint()
		switch kind {
		case fwdOKMove:
			r.res.Move = d.uvarint()
		case fwdOKCheck:
			r.res.CheckIndex = d.uvarint()
		}
		if len(d.b) > 0 {
			r.res.Deliveries = d.deliveries()
		}
	case fwdRejected:
		code, msg := d.u8(), d.str()
		if r.err = log.RejectionFromCode(code, msg); r.err == nil && d.err == nil {
			d.err = fmt.Errorf("raftstore: forwarded response: unknown refusal %d (%s)", code, msg)
		}
	case fwdOutOfOrder:
		r.err = &log.OutOfOrderError{Source: log.ShardID(d.uvarint()), Mark: d.uvarint(), Prev: d.uvarint()}
	case fwdNotLeader:
		r.err = &NotLeaderError{LeaderID: d.str(), LeaderAddr: d.str()} // Shard: set by the caller
	case fwdTimeout:
		r.err = fmt.Errorf("%w (at the leader): %s", ErrTimeout, d.str())
	case fwdLeadershipLost:
		r.err = fmt.Errorf("%w (at the leader): %s", ErrLeadershipLost, d.str())
	case fwdShutdown:
		r.err = fmt.Errorf("%w (the leader is shutting down)", ErrShutdown)
	case fwdNoShard:
		r.err = fmt.Errorf("%w (on the node asked)", ErrNoShard)
	case fwdOther:
		r.err = fmt.Errorf("raftstore: on the node asked: %s", d.str())
	case fwdBody:
		r.body = []byte(d.str())
	case fwdMetaRefused:
		r.err = fmt.Errorf("%w (at the meta leader): %s", ErrMetaRefused, d.str())
	case fwdLowDisk:
		r.err = fmt.Errorf("%w (at the leader)", ErrLowDisk)
	default:
		return fwdResponse{}, fmt.Errorf("raftstore: forwarded response: unknown kind %d", kind)
	}
	if d.err == nil && len(d.b) > 0 {
		d.err = errors.New("raftstore: forwarded response: trailing bytes")
	}
	return r, d.err
}

// Outcome kinds of one batch of a DeliverBatchesCommand.
const (
	fwdBatchOK         uint8 = 0 // mark | appended
	fwdBatchRejected   uint8 = 1 // code u8 | message
	fwdBatchOutOfOrder uint8 = 2 // source | mark | prev
)

// appendDeliveries encodes the outcomes of a DeliverBatchesCommand, which follow the fixed fields
// of an OK answer (and only an answer to that command has them, so the others keep their bytes):
//
//	count uvarint | per batch: kind u8 | its fields
//
// A batch's error is a refusal of the state machine, the only kind it can have.
func appendDeliveries(b []byte, outs []DeliveryOutcome) []byte {
	b = binary.AppendUvarint(b, uint64(len(outs)))
	for _, o := range outs {
		var ooo *log.OutOfOrderError
		switch {
		case o.Err == nil:
			b = append(b, fwdBatchOK)
			b = binary.AppendUvarint(b, o.Result.Mark)
			b = binary.AppendUvarint(b, uint64(o.Result.Appended))
		case errors.As(o.Err, &ooo):
			b = append(b, fwdBatchOutOfOrder)
			b = binary.AppendUvarint(b, uint64(ooo.Source))
			b = binary.AppendUvarint(b, ooo.Mark)
			b = binary.AppendUvarint(b, ooo.Prev)
		default:
			code, _ := log.RejectionCode(o.Err)
			b = appendStr(append(b, fwdBatchRejected, code), o.Err.Error())
		}
	}
	return b
}

// deliveries decodes what appendDeliveries encoded.
func (d *fwdDecoder) deliveries() []DeliveryOutcome {
	n := d.uvarint()
	if n == 0 || n > uint64(len(d.b)) { // each outcome takes a byte at least
		d.fail()
		return nil
	}
	outs := make([]DeliveryOutcome, n)
	for i := range outs {
		switch kind := d.u8(); kind {
		case fwdBatchOK:
			outs[i].Result.Mark = d.uvarint()
			outs[i].Result.Appended = int(d.uvarint())
		case fwdBatchOutOfOrder:
			outs[i].Err = &log.OutOfOrderError{Source: log.ShardID(d.uvarint()), Mark: d.uvarint(), Prev: d.uvarint()}
		case fwdBatchRejected:
			code, msg := d.u8(), d.str()
			if outs[i].Err = log.RejectionFromCode(code, msg); outs[i].Err == nil && d.err == nil {
				d.err = fmt.Errorf("raftstore: forwarded response: unknown refusal %d (%s)", code, msg)
			}
		default:
			d.fail()
		}
		if d.err != nil {
			return nil
		}
	}
	return outs
}

func boolByte(v bool) byte {
	if v {
		return 1
	}
	return 0
}

func appendStr(b []byte, s string) []byte {
	return append(binary.AppendUvarint(b, uint64(len(s))), s...)
}

// fwdDecoder reads the fields of a forwarded message; the first error sticks and later reads
// return zero values.
type fwdDecoder struct {
	b   []byte
	err error
}

func (d *fwdDecoder) fail() {
	if d.err == nil {
		d.err = errors.New("raftstore: forwarded message truncated or malformed")
	}
	d.b = nil
}

func (d *fwdDecoder) u8() uint8 {
	if len(d.b) < 1 {
		d.fail()
		return 0
	}
	v := d.b[0]
	d.b = d.b[1:]
	return v
}

func (d *fwdDecoder) u32() uint32 {
	if len(d.b) < 4 {
		d.fail()
		return 0
	}
	v := binary.BigEndian.Uint32(d.b)
	d.b = d.b[4:]
	return v
}

func (d *fwdDecoder) uvarint() uint64 {
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.fail()
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *fwdDecoder) varint() int64 {
	v, n := binary.Varint(d.b)
	if n <= 0 {
		d.fail()
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *fwdDecoder) str() string {
	n := d.uvarint()
	if n > uint64(len(d.b)) {
		d.fail()
		return ""
	}
	s := string(d.b[:n])
	d.b = d.b[n:]
	return s
}
