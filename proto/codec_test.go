package proto

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/vmihailenco/msgpack/v5"
)

// decodeBoth decodes b as one Entry with the custom decoder and with the reflective one.
func decodeBoth(b []byte) (custom, reflective Entry, cerr, rerr error) {
	dec := msgpack.NewDecoder(bytes.NewReader(b))
	configureDecoder(dec)
	cerr = dec.Decode(&custom)
	dec.Reset(bytes.NewReader(b))
	configureDecoder(dec)
	var r reflectEntry
	rerr = dec.Decode(&r)
	return custom, Entry(r), cerr, rerr
}

// TestEntryDecodeMsgpackIsReflective: the custom Entry decoder decodes what the reflective
// decoder decodes, to the same value: the encoder's output for random entries, and what another
// encoder could send — keys in another order, repeated or unknown, nil values, strings as bin
// and the body as str, integers in wider encodings, an empty member list, an array-encoded
// entry — and fails where it fails.
func TestEntryDecodeMsgpackIsReflective(t *testing.T) {
	enc := func(build func(e *msgpack.Encoder)) []byte {
		var w appendWriter
		e := msgpack.NewEncoder(&w)
		configureEncoder(e)
		build(e)
		return w.b
	}
	cases := map[string][]byte{
		"reordered, repeated and unknown keys": enc(func(e *msgpack.Encoder) {
			e.EncodeMapLen(7)
			e.EncodeString("body")
			e.EncodeBytes([]byte("first"))
			e.EncodeString("future_field")
			e.EncodeMap(map[string]any{"a": []int{1, 2}})
			e.EncodeString("seq")
			e.EncodeUint64(7) // the widest encoding
			e.EncodeString("body")
			e.EncodeBytes([]byte("second"))
			e.EncodeString("members")
			e.EncodeArrayLen(0)
			e.EncodeString("kind")
			e.EncodeInt64(300) // beyond a Kind: truncated, as reflect's SetUint does
			e.EncodeString("time")
			e.EncodeInt8(-5)
		}),
		"nil values, bin strings, str body": enc(func(e *msgpack.Encoder) {
			e.EncodeMapLen(5)
			e.EncodeString("conv")
			e.EncodeNil()
			e.EncodeString("sender")
			e.EncodeBytes([]byte("bob"))
			e.EncodeString("body")
			e.EncodeString("as str")
			e.EncodeString("members")
			e.EncodeNil()
			e.EncodeBytes([]byte("msg_id")) // a key as bin
			e.EncodeString("1.2.3")
		}),
		"array-encoded": enc(func(e *msgpack.Encoder) {
			e.UseArrayEncodedStructs(true)
			e.Encode(reflectEntry(fixtureEntry))
		}),
		"empty map":           enc(func(e *msgpack.Encoder) { e.EncodeMapLen(0) }),
		"nil":                 enc(func(e *msgpack.Encoder) { e.EncodeNil() }),
		"a string":            enc(func(e *msgpack.Encoder) { e.EncodeString("x") }),
		"wrong value type":    enc(func(e *msgpack.Encoder) { e.EncodeMapLen(1); e.EncodeString("seq"); e.EncodeString("x") }),
		"truncated":           encodeWith(t, &fixtureEntry)[:10],
		"a key that is a map": enc(func(e *msgpack.Encoder) { e.EncodeMapLen(1); e.EncodeMapLen(0); e.EncodeUint(1) }),
		"source true, then nil": enc(func(e *msgpack.Encoder) {
			e.EncodeMapLen(3)
			e.EncodeString("source")
			e.EncodeBool(true)
			e.EncodeString("seq")
			e.EncodeUint(3)
			e.EncodeString("source")
			e.EncodeNil()
		}),
		"source false":        enc(func(e *msgpack.Encoder) { e.EncodeMapLen(1); e.EncodeString("source"); e.EncodeBool(false) }),
		"source as a number":  enc(func(e *msgpack.Encoder) { e.EncodeMapLen(1); e.EncodeString("source"); e.EncodeUint(1) }),
		"source as a string":  enc(func(e *msgpack.Encoder) { e.EncodeMapLen(1); e.EncodeString("source"); e.EncodeString("big") }),
		"receipt, conv_seq 0": encodeWith(t, &fixtureBigReceipt),
	}
	r := rand.New(rand.NewPCG(3, 4))
	for i := range 300 {
		e := randomEntry(r, Position(i))
		cases[fmt.Sprint("random ", i)] = encodeWith(t, &e)
	}
	for name, b := range cases {
		c, ref, cerr, rerr := decodeBoth(b)
		if (cerr == nil) != (rerr == nil) {
			t.Fatalf("%s: custom decoder: %v, reflective: %v", name, cerr, rerr)
		}
		if cerr == nil && !reflect.DeepEqual(c, ref) {
			t.Fatalf("%s: custom decoder:\n%#v\nreflective:\n%#v", name, c, ref)
		}
	}
}

// FuzzEntryDecodeMsgpack: on any bytes that pass the shape check every frame body passes first
// (CheckShape), the custom Entry decoder agrees with the reflective one.
func FuzzEntryDecodeMsgpack(f *testing.F) {
	var w appendWriter
	enc := msgpack.NewEncoder(&w)
	configureEncoder(enc)
	for _, e := range []Entry{fixtureEntry, fixtureRoleChange, fixtureFollow, fixtureBigReceipt, {}} {
		w.b = w.b[:0]
		enc.Encode(&e)
		f.Add(bytes.Clone(w.b))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if CheckShape(data) != nil {
			return
		}
		c, ref, cerr, rerr := decodeBoth(data)
		if (cerr == nil) != (rerr == nil) {
			t.Fatalf("custom decoder: %v, reflective: %v", cerr, rerr)
		}
		if cerr == nil && !reflect.DeepEqual(c, ref) {
			t.Fatalf("custom decoder:\n%#v\nreflective:\n%#v", c, ref)
		}
	})
}
