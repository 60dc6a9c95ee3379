package proto

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// Shape limits of a frame body, enforced by checkBody before the msgpack decoder runs. They
// keep decoding cheap and bounded whatever a peer sends. The decoder allocates a slice for the
// length an array declares before reading its elements (msgpack v5.4.1 ignores its own
// allocation limit for slices of structs), so every declared length must be backed by bytes
// that are present, record arrays are capped at MaxPage, and keys may not repeat (a repeated
// key would decode its array again). Decoding a body of n bytes then allocates at most about
// 16·n bytes for id lists plus twice MaxPage records (about 300 KB).
const (
	maxDepth    = 8     // nested maps and arrays; the deepest frame today uses 4
	maxMapLen   = 64    // keys per map; the largest frame today has 11
	maxArrayLen = 65535 // elements per array
	maxKeyLen   = 64    // bytes per map key
)

var (
	errTruncated = errors.New("truncated value")
	errDepth     = errors.New("nesting too deep")
)

// checkBody verifies that b holds exactly one msgpack map and nothing after it, and that the
// value respects the shape rules of the protocol:
//
//   - every length (string, binary, array, map) fits in the bytes that remain;
//   - maps have at most maxMapLen distinct string keys of at most maxKeyLen bytes;
//   - arrays have at most maxArrayLen elements, and those longer than MaxPage hold only
//     strings (lists of ids): records such as entries or conversations come MaxPage at most;
//   - nesting is at most maxDepth deep;
//   - no extension types (the protocol uses none; times are integers) and no reserved 0xc1.
func checkBody(b []byte) error {
	if len(b) == 0 || !isMapCode(b[0]) {
		return errors.New("body is not a msgpack map")
	}
	return CheckShape(b)
}

// CheckShape verifies that b holds exactly one msgpack value, of any type, that respects the
// shape rules of a frame body (checkBody), so that decoding it is bounded by len(b). Other
// msgpack formats of the project (syncd's node-to-node calls) check their input with it before
// decoding: one checker guards every msgpack decoder.
func CheckShape(b []byte) error {
	n, err := checkValue(b, 0)
	if err != nil {
		return err
	}
	if n != len(b) {
		return fmt.Errorf("%d trailing bytes", len(b)-n)
	}
	return nil
}

func isMapCode(c byte) bool { return c&0xf0 == 0x80 || c == 0xde || c == 0xdf }

func isStrCode(c byte) bool { return c&0xe0 == 0xa0 || (c >= 0xd9 && c <= 0xdb) }

// checkValue checks the value at the start of b and returns its encoded length.
func checkValue(b []byte, depth int) (int, error) {
	if len(b) == 0 {
		return 0, errTruncated
	}
	c := b[0]
	switch {
	case c <= 0x7f, c >= 0xe0, c == 0xc0, c == 0xc2, c == 0xc3: // fixint, nil, bool
		return 1, nil
	case c&0xe0 == 0xa0: // fixstr
		return span(b, 1, int(c&0x1f))
	case c&0xf0 == 0x90: // fixarray
		return checkArray(b, 1, int(c&0x0f), depth)
	case c&0xf0 == 0x80: // fixmap
		return checkMap(b, 1, int(c&0x0f), depth)
	}
	switch c {
	case 0xcc, 0xd0: // uint8, int8
		return span(b, 1, 1)
	case 0xcd, 0xd1: // uint16, int16
		return span(b, 1, 2)
	case 0xca, 0xce, 0xd2: // float32, uint32, int32
		return span(b, 1, 4)
	case 0xcb, 0xcf, 0xd3: // float64, uint64, int64
		return span(b, 1, 8)
	}
	w := countWidth[c] // width of the big-endian count after the code byte
	if w == 0 {
		return 0, fmt.Errorf("msgpack code 0x%02x not allowed", c) // 0xc1, extension types
	}
	if len(b) < 1+w {
		return 0, errTruncated
	}
	var n uint64
	switch w {
	case 1:
		n = uint64(b[1])
	case 2:
		n = uint64(binary.BigEndian.Uint16(b[1:]))
	default:
		n = uint64(binary.BigEndian.Uint32(b[1:]))
	}
	if n > uint64(len(b)) { // also keeps the int conversion safe on 32-bit platforms
		return 0, errTruncated
	}
	switch c {
	case 0xdc, 0xdd:
		return checkArray(b, 1+w, int(n), depth)
	case 0xde, 0xdf:
		return checkMap(b, 1+w, int(n), depth)
	}
	return span(b, 1+w, int(n)) // bin, str
}

// countWidth maps the codes of sized values (bin, str, array, map) to the width of their count.
var countWidth = [256]int{
	0xc4: 1, 0xc5: 2, 0xc6: 4, // bin8/16/32
	0xd9: 1, 0xda: 2, 0xdb: 4, // str8/16/32
	0xdc: 2, 0xdd: 4, // array16/32
	0xde: 2, 0xdf: 4, // map16/32
}

// span returns the length of a value made of a head of h bytes and n more bytes.
func span(b []byte, h, n int) (int, error) {
	if n > len(b)-h {
		return 0, errTruncated
	}
	return h + n, nil
}

func checkArray(b []byte, h, n, depth int) (int, error) {
	switch {
	case depth >= maxDepth:
		return 0, errDepth
	case n > maxArrayLen:
		return 0, fmt.Errorf("array of %d elements, at most %d", n, maxArrayLen)
	case n > len(b)-h: // every element takes at least one byte
		return 0, errTruncated
	}
	off := h
	for i := 0; i < n; i++ {
		if n > MaxPage && off < len(b) && !isStrCode(b[off]) {
			return 0, fmt.Errorf("array of %d elements holds a non-string: arrays of more than %d elements are lists of ids", n, MaxPage)
		}
		m, err := checkValue(b[off:], depth+1)
		if err != nil {
			return 0, err
		}
		off += m
	}
	return off, nil
}

func checkMap(b []byte, h, n, depth int) (int, error) {
	switch {
	case depth >= maxDepth:
		return 0, errDepth
	case n > maxMapLen:
		return 0, fmt.Errorf("map of %d keys, at most %d", n, maxMapLen)
	case 2*n > len(b)-h:
		return 0, errTruncated
	}
	var keys [maxMapLen][2]int32 // start and end of each key's bytes, to refuse duplicates
	off := h
	for i := 0; i < n; i++ {
		if off >= len(b) {
			return 0, errTruncated
		}
		c := b[off]
		if !isStrCode(c) {
			return 0, fmt.Errorf("map key with msgpack code 0x%02x, want a string", c)
		}
		m, err := checkValue(b[off:], depth+1)
		if err != nil {
			return 0, err
		}
		head := 1 + countWidth[c] // fixstr: 1; str8, str16, str32: 1 + the count's width
		if m-head > maxKeyLen {
			return 0, fmt.Errorf("map key of %d bytes, at most %d", m-head, maxKeyLen)
		}
		key := b[off+head : off+m]
		for _, k := range keys[:i] {
			if string(b[k[0]:k[1]]) == string(key) {
				return 0, fmt.Errorf("duplicate map key %q", key)
			}
		}
		keys[i] = [2]int32{int32(off + head), int32(off + m)}
		off += m
		if m, err = checkValue(b[off:], depth+1); err != nil {
			return 0, err
		}
		off += m
	}
	return off, nil
}
