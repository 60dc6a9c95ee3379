package peer

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/syncd-dev/syncd/proto"
	"github.com/syncd-dev/syncd/raftstore"
)

// Version is the version byte every payload of this format starts with.
const Version = 1

// Method is the raftstore call method the calls of this package travel under.
const Method = "syncd.peer"

// Op names an operation by a stable code (never a Go name: a rename must not break a rolling
// upgrade). Codes are persisted in no store but cross versions on the wire: never renumber or
// reuse one.
type Op uint8

// Reads of a replica (syncd's sync streams and queries).
const (
	OpUserInfo       Op = 1  // ReadArgs{UID} → ReadAnswer.Info
	OpConversation   Op = 2  // ReadArgs{Conv, UID} → ReadAnswer.Conv
	OpUserConvs      Op = 3  // ReadArgs{UID, After, Count} → ReadAnswer.IDs
	OpReadConvBefore Op = 4  // ReadArgs{Conv, Pos, Limit} → ReadAnswer.Read
	OpReadUser       Op = 5  // ReadArgs{UID, Epoch, Pos, Limit} → ReadAnswer.Read
	OpReadUserWait   Op = 6  // as OpReadUser, but a caught-up replica waits up to WaitMS for more
	OpMembers        Op = 7  // ReadArgs{Conv, UID, After, Count} → ReadAnswer.Members, ReadAnswer.More
	OpUserGroups     Op = 8  // ReadArgs{UIDs} → ReadAnswer.Counts, one per uid
	OpReceipts       Op = 9  // ReadArgs{Conv, UID, Seqs} → ReadAnswer.Receipts, one per seq
	OpReaders        Op = 10 // ReadArgs{Conv, UID, Pos, State, After, Count} → ReadAnswer.IDs, Next, More
	OpFollows        Op = 11 // ReadArgs{UID} → ReadAnswer.Follows: the large groups the user log follows
	OpReadConvWait   Op = 12 // ReadArgs{Conv, Epoch, Pos, Limit, WaitMS} → ReadAnswer.Read: a source's read, as OpReadUserWait
)

// Inspections of a replica (the admin API's operator views).
const (
	OpCursors     Op = 16 // CursorsArgs → adminapi.CursorReport
	OpTraceHome   Op = 17 // TraceHomeArgs → TraceHome
	OpTraceUsers  Op = 18 // TraceUsersArgs → []adminapi.TraceUser
	OpDeadLetters Op = 19 // DeadLettersArgs → DeadLetters
	OpDeadLetter  Op = 20 // DeadLetterArgs → DeadLetterAnswer
)

var opNames = map[Op]string{
	OpUserInfo: "user_info", OpConversation: "conversation", OpUserConvs: "user_convs",
	OpReadConvBefore: "read_conv_before", OpReadUser: "read_user", OpReadUserWait: "read_user_wait",
	OpMembers: "members", OpUserGroups: "user_groups", OpReceipts: "receipts", OpReaders: "readers",
	OpCursors: "cursors", OpTraceHome: "trace_home", OpTraceUsers: "trace_users",
	OpDeadLetters: "dead_letters", OpDeadLetter: "dead_letter",
}

// String returns the operation's name for logs and errors.
func (o Op) String() string {
	if n, ok := opNames[o]; ok {
		return n
	}
	return fmt.Sprintf("op(%d)", uint8(o))
}

// flagLeader asks that only the shard's leader replica answer.
const flagLeader = 1

// ErrFormat is returned for a payload that does not decode: truncated, of another version, or
// with arguments or a result that are not what its operation carries.
var ErrFormat = errors.New("peer: bad payload")

// Request is a decoded request: the operation, the shard it concerns, whether only the leader
// replica may answer, and the still-encoded arguments (decode them with Request.Decode).
type Request struct {
	Op     Op
	Shard  raftstore.ShardID
	Leader bool
	args   []byte
}

// Decode decodes the request's arguments into v, a pointer to the operation's argument type.
func (r Request) Decode(v any) error {
	if err := unmarshal(r.args, v); err != nil {
		return fmt.Errorf("%w: arguments of %s: %v", ErrFormat, r.Op, err)
	}
	return nil
}

// EncodeRequest encodes a request of op on shard with args.
func EncodeRequest(op Op, shard raftstore.ShardID, leader bool, args any) ([]byte, error) {
	b := []byte{Version, byte(op), 0}
	if leader {
		b[2] = flagLeader
	}
	b = binary.AppendUvarint(b, uint64(shard))
	return marshalTo(b, args)
}

// DecodeRequest decodes the envelope of a request; the arguments stay encoded until
// Request.Decode.
func DecodeRequest(b []byte) (Request, error) {
	if err := checkVersion(b); err != nil {
		return Request{}, err
	}
	if len(b) < 4 {
		return Request{}, fmt.Errorf("%w: request of %d bytes", ErrFormat, len(b))
	}
	if b[2]&^flagLeader != 0 {
		return Request{}, fmt.Errorf("%w: unknown request flags %#x", ErrFormat, b[2])
	}
	shard, n := binary.Uvarint(b[3:])
	if n <= 0 || shard > 1<<32-1 {
		return Request{}, fmt.Errorf("%w: request shard", ErrFormat)
	}
	return Request{Op: Op(b[1]), Shard: raftstore.ShardID(shard), Leader: b[2]&flagLeader != 0, args: b[3+n:]}, nil
}

// EncodeAnswer encodes an operation's result.
func EncodeAnswer(v any) ([]byte, error) { return marshalTo([]byte{Version}, v) }

// DecodeAnswer decodes an answer into v, a pointer to the operation's result type.
func DecodeAnswer(b []byte, v any) error {
	if err := checkVersion(b); err != nil {
		return err
	}
	if err := unmarshal(b[1:], v); err != nil {
		return fmt.Errorf("%w: answer: %v", ErrFormat, err)
	}
	return nil
}

func checkVersion(b []byte) error {
	if len(b) == 0 {
		return fmt.Errorf("%w: empty", ErrFormat)
	}
	if b[0] != Version {
		return fmt.Errorf("%w: version %d, this node speaks version %d (upgrade the older node)", ErrFormat, b[0], Version)
	}
	return nil
}

// marshalTo appends the msgpack encoding of v to b, with the encoder options pinned: a change of
// the library's defaults must not change the bytes (the golden tests would say so).
func marshalTo(b []byte, v any) ([]byte, error) {
	buf := bytes.NewBuffer(b)
	enc := msgpack.NewEncoder(buf)
	enc.SetCustomStructTag("json") // the admin API types' names are their tags on this wire too
	enc.UseArrayEncodedStructs(false)
	enc.SetOmitEmpty(false) // every field is sent: an empty list stays empty, not null
	enc.UseCompactInts(true)
	enc.UseCompactFloats(false)
	enc.SetSortMapKeys(true)
	enc.UseInternedStrings(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

func unmarshal(b []byte, v any) error {
	// The decoder allocates what a length claims before reading the elements: bound every length
	// by the bytes present first, as the client protocol does.
	if err := proto.CheckShape(b); err != nil {
		return err
	}
	r := bytes.NewReader(b)
	dec := msgpack.NewDecoder(r)
	dec.SetCustomStructTag("json")
	dec.UseInternedStrings(false)
	dec.UseLooseInterfaceDecoding(false)
	dec.DisallowUnknownFields(false) // a newer node may send fields this one does not know
	if err := dec.Decode(v); err != nil {
		return err
	}
	if r.Len() != 0 {
		return fmt.Errorf("%d bytes after the value", r.Len())
	}
	return nil
}
