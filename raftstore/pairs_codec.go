package raftstore

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/hashicorp/raft"
)

// Wire format of a node-pair connection (see pairs.go). After the mux header ("SYP1", shard
// field 0) each direction is a stream of frames, in the forwarder's framing (readFrame):
//
//	length u32 big-endian | kind u8 | id uvarint | body
//
// A request (dialler → acceptor) names its shard first; a response (acceptor → dialler) answers
// the request of the same id with the same kind, or with kind pairError and a message:
//
//	request:  kind | id | shard uvarint | the RPC's fields
//	response: kind | id | the response's fields          (pairError: message string)
//
// Fields: integers are uvarints (ProtocolVersion a varint), byte strings a uvarint length and the
// bytes (empty decodes as nil), booleans a byte 0 or 1. Every RPC starts with its RPCHeader
// (protocol version, ID, Addr). The deprecated copies of Addr (AppendEntriesRequest.Leader,
// RequestVoteRequest.Candidate) are not sent: raft reads them only from a sender that has no
// RPCHeader.Addr, and every node on this connection has one. AppendEntries carries its entries as a count and, per entry,
// Index, Term, Type u8, Data, Extensions, AppendedAt (Unix seconds varint, nanoseconds uvarint).
// Nothing is optional and nothing may trail: a message of the wrong length is malformed, and a
// malformed frame closes the connection.

// pairMagic is the mux header magic of a node-pair connection (the shard field is unused, 0).
const pairMagic = "SYP1"

// maxPairFrame bounds a frame. A larger AppendEntries (256 entries of large commands) is sent on
// the shard's own NetworkTransport instead (shardTransport.AppendEntries), so that the limit
// refuses only what no node sends.
const maxPairFrame = 64 << 20

// Frame kinds.
const (
	pairAppend     uint8 = 1
	pairVote       uint8 = 2
	pairPreVote    uint8 = 3
	pairTimeoutNow uint8 = 4
	pairError      uint8 = 255 // a response only: the request failed, message string
)

// errPairFrameTooLarge is returned for a request that does not fit in a frame.
var errPairFrameTooLarge = errors.New("raftstore: request exceeds the node-pair frame limit")

// beginPairFrame appends a frame's length placeholder, kind and id to b; finishPairFrame fills
// in the length.
func beginPairFrame(b []byte, kind uint8, id uint64) []byte {
	b = append(b, 0, 0, 0, 0, kind)
	return binary.AppendUvarint(b, id)
}

// finishPairFrame sets the length of the frame that starts at b[start:], or cuts it off again
// and reports errPairFrameTooLarge.
func finishPairFrame(b []byte, start int) ([]byte, error) {
	n := len(b) - start - 4
	if n > maxPairFrame {
		return b[:start], fmt.Errorf("%w (%d bytes, limit %d)", errPairFrameTooLarge, n, maxPairFrame)
	}
	binary.BigEndian.PutUint32(b[start:], uint32(n))
	return b, nil
}

// appendPairRequest appends the frame of request id for shard: cmd is one of the RPCs' request
// types.
func appendPairRequest(b []byte, id uint64, shard ShardID, cmd any) ([]byte, error) {
	start := len(b)
	var kind uint8
	switch cmd.(type) {
	case *raft.AppendEntriesRequest:
		kind = pairAppend
	case *raft.RequestVoteRequest:
		kind = pairVote
	case *raft.RequestPreVoteRequest:
		kind = pairPreVote
	case *raft.TimeoutNowRequest:
		kind = pairTimeoutNow
	default:
		return b, fmt.Errorf("raftstore: no node-pair encoding for %T", cmd)
	}
	b = beginPairFrame(b, kind, id)
	b = binary.AppendUvarint(b, uint64(shard))
	b = appendPairMessage(b, cmd)
	return finishPairFrame(b, start)
}

// appendPairResponse appends the frame answering request id of kind with resp (one of the RPCs'
// response types), or with err if it is not nil.
func appendPairResponse(b []byte, id uint64, kind uint8, resp any, err error) []byte {
	start := len(b)
	if err != nil {
		b = beginPairFrame(b, pairError, id)
		b = appendStr(b, err.Error())
	} else {
		b = beginPairFrame(b, kind, id)
		b = appendPairMessage(b, resp)
	}
	b, _ = finishPairFrame(b, start) // a response is a few fields: never near the limit
	return b
}

// appendPairMessage appends the fields of an RPC's request or response.
func appendPairMessage(b []byte, msg any) []byte {
	switch m := msg.(type) {
	case *raft.AppendEntriesRequest:
		b = appendRPCHeader(b, &m.RPCHeader)
		b = binary.AppendUvarint(b, m.Term)
		b = binary.AppendUvarint(b, m.PrevLogEntry)
		b = binary.AppendUvarint(b, m.PrevLogTerm)
		b = binary.AppendUvarint(b, m.LeaderCommitIndex)
		b = binary.AppendUvarint(b, uint64(len(m.Entries)))
		for _, e := range m.Entries {
			b = binary.AppendUvarint(b, e.Index)
			b = binary.AppendUvarint(b, e.Term)
			b = append(b, byte(e.Type))
			b = appendBytes(b, e.Data)
			b = appendBytes(b, e.Extensions)
			b = binary.AppendVarint(b, e.AppendedAt.Unix())
			b = binary.AppendUvarint(b, uint64(e.AppendedAt.Nanosecond()))
		}
	case *raft.AppendEntriesResponse:
		b = appendRPCHeader(b, &m.RPCHeader)
		b = binary.AppendUvarint(b, m.Term)
		b = binary.AppendUvarint(b, m.LastLog)
		b = append(b, boolByte(m.Success), boolByte(m.NoRetryBackoff))
	case *raft.RequestVoteRequest:
		b = appendRPCHeader(b, &m.RPCHeader)
		b = binary.AppendUvarint(b, m.Term)
		b = binary.AppendUvarint(b, m.LastLogIndex)
		b = binary.AppendUvarint(b, m.LastLogTerm)
		b = append(b, boolByte(m.LeadershipTransfer))
	case *raft.RequestVoteResponse:
		b = appendRPCHeader(b, &m.RPCHeader)
		b = binary.AppendUvarint(b, m.Term)
		b = appendBytes(b, m.Peers)
		b = append(b, boolByte(m.Granted))
	case *raft.RequestPreVoteRequest:
		b = appendRPCHeader(b, &m.RPCHeader)
		b = binary.AppendUvarint(b, m.Term)
		b = binary.AppendUvarint(b, m.LastLogIndex)
		b = binary.AppendUvarint(b, m.LastLogTerm)
	case *raft.RequestPreVoteResponse:
		b = appendRPCHeader(b, &m.RPCHeader)
		b = binary.AppendUvarint(b, m.Term)
		b = append(b, boolByte(m.Granted))
	case *raft.TimeoutNowRequest:
		b = appendRPCHeader(b, &m.RPCHeader)
	case *raft.TimeoutNowResponse:
		b = appendRPCHeader(b, &m.RPCHeader)
	}
	return b
}

func appendRPCHeader(b []byte, h *raft.RPCHeader) []byte {
	b = binary.AppendVarint(b, int64(h.ProtocolVersion))
	b = appendBytes(b, h.ID)
	return appendBytes(b, h.Addr)
}

// pairFrame is a decoded frame: its kind, id and, for a request, shard; body is the rest.
type pairFrame struct {
	kind  uint8
	id    uint64
	shard ShardID
	body  []byte
}

// decodePairFrame splits a frame (as readFrame returns it, without the length) into its fields;
// request says whether it is a request (which names a shard).
func decodePairFrame(frame []byte, request bool) (pairFrame, error) {
	d := wireDecoder{b: frame}
	f := pairFrame{kind: d.u8(), id: d.uvarint()}
	if request {
		shard := d.uvarint()
		if d.err == nil && shard > 1<<32-1 {
			return f, errors.New("raftstore: node-pair request: shard out of range")
		}
		f.shard = ShardID(shard)
	}
	f.body = d.b
	return f, d.err
}

// newPairRequest returns an empty request of kind, to decode into.
func newPairRequest(kind uint8) (any, error) {
	switch kind {
	case pairAppend:
		return &raft.AppendEntriesRequest{}, nil
	case pairVote:
		return &raft.RequestVoteRequest{}, nil
	case pairPreVote:
		return &raft.RequestPreVoteRequest{}, nil
	case pairTimeoutNow:
		return &raft.TimeoutNowRequest{}, nil
	}
	return nil, fmt.Errorf("raftstore: node-pair request of unknown kind %d", kind)
}

// pairKind returns the frame kind of an RPC's request or response.
func pairKind(msg any) uint8 {
	switch msg.(type) {
	case *raft.AppendEntriesRequest, *raft.AppendEntriesResponse:
		return pairAppend
	case *raft.RequestVoteRequest, *raft.RequestVoteResponse:
		return pairVote
	case *raft.RequestPreVoteRequest, *raft.RequestPreVoteResponse:
		return pairPreVote
	case *raft.TimeoutNowRequest, *raft.TimeoutNowResponse:
		return pairTimeoutNow
	}
	return 0
}

// decodePairMessage decodes body into msg, one of the RPCs' request or response types. Byte
// fields (entries' Data included) are slices of body, which must not be reused.
func decodePairMessage(body []byte, msg any) error {
	d := wireDecoder{b: body}
	switch m := msg.(type) {
	case *raft.AppendEntriesRequest:
		d.rpcHeader(&m.RPCHeader)
		m.Term = d.uvarint()
		m.PrevLogEntry = d.uvarint()
		m.PrevLogTerm = d.uvarint()
		m.LeaderCommitIndex = d.uvarint()
		n := d.uvarint()
		// An entry takes 7 bytes at least: a count beyond that is malformed, not an allocation.
		if n > uint64(len(d.b))/7 {
			d.fail()
			break
		}
		if n > 0 {
			logs := make([]raft.Log, n)
			m.Entries = make([]*raft.Log, n)
			for i := range logs {
				e := &logs[i]
				e.Index = d.uvarint()
				e.Term = d.uvarint()
				e.Type = raft.LogType(d.u8())
				e.Data = d.bytes()
				e.Extensions = d.bytes()
				sec, nsec := d.varint(), d.uvarint()
				if nsec >= uint64(time.Second) {
					d.fail()
				}
				if d.err != nil {
					break
				}
				if sec != zeroUnix || nsec != 0 {
					e.AppendedAt = time.Unix(sec, int64(nsec)).UTC()
				}
				m.Entries[i] = e
			}
		}
	case *raft.AppendEntriesResponse:
		d.rpcHeader(&m.RPCHeader)
		m.Term = d.uvarint()
		m.LastLog = d.uvarint()
		m.Success = d.boolean()
		m.NoRetryBackoff = d.boolean()
	case *raft.RequestVoteRequest:
		d.rpcHeader(&m.RPCHeader)
		m.Term = d.uvarint()
		m.LastLogIndex = d.uvarint()
		m.LastLogTerm = d.uvarint()
		m.LeadershipTransfer = d.boolean()
	case *raft.RequestVoteResponse:
		d.rpcHeader(&m.RPCHeader)
		m.Term = d.uvarint()
		m.Peers = d.bytes()
		m.Granted = d.boolean()
	case *raft.RequestPreVoteRequest:
		d.rpcHeader(&m.RPCHeader)
		m.Term = d.uvarint()
		m.LastLogIndex = d.uvarint()
		m.LastLogTerm = d.uvarint()
	case *raft.RequestPreVoteResponse:
		d.rpcHeader(&m.RPCHeader)
		m.Term = d.uvarint()
		m.Granted = d.boolean()
	case *raft.TimeoutNowRequest:
		d.rpcHeader(&m.RPCHeader)
	case *raft.TimeoutNowResponse:
		d.rpcHeader(&m.RPCHeader)
	default:
		return fmt.Errorf("raftstore: no node-pair decoding for %T", msg)
	}
	if d.err == nil && len(d.b) > 0 {
		d.err = errors.New("raftstore: node-pair message: trailing bytes")
	}
	return d.err
}

// zeroUnix is the Unix time of the zero time.Time, which AppendedAt has when unset.
var zeroUnix = time.Time{}.Unix()

func (d *wireDecoder) rpcHeader(h *raft.RPCHeader) {
	h.ProtocolVersion = raft.ProtocolVersion(d.varint())
	h.ID = d.bytes()
	h.Addr = d.bytes()
}
