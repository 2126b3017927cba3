package config

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// ByteSize is a size in bytes. In YAML and env it is either a plain integer
// (bytes) or a number with a unit, so operators can write "16MiB" instead of
// counting digits. Units are case-insensitive: B; kB, MB, GB, TB (powers of
// 1000); KiB, MiB, GiB, TiB (powers of 1024). A fraction such as "1.5MiB" is
// allowed and rounded down to whole bytes.
type ByteSize int64

// Common sizes, for defaults and tests.
const (
	KiB ByteSize = 1 << 10
	MiB ByteSize = 1 << 20
	GiB ByteSize = 1 << 30
)

var byteUnits = map[string]float64{
	"":    1,
	"b":   1,
	"kb":  1e3,
	"mb":  1e6,
	"gb":  1e9,
	"tb":  1e12,
	"kib": 1 << 10,
	"mib": 1 << 20,
	"gib": 1 << 30,
	"tib": 1 << 40,
}

// ParseByteSize parses "16MiB", "1.5GB", "512" (bytes) and similar. Negative
// sizes are rejected because no setting in syncpipe has a meaning for them.
func ParseByteSize(s string) (ByteSize, error) {
	t := strings.TrimSpace(s)
	i := 0
	for i < len(t) && (t[i] >= '0' && t[i] <= '9' || t[i] == '.' || t[i] == '_') {
		i++
	}
	num := strings.ReplaceAll(t[:i], "_", "")
	unit := strings.ToLower(strings.TrimSpace(t[i:]))
	if num == "" {
		return 0, fmt.Errorf("invalid byte size %q: want a number with an optional unit such as 16MiB", s)
	}
	mult, ok := byteUnits[unit]
	if !ok {
		return 0, fmt.Errorf("invalid byte size %q: unknown unit %q (use B, kB, MB, GB, KiB, MiB, GiB)", s, t[i:])
	}
	if !strings.Contains(num, ".") {
		n, err := strconv.ParseInt(num, 10, 64)
		if err == nil && n <= math.MaxInt64/int64(mult) {
			return ByteSize(n * int64(mult)), nil
		}
	}
	f, err := strconv.ParseFloat(num, 64)
	if err != nil {
		return 0, fmt.Errorf("invalid byte size %q: %w", s, err)
	}
	v := f * mult
	if v >= math.MaxInt64 {
		return 0, fmt.Errorf("invalid byte size %q: too large", s)
	}
	return ByteSize(v), nil
}

// String prints the size with the largest binary unit that divides it
// exactly, so defaults in the reference read "16MiB" rather than 16777216.
func (b ByteSize) String() string {
	units := []struct {
		name string
		size ByteSize
	}{{"TiB", 1 << 40}, {"GiB", GiB}, {"MiB", MiB}, {"KiB", KiB}}
	for _, u := range units {
		if b != 0 && b%u.size == 0 {
			return strconv.FormatInt(int64(b/u.size), 10) + u.name
		}
	}
	return strconv.FormatInt(int64(b), 10) + "B"
}

// MarshalText makes sizes round-trip through YAML/JSON in the unit form.
func (b ByteSize) MarshalText() ([]byte, error) { return []byte(b.String()), nil }

// UnmarshalText lets koanf decode "16MiB"-style strings into a ByteSize.
func (b *ByteSize) UnmarshalText(text []byte) error {
	v, err := ParseByteSize(string(text))
	if err != nil {
		return err
	}
	*b = v
	return nil
}
