package config

import "testing"

func TestParseByteSize(t *testing.T) {
	for _, c := range []struct {
		in   string
		want ByteSize
	}{
		{"0", 0}, {"512", 512}, {"512B", 512}, {"1kB", 1000}, {"1KiB", 1024}, {"16MiB", 16 << 20},
		{"16mib", 16 << 20}, {"1.5GiB", 3 << 29}, {"2 MB", 2e6}, {"1_000", 1000}, {" 1TiB ", 1 << 40},
	} {
		got, err := ParseByteSize(c.in)
		if err != nil || got != c.want {
			t.Errorf("ParseByteSize(%q) = %d, %v; want %d", c.in, got, err, c.want)
		}
	}
	for _, in := range []string{"", "MiB", "-1", "16 parsecs", "1.2.3MB", "99999999999TiB"} {
		if got, err := ParseByteSize(in); err == nil {
			t.Errorf("ParseByteSize(%q) = %d, want an error", in, got)
		}
	}
}

func TestByteSizeString(t *testing.T) {
	for _, c := range []struct {
		in   ByteSize
		want string
	}{{0, "0B"}, {1000, "1000B"}, {1024, "1KiB"}, {16 * MiB, "16MiB"}, {3 * GiB, "3GiB"}, {1536, "1536B"}} {
		if got := c.in.String(); got != c.want {
			t.Errorf("%d.String() = %q, want %q", int64(c.in), got, c.want)
		}
		var back ByteSize
		if err := back.UnmarshalText([]byte(c.in.String())); err != nil || back != c.in {
			t.Errorf("round trip of %s: %d, %v", c.in, back, err)
		}
	}
}
