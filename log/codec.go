package log

import (
	"encoding/binary"
	"math"
	"math/bits"
)

// A tiny append-style binary codec shared by every persisted value and request encoding in this
// package. Integers are varints, strings and byte slices are length-prefixed. The decoder never
// panics: the first problem sticks in d.err and every later read returns zero values.

type encoder struct{ b []byte }

func (e *encoder) u8(v uint8)       { e.b = append(e.b, v) }
func (e *encoder) uvarint(v uint64) { e.b = binary.AppendUvarint(e.b, v) }
func (e *encoder) varint(v int64)   { e.b = binary.AppendVarint(e.b, v) }
func (e *encoder) bytes(v []byte)   { e.uvarint(uint64(len(v))); e.b = append(e.b, v...) }
func (e *encoder) str(v string)     { e.uvarint(uint64(len(v))); e.b = append(e.b, v...) }
func (e *encoder) msgID(id MsgID)   { e.b = appendMsgID(e.b, id) }

// boolByte is b as a stored byte: 1 or 0 (decoder.bool reads it back).
func boolByte(b bool) uint8 {
	if b {
		return 1
	}
	return 0
}

func (e *encoder) strs(v []string) {
	e.uvarint(uint64(len(v)))
	for _, s := range v {
		e.str(s)
	}
}

// Encoded lengths, for sizing buffers once.
func uvarintLen(v uint64) int { return (bits.Len64(v|1) + 6) / 7 }
func varintLen(v int64) int {
	u := uint64(v) << 1
	if v < 0 {
		u = ^u
	}
	return uvarintLen(u)
}
func strLen(s string) int { return uvarintLen(uint64(len(s))) + len(s) }
func strsLen(v []string) int {
	n := uvarintLen(uint64(len(v)))
	for _, s := range v {
		n += strLen(s)
	}
	return n
}

type decoder struct {
	b   []byte
	err error
}

func (d *decoder) fail(what string) {
	if d.err == nil {
		d.err = corruptf("truncated or malformed %s", what)
	}
}

func (d *decoder) u8() uint8 {
	if d.err != nil || len(d.b) < 1 {
		d.fail("byte")
		return 0
	}
	v := d.b[0]
	d.b = d.b[1:]
	return v
}

func (d *decoder) uvarint() uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.fail("uvarint")
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) varint() int64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Varint(d.b)
	if n <= 0 {
		d.fail("varint")
		return 0
	}
	d.b = d.b[n:]
	return v
}

// raw returns the next n bytes without copying.
func (d *decoder) raw(n uint64, what string) []byte {
	if d.err != nil {
		return nil
	}
	if n > uint64(len(d.b)) || n > math.MaxInt32 {
		d.fail(what)
		return nil
	}
	v := d.b[:n:n]
	d.b = d.b[n:]
	return v
}

// bytes returns a copy, so decoded values never alias Pebble-owned memory.
func (d *decoder) bytes() []byte {
	v := d.raw(d.uvarint(), "bytes")
	if len(v) == 0 {
		return nil
	}
	return append([]byte(nil), v...)
}

func (d *decoder) str() string { return string(d.raw(d.uvarint(), "string")) }

func (d *decoder) msgID() MsgID {
	v := d.raw(16, "msg id")
	if v == nil {
		return MsgID{}
	}
	return MsgID{
		Shard: ShardID(binary.BigEndian.Uint32(v)),
		Index: binary.BigEndian.Uint64(v[4:]),
		Sub:   binary.BigEndian.Uint32(v[12:]),
	}
}

func (d *decoder) strs() []string {
	n := d.uvarint()
	if n > uint64(len(d.b)) { // each string takes at least one byte
		d.fail("string list")
		return nil
	}
	if n == 0 {
		return nil
	}
	v := make([]string, 0, n)
	for i := uint64(0); i < n && d.err == nil; i++ {
		v = append(v, d.str())
	}
	return v
}

// bool reads a byte written by boolByte; any other value is corrupt.
func (d *decoder) bool(what string) bool {
	v := d.u8()
	if v > 1 && d.err == nil {
		d.err = corruptf("%s: bad boolean %d", what, v)
	}
	return v == 1
}

// version reads the leading format version byte and checks it is one this code understands.
func (d *decoder) version(what string, max uint8) uint8 {
	v := d.u8()
	if d.err == nil && (v == 0 || v > max) {
		d.err = corruptf("%s: unknown format version %d", what, v)
	}
	return v
}

// done reports the sticky error, or an error if bytes are left over.
func (d *decoder) done(what string) error {
	if d.err == nil && len(d.b) != 0 {
		d.err = corruptf("%s: %d trailing bytes", what, len(d.b))
	}
	return d.err
}
