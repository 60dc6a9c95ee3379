package main

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// sizeUnits are the units a size setting may carry, largest first.
var sizeUnits = []struct {
	suffix string
	size   int64
}{{"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}, {"B", 1}}

// parseSize reads a size in bytes: a number, or a number with a unit (KiB, MiB, GiB, TiB; B),
// such as "900MiB", "1.5GiB" or "2147483648". The one parser of sizes in settings (memory_limit,
// min_free_disk).
func parseSize(s string) (int64, error) {
	num, unit := s, int64(1)
	for _, u := range sizeUnits {
		if n, ok := strings.CutSuffix(s, u.suffix); ok {
			num, unit = n, u.size
			break
		}
	}
	f, err := strconv.ParseFloat(strings.TrimSpace(num), 64)
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) || math.Abs(f*float64(unit)) >= math.MaxInt64 {
		return 0, fmt.Errorf("%q is not a size such as 900MiB, 2GiB or 1073741824 (bytes)", s)
	}
	return int64(f * float64(unit)), nil
}

// byteSize is a size setting in bytes (min_free_disk). The file and the flags take a number of
// bytes or a size with a unit (parseSize); it prints with the largest unit that divides it
// exactly ("512MiB"), or in bytes.
type byteSize int64

// String formats b with the largest unit that divides it exactly.
func (b byteSize) String() string {
	for _, u := range sizeUnits[:len(sizeUnits)-1] {
		if b != 0 && int64(b)%u.size == 0 {
			return strconv.FormatInt(int64(b)/u.size, 10) + u.suffix
		}
	}
	return strconv.FormatInt(int64(b), 10)
}

// Set implements flag.Value.
func (b *byteSize) Set(s string) error { return b.UnmarshalText([]byte(s)) }

// MarshalText implements encoding.TextMarshaler.
func (b byteSize) MarshalText() ([]byte, error) { return []byte(b.String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler; a TOML integer arrives here as its digits.
func (b *byteSize) UnmarshalText(text []byte) error {
	v, err := parseSize(string(text))
	if err != nil {
		return err
	}
	*b = byteSize(v)
	return nil
}
