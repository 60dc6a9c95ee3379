package syncd

import (
	"strconv"

	"github.com/syncd-dev/syncd/log"
	"github.com/syncd-dev/syncd/proto"
)

// syncd translates between the stored types (log) and the wire types (proto); neither package
// knows the other.

func wireEntry(e *log.Entry) proto.Entry {
	out := proto.Entry{
		Seq: proto.Position(e.Seq), Kind: proto.Kind(e.Kind), MsgID: wireMsgID(e.MsgID), Conv: e.Conv,
		ConvSeq: proto.Position(e.ConvSeq), Sender: e.Sender, Time: e.Time, Body: e.Body,
		UpTo: proto.Position(e.ReadUpTo), Members: e.Members, Role: proto.Role(e.Role), MemberCount: uint32(e.MemberCount),
		Source: e.Source, Reaction: e.Reaction, Remove: e.Remove, Folded: proto.Position(e.Folded), BodyHash: e.BodyHash,
	}
	if !e.Target.IsZero() {
		out.Target = wireMsgID(e.Target)
	}
	return out
}

// wireMsgID formats id as log.MsgID.String does, without fmt: every entry of a sync stream
// carries one.
func wireMsgID(id log.MsgID) proto.MsgID {
	if id.IsZero() {
		return ""
	}
	var b [48]byte // "4294967295.18446744073709551615.4294967295"
	s := strconv.AppendUint(b[:0], uint64(id.Shard), 10)
	s = strconv.AppendUint(append(s, '.'), id.Index, 10)
	s = strconv.AppendUint(append(s, '.'), uint64(id.Sub), 10)
	return proto.MsgID(s)
}

func wireAck(id uint64, conv string, r log.AppendResult) *proto.Ack {
	return &proto.Ack{ID: id, MsgID: wireMsgID(r.MsgID), Conv: conv, ConvSeq: proto.Position(r.ConvSeq),
		Time: r.Time, Epoch: proto.Epoch(r.Epoch), Duplicate: r.Duplicate, NoOp: r.NoOp}
}
