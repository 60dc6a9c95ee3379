package log

import (
	"encoding/binary"
	"slices"
)

// Binary encodings of the requests that travel inside Raft commands. Like stored values they
// start with a version byte, and a decoder for a version must be kept as long as a Raft log may
// still hold it.

const (
	requestV1 = 1
	// requestV2 adds an Append's Role and MaxGroupSize, and a DeliveryBatch's barriers (each
	// item's After); a batch without barriers is still v1.
	requestV2 = 2
	// requestV3 adds an Append's StatusFanoutLimit after its v2 fields; an Append without one is
	// still v1 or v2.
	requestV3 = 3
	// requestV4 adds an Append's LargeGroupThreshold after its v3 fields; an Append without one
	// is still v1 to v3.
	requestV4 = 4
	// requestV5 adds an Append's Reaction and Remove (KindReaction) after its v4 fields; an
	// Append without them is still v1 to v4.
	requestV5 = 5
)

// MarshalBinary encodes the request.
func (a *Append) MarshalBinary() ([]byte, error) { return a.AppendBinary(nil) }

// AppendBinary appends the encoding of the request to b (encoding.BinaryAppender), growing b
// once: a Raft command puts its header in front without copying the request.
func (a *Append) AppendBinary(b []byte) ([]byte, error) {
	v5 := a.Reaction != "" || a.Remove
	v4 := v5 || a.LargeGroupThreshold != 0
	v3 := v4 || a.StatusFanoutLimit != 0
	v2 := v3 || a.Role != 0 || a.MaxGroupSize != 0
	e := encoder{b: slices.Grow(b, 2+9*binary.MaxVarintLen64+strLen(a.Conv)+strLen(a.Sender)+strLen(a.ClientMsgID)+
		uvarintLen(uint64(len(a.Body)))+len(a.Body)+16+strsLen(a.Members)+strLen(a.Reaction)+1)}
	switch {
	case v5:
		e.u8(requestV5)
	case v4:
		e.u8(requestV4)
	case v3:
		e.u8(requestV3)
	case v2:
		e.u8(requestV2)
	default:
		e.u8(requestV1)
	}
	e.str(a.Conv)
	e.str(a.Sender)
	e.str(a.ClientMsgID)
	e.u8(uint8(a.Kind))
	e.bytes(a.Body)
	e.uvarint(uint64(a.ReadUpTo))
	e.msgID(a.Target)
	e.strs(a.Members)
	e.varint(a.DedupWindow)
	e.varint(a.RecallWindow)
	if v2 {
		e.u8(uint8(a.Role))
		e.varint(a.MaxGroupSize)
	}
	if v3 {
		e.varint(a.StatusFanoutLimit)
	}
	if v4 {
		e.varint(a.LargeGroupThreshold)
	}
	if v5 {
		e.str(a.Reaction)
		e.u8(boolByte(a.Remove))
	}
	return e.b, nil
}

// UnmarshalBinary decodes a request encoded by MarshalBinary. Errors wrap ErrCorrupt.
func (a *Append) UnmarshalBinary(b []byte) error {
	d := decoder{b: b}
	v := d.version("append request", requestV5)
	*a = Append{
		Conv:         d.str(),
		Sender:       d.str(),
		ClientMsgID:  d.str(),
		Kind:         Kind(d.u8()),
		Body:         d.bytes(),
		ReadUpTo:     Position(d.uvarint()),
		Target:       d.msgID(),
		Members:      d.strs(),
		DedupWindow:  d.varint(),
		RecallWindow: d.varint(),
	}
	if v >= requestV2 {
		a.Role, a.MaxGroupSize = Role(d.u8()), d.varint()
	}
	if v >= requestV3 {
		a.StatusFanoutLimit = d.varint()
	}
	if v >= requestV4 {
		a.LargeGroupThreshold = d.varint()
	}
	if v >= requestV5 {
		a.Reaction = d.str()
		a.Remove = d.bool("append request")
	}
	return d.done("append request")
}

// MarshalBinary encodes the batch.
func (b *DeliveryBatch) MarshalBinary() ([]byte, error) { return b.AppendBinary(nil) }

// AppendBinary appends the encoding of the batch to buf, growing it once (see
// Append.AppendBinary).
func (b *DeliveryBatch) AppendBinary(buf []byte) ([]byte, error) {
	size := 1 + 4*binary.MaxVarintLen64
	for i := range b.Items {
		it := &b.Items[i]
		n := entryLen(&it.Entry)
		size += uvarintLen(it.Pos) + strsLen(it.Users) + uvarintLen(uint64(n)) + n
	}
	barriers := slices.ContainsFunc(b.Items, func(it Delivery) bool { return it.After != (Barrier{}) })
	if barriers {
		size += len(b.Items) * 2 * binary.MaxVarintLen64
	}
	version := uint8(requestV1)
	if barriers {
		version = requestV2
	}
	e := encoder{b: slices.Grow(buf, size)}
	e.u8(version)
	e.uvarint(uint64(b.Source))
	e.uvarint(b.Prev)
	e.uvarint(b.Last)
	e.uvarint(uint64(len(b.Items)))
	for i := range b.Items {
		it := &b.Items[i]
		e.uvarint(it.Pos)
		e.strs(it.Users)
		e.uvarint(uint64(entryLen(&it.Entry)))
		e.entry(&it.Entry)
		if barriers {
			e.uvarint(uint64(it.After.Source))
			e.uvarint(it.After.Pos)
		}
	}
	return e.b, nil
}

// UnmarshalBinary decodes a batch encoded by MarshalBinary. Errors wrap ErrCorrupt.
func (b *DeliveryBatch) UnmarshalBinary(data []byte) error {
	d := decoder{b: data}
	v := d.version("delivery batch", requestV2)
	*b = DeliveryBatch{Source: ShardID(d.uvarint()), Prev: d.uvarint(), Last: d.uvarint()}
	n := d.uvarint()
	if n > uint64(len(d.b)) {
		d.fail("delivery items")
	}
	for i := uint64(0); i < n && d.err == nil; i++ {
		it := Delivery{Pos: d.uvarint(), Users: d.strs()}
		raw := d.raw(d.uvarint(), "entry")
		if d.err == nil {
			e, err := decodeEntry(raw, 0)
			if err != nil {
				return err
			}
			it.Entry = e
		}
		if v >= requestV2 {
			it.After = Barrier{Source: ShardID(d.uvarint()), Pos: d.uvarint()}
		}
		b.Items = append(b.Items, it)
	}
	return d.done("delivery batch")
}
