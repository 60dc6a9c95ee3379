package store

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/cockroachdb/pebble/v2"
	"github.com/vmihailenco/msgpack/v5"
)

// uintValue encodes a number value.
func uintValue(v uint64) []byte { return binary.BigEndian.AppendUint64(nil, v) }

// getValue returns a copy of the value at key, or ok=false.
func getValue(r pebble.Reader, key []byte) ([]byte, bool, error) {
	v, closer, err := r.Get(key)
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("client: store read: %w", err)
	}
	v = append([]byte(nil), v...)
	return v, true, closer.Close()
}

// getUint reads a number value.
func getUint(r pebble.Reader, key []byte) (uint64, bool, error) {
	v, ok, err := getValue(r, key)
	if err != nil || !ok {
		return 0, ok, err
	}
	if len(v) != 8 {
		return 0, false, fmt.Errorf("client: number value of %d bytes at %x", len(v), key)
	}
	return binary.BigEndian.Uint64(v), true, nil
}

// scan calls fn for every key with prefix, in key order. fn must not keep k or v.
func scan(r pebble.Reader, prefix []byte, fn func(k, v []byte) error) (err error) {
	it, err := r.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: prefixEnd(prefix)})
	if err != nil {
		return fmt.Errorf("client: store scan: %w", err)
	}
	defer func() { err = errors.Join(err, it.Close()) }()
	for ok := it.First(); ok; ok = it.Next() {
		v, err := it.ValueAndErr()
		if err != nil {
			return err
		}
		if err := fn(it.Key(), v); err != nil {
			return err
		}
	}
	return it.Error()
}

// encode encodes a value: the version byte, then msgpack.
func encode(v any) ([]byte, error) {
	b, err := msgpack.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("client: encode %T: %w", v, err)
	}
	return append([]byte{valueVersion}, b...), nil
}

// decode decodes a value written by encode, refusing other versions.
func decode(b []byte, v any) error {
	if len(b) == 0 || b[0] != valueVersion {
		return fmt.Errorf("unknown value version (%d bytes)", len(b))
	}
	return msgpack.Unmarshal(b[1:], v)
}
