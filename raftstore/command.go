package raftstore

import (
	"encoding"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"

	"github.com/syncd-dev/syncd/log"
)

// Command is one replicated operation on a shard. Build it with the constructors below; Propose
// stamps it with the proposer's clock and replicates it.
//
// Raft command format (version 1), as stored in the Raft log:
//
//	version u8 (1) | op u8 | proposer time varint (Unix ns) | payload (the log request's encoding)
//
// Decoders for every version that may still sit in a Raft log must be kept.
type Command struct {
	op      op
	payload encoding.BinaryMarshaler
	// Time is the proposer's clock in Unix nanoseconds. Zero means Propose fills in its own
	// clock; tests set it to replay exact timelines.
	Time int64
}

type op uint8

// Operation codes. Values are persisted in Raft logs: never renumber them.
const (
	opAppend  op = 1
	opDeliver op = 2
	opCursor  op = 3
	opTrim    op = 4
	// Dead letters (log/deadletter.go).
	opDeadLetter     op = 5
	opDropDeadLetter op = 6
	opRedeliver      op = 7
	// Fan-out batches of several sources to one destination (DeliverBatchesCommand).
	opDeliverBatches op = 8
	// A step of moving a user's log to another shard (MoveCommand).
	opMove op = 9
	// A checksum of every replica's state at this entry's index (ChecksumCommand, checksum.go).
	opChecksum op = 10
	// A user log's deliveries reported up to a cursor (MarkReportedCommand).
	opMarkReported op = 11
	// Delivered marks of a large group's members, from their devices' acks (MarkDeliveredCommand).
	opMarkDelivered op = 12
	// The dead-letter process (log/deadletter.go): a refused automatic replay, and a move to the
	// archive. Only proposed by a node with the process on (syncd.Config.DisableDeadLetterProcess).
	opDeadLetterAttempt op = 13
	opArchiveDeadLetter op = 14
)

const commandV1 = 1

// addsData reports whether a command of op writes something new that a client asked for, which a
// node low on disk refuses (ErrLowDisk). The others complete work already acknowledged (a
// delivery, a dead letter or a replay of one write what an acked send owes its members, and
// draining the outbox lets it trim), overwrite one small record (a cursor), or free space
// (trims, dead-letter drops).
func (o op) addsData() bool { return o == opAppend }

// AppendCommand appends to a conversation log ([log.Tx.Append]).
func AppendCommand(req *log.Append) Command { return Command{op: opAppend, payload: req} }

// DeliverCommand appends a fan-out batch to user logs ([log.Tx.Deliver]).
func DeliverCommand(b *log.DeliveryBatch) Command { return Command{op: opDeliver, payload: b} }

// DeliverBatchesCommand appends several fan-out batches, in order, to user logs of one shard in
// one Raft entry ([log.Tx.Deliver] each): the fan-out's deliveries from every source it drains to
// one destination, gathered while the previous one was committing (syncd/fanout). Each batch has
// its own outcome in Result.Deliveries; a refused batch (a log rejection, such as an out-of-order
// one, or one that does not decode) writes nothing and leaves the others applied, exactly as if
// each had been an entry of its own in one applied Raft batch.
func DeliverBatchesCommand(bs []*log.DeliveryBatch) Command {
	return Command{op: opDeliverBatches, payload: deliveryBatches(bs)}
}

// CursorCommand stores a device cursor ([log.Tx.SetCursor]).
func CursorCommand(u *log.CursorUpdate) Command { return Command{op: opCursor, payload: u} }

// TrimCommand applies retention to one log or the outbox ([log.Tx.Trim]).
func TrimCommand(r *log.Trim) Command { return Command{op: opTrim, payload: r} }

// DeadLetterCommand records a delivery the destination refused ([log.Tx.AddDeadLetter]); propose
// it to the source shard.
func DeadLetterCommand(r *log.DeadLetterAdd) Command { return Command{op: opDeadLetter, payload: r} }

// DropDeadLetterCommand deletes a dead letter ([log.Tx.DropDeadLetter]); propose it to the source
// shard.
func DropDeadLetterCommand(r *log.DeadLetterDrop) Command {
	return Command{op: opDropDeadLetter, payload: r}
}

// DeadLetterAttemptCommand records an automatic replay of a dead letter that the destination
// refused again ([log.Tx.AttemptDeadLetter]); propose it to the source shard.
func DeadLetterAttemptCommand(r *log.DeadLetterAttempt) Command {
	return Command{op: opDeadLetterAttempt, payload: r}
}

// ArchiveDeadLetterCommand moves a dead letter to the source shard's archive
// ([log.Tx.ArchiveDeadLetter]); propose it to the source shard.
func ArchiveDeadLetterCommand(r *log.DeadLetterArchive) Command {
	return Command{op: opArchiveDeadLetter, payload: r}
}

// MoveCommand makes one step of moving a user's log between shards ([log.Tx.Move]); each step
// is proposed to the shard it names (docs/MOVES.md) and is idempotent per move. It is never
// refused for low disk: a move that stopped half-way could leave the user's writes paused.
func MoveCommand(r *log.MoveStep) Command { return Command{op: opMove, payload: r} }

// MarkReportedCommand records that a user log's entries up to a cursor have been reported as
// delivered ([log.Tx.MarkReported]); the delivery reporter proposes it to the log's shard after
// appending the KindDelivered entries (log.Shard.DeliveryDue). Like a cursor, it is never
// refused for low disk: it overwrites one small record.
func MarkReportedCommand(r *log.MarkReported) Command { return Command{op: opMarkReported, payload: r} }

// MarkDeliveredCommand raises the delivered marks of members of a large group to where their
// devices acked its log ([log.Tx.MarkDelivered]); propose it to the group's shard.
// Result.Marked says how many moved. Never refused for low disk: it overwrites member records.
func MarkDeliveredCommand(r *log.MarkDelivered) Command {
	return Command{op: opMarkDelivered, payload: r}
}

// RedeliverCommand replays a dead letter into user logs ([log.Tx.Redeliver]); propose it to the
// destination shard. Result.Deliver.Appended says how many entries it wrote.
func RedeliverCommand(r *log.Redelivery) Command { return Command{op: opRedeliver, payload: r} }

// Result is what a command produced once committed and applied. Only the field for the
// command's kind is set.
type Result struct {
	Append  log.AppendResult  // AppendCommand
	Deliver log.DeliverResult // DeliverCommand; RedeliverCommand sets Appended only
	First   uint64            // TrimCommand: first retained position afterwards
	Move    uint64            // MoveCommand: the cutover's position, or the entries an activation appended
	// Deliveries has one outcome per batch of a DeliverBatchesCommand, in the command's order.
	Deliveries []DeliveryOutcome
	// CheckIndex, for a ChecksumCommand, is the Raft index it was applied at: every replica
	// records the checksum of its state as of that index (ShardStatus.Checksums).
	CheckIndex uint64
	// Marked, for a MarkDeliveredCommand, is how many members' marks moved.
	Marked int
}

// DeliveryOutcome is the outcome of one batch of a DeliverBatchesCommand: the destination's
// answer, or the refusal of that batch alone (a log rejection, *log.OutOfOrderError among them).
type DeliveryOutcome struct {
	Result log.DeliverResult
	Err    error
}

// deliveryBatches is the payload of DeliverBatchesCommand:
//
//	count uvarint | per batch: length uvarint | the batch's encoding (log.DeliveryBatch)
type deliveryBatches []*log.DeliveryBatch

func (bs deliveryBatches) MarshalBinary() ([]byte, error) {
	if len(bs) == 0 {
		return nil, fmt.Errorf("raftstore: a delivery command without batches")
	}
	enc := make([][]byte, len(bs))
	for i, d := range bs {
		var err error
		if enc[i], err = d.MarshalBinary(); err != nil {
			return nil, err
		}
	}
	return joinDeliveryBatches(enc), nil
}

// splitDeliveryBatches splits a deliveryBatches payload into the encodings of its batches,
// without decoding them: the state machine decodes each on its own (so one that does not decode
// is refused alone), and the leader's combiner joins the batches of several proposals
// (delivercombine.go).
func splitDeliveryBatches(b []byte) ([][]byte, error) {
	n, k := binary.Uvarint(b)
	// Every batch takes at least its length byte: a count beyond the bytes left is garbage, not
	// an allocation to make.
	if k <= 0 || n == 0 || n > uint64(len(b)-k) {
		return nil, errors.New("delivery batches: bad count")
	}
	b = b[k:]
	out := make([][]byte, n)
	for i := range out {
		l, k := binary.Uvarint(b)
		if k <= 0 || l > uint64(len(b)-k) {
			return nil, fmt.Errorf("delivery batches: batch %d truncated", i)
		}
		out[i] = b[k : k+int(l)]
		b = b[k+int(l):]
	}
	if len(b) != 0 {
		return nil, errors.New("delivery batches: trailing bytes")
	}
	return out, nil
}

// joinDeliveryBatches encodes batches (each a log.DeliveryBatch encoding) as a deliveryBatches
// payload.
func joinDeliveryBatches(batches [][]byte) []byte {
	size := binary.MaxVarintLen64
	for _, b := range batches {
		size += binary.MaxVarintLen64 + len(b)
	}
	out := binary.AppendUvarint(make([]byte, 0, size), uint64(len(batches)))
	for _, b := range batches {
		out = binary.AppendUvarint(out, uint64(len(b)))
		out = append(out, b...)
	}
	return out
}

func (c Command) encode() ([]byte, error) {
	if c.payload == nil {
		return nil, fmt.Errorf("raftstore: empty command")
	}
	var header [2 + binary.MaxVarintLen64]byte
	b := append(header[:0], commandV1, byte(c.op))
	b = binary.AppendVarint(b, c.Time)
	if a, ok := c.payload.(encoding.BinaryAppender); ok { // the hot commands: one allocation, no copy
		return a.AppendBinary(b)
	}
	p, err := c.payload.MarshalBinary()
	if err != nil {
		return nil, err
	}
	return append(slices.Clip(b), p...), nil
}

// decodedCommand is a command read back from the Raft log.
type decodedCommand struct {
	op   op
	time int64
	body []byte
}

func decodeCommand(b []byte) (decodedCommand, error) {
	if len(b) < 3 || b[0] != commandV1 {
		return decodedCommand{}, fmt.Errorf("%w: raft command with unknown version or too short", log.ErrCorrupt)
	}
	t, n := binary.Varint(b[2:])
	if n <= 0 {
		return decodedCommand{}, fmt.Errorf("%w: raft command time", log.ErrCorrupt)
	}
	return decodedCommand{op: op(b[1]), time: t, body: b[2+n:]}, nil
}

// apply runs the command inside tx. Errors are either rejections (log.Rejected) or failures of
// the state machine itself.
func (c decodedCommand) apply(tx *log.Tx, st log.Stamp) (Result, error) {
	switch c.op {
	case opAppend:
		var req log.Append
		if err := req.UnmarshalBinary(c.body); err != nil {
			return Result{}, rejectDecode(err)
		}
		r, err := tx.Append(st, &req)
		return Result{Append: r}, err
	case opDeliver:
		var b log.DeliveryBatch
		if err := b.UnmarshalBinary(c.body); err != nil {
			return Result{}, rejectDecode(err)
		}
		r, err := tx.Deliver(st, &b)
		return Result{Deliver: r}, err
	case opDeliverBatches:
		bs, err := splitDeliveryBatches(c.body)
		if err != nil {
			return Result{}, rejectDecode(err)
		}
		res := Result{Deliveries: make([]DeliveryOutcome, len(bs))}
		for i, enc := range bs {
			var b log.DeliveryBatch
			if err := b.UnmarshalBinary(enc); err != nil {
				res.Deliveries[i].Err = rejectDecode(err)
				continue
			}
			r, err := tx.Deliver(st, &b)
			if err != nil && !log.Rejected(err) {
				return Result{}, err
			}
			res.Deliveries[i] = DeliveryOutcome{Result: r, Err: err}
		}
		return res, nil
	case opCursor:
		var u log.CursorUpdate
		if err := u.UnmarshalBinary(c.body); err != nil {
			return Result{}, rejectDecode(err)
		}
		if !u.Seen {
			st.Time = 0 // a v1 record, as a build before sightings writes (log.CursorUpdate.Seen)
		}
		return Result{}, tx.SetCursor(st, u.UID, u.Device, u.Cursor) // st.Time: the device's last sighting (retention)
	case opMarkReported:
		var r log.MarkReported
		if err := r.UnmarshalBinary(c.body); err != nil {
			return Result{}, rejectDecode(err)
		}
		return Result{}, tx.MarkReported(r.Log, r.Cursor)
	case opMarkDelivered:
		var r log.MarkDelivered
		if err := r.UnmarshalBinary(c.body); err != nil {
			return Result{}, rejectDecode(err)
		}
		n, err := tx.MarkDelivered(st, &r)
		return Result{Marked: n}, err
	case opTrim:
		var r log.Trim
		if err := r.UnmarshalBinary(c.body); err != nil {
			return Result{}, rejectDecode(err)
		}
		first, err := tx.Trim(st, &r)
		return Result{First: first}, err
	case opDeadLetter:
		var r log.DeadLetterAdd
		if err := r.UnmarshalBinary(c.body); err != nil {
			return Result{}, rejectDecode(err)
		}
		return Result{}, tx.AddDeadLetter(st, &r)
	case opDropDeadLetter:
		var r log.DeadLetterDrop
		if err := r.UnmarshalBinary(c.body); err != nil {
			return Result{}, rejectDecode(err)
		}
		return Result{}, tx.DropDeadLetter(&r)
	case opDeadLetterAttempt:
		var r log.DeadLetterAttempt
		if err := r.UnmarshalBinary(c.body); err != nil {
			return Result{}, rejectDecode(err)
		}
		return Result{}, tx.AttemptDeadLetter(st, &r)
	case opArchiveDeadLetter:
		var r log.DeadLetterArchive
		if err := r.UnmarshalBinary(c.body); err != nil {
			return Result{}, rejectDecode(err)
		}
		return Result{}, tx.ArchiveDeadLetter(st, &r)
	case opRedeliver:
		var r log.Redelivery
		if err := r.UnmarshalBinary(c.body); err != nil {
			return Result{}, rejectDecode(err)
		}
		n, err := tx.Redeliver(st, &r)
		return Result{Deliver: log.DeliverResult{Appended: n}}, err
	case opMove:
		var r log.MoveStep
		if err := r.UnmarshalBinary(c.body); err != nil {
			return Result{}, rejectDecode(err)
		}
		n, err := tx.Move(st, &r)
		return Result{Move: n}, err
	case opChecksum:
		// Nothing to write: the state machine captures the state once this entry is committed
		// (fsm.ApplyBatch), and a checksum is computed outside the apply.
		if err := decodeChecksumRequest(c.body); err != nil {
			return Result{}, rejectDecode(err)
		}
		return Result{CheckIndex: st.Index}, nil
	}
	// An op of a later build (a node not yet upgraded, in a mixed cluster) is refused as invalid:
	// a rejection writes nothing, so the state stays what every replica that knows the op would
	// have made of a command that writes nothing (ChecksumCommand); for one that writes, the
	// replicas would differ, which is why a new writing op waits until every node runs a build
	// that knows it (D39, D53).
	return Result{}, fmt.Errorf("%w: unknown raft command op %d", log.ErrInvalid, c.op)
}

// rejectDecode turns a command that does not decode into a rejection: every replica fails it the
// same way and nothing is written, so the state machine can go on.
func rejectDecode(err error) error {
	return fmt.Errorf("%w: undecodable command: %v", log.ErrInvalid, err)
}

// Apply runs cmd inside tx at st exactly as a shard's state machine applies it, through the
// command's Raft-log encoding; a command with a Time of its own overrides st.Time, as it does when
// proposed. It is for tests and tools that drive shards without Raft (syncd/fanout's tests); the
// caller commits tx.
func Apply(tx *log.Tx, st log.Stamp, cmd Command) (Result, error) {
	b, err := cmd.encode()
	if err != nil {
		return Result{}, err
	}
	c, err := decodeCommand(b)
	if err != nil {
		return Result{}, err
	}
	if c.time != 0 {
		st.Time = c.time
	}
	return c.apply(tx, st)
}
