package postgres

import (
	"encoding/binary"
	"testing"
	"time"
)

// The expected strings were read from PowerSync's sync-rules package
// (DateTimeValue and TimeValue through applyRowContext, values built as its
// Postgres adapter builds them) under edition 1, edition 3, edition 3 with
// timestamps_iso8601: false and with timestamp_max_precision.
var timeStyleCases = []struct {
	oid  uint32
	text string
	want [4]string // TimeLegacy, TimeISOMicros, TimeISOMillis, TimeISOSeconds; "" = NULL
}{
	{oidTimestamptz, "2024-01-02 03:04:05.123+00", [4]string{"2024-01-02 03:04:05.123Z", "2024-01-02T03:04:05.123000Z", "2024-01-02T03:04:05.123Z", "2024-01-02T03:04:05Z"}},
	{oidTimestamptz, "2024-01-02 03:04:05+00", [4]string{"2024-01-02 03:04:05Z", "2024-01-02T03:04:05.000000Z", "2024-01-02T03:04:05.000Z", "2024-01-02T03:04:05Z"}},
	{oidTimestamptz, "2024-01-02 03:04:05.123456+00", [4]string{"2024-01-02 03:04:05.123456Z", "2024-01-02T03:04:05.123456Z", "2024-01-02T03:04:05.123Z", "2024-01-02T03:04:05Z"}},
	{oidTimestamptz, "2024-01-02 05:04:05.1+02", [4]string{"2024-01-02 03:04:05.1Z", "2024-01-02T03:04:05.100000Z", "2024-01-02T03:04:05.100Z", "2024-01-02T03:04:05Z"}},
	{oidTimestamptz, "infinity", [4]string{"9999-12-31 23:59:59Z", "9999-12-31T23:59:59.000000Z", "9999-12-31T23:59:59.000Z", "9999-12-31T23:59:59Z"}},
	{oidTimestamptz, "-infinity", [4]string{"0000-01-01 00:00:00Z", "0000-01-01T00:00:00.000000Z", "0000-01-01T00:00:00.000Z", "0000-01-01T00:00:00Z"}},
	{oidTimestamptz, "0044-03-15 10:00:00+00 BC", [4]string{}},
	{oidTimestamp, "2024-01-02 03:04:05.123", [4]string{"2024-01-02 03:04:05.123", "2024-01-02T03:04:05.123000", "2024-01-02T03:04:05.123", "2024-01-02T03:04:05"}},
	{oidTimestamp, "2024-01-02 03:04:05", [4]string{"2024-01-02 03:04:05", "2024-01-02T03:04:05.000000", "2024-01-02T03:04:05.000", "2024-01-02T03:04:05"}},
	{oidTimestamp, "2024-01-02 03:04:05.123456", [4]string{"2024-01-02 03:04:05.123456", "2024-01-02T03:04:05.123456", "2024-01-02T03:04:05.123", "2024-01-02T03:04:05"}},
	{oidTimestamp, "infinity", [4]string{"infinity", "9999-12-31T23:59:59.000000", "9999-12-31T23:59:59.000", "9999-12-31T23:59:59"}},
	{oidTimestamp, "-infinity", [4]string{"-infinity", "0000-01-01T00:00:00.000000", "0000-01-01T00:00:00.000", "0000-01-01T00:00:00"}},
	{oidTimestamp, "10000-01-01 00:00:00", [4]string{"10000-01-01 00:00:00", "10000-01-01T00:00:00.000000", "10000-01-01T00:00:00.000", "10000-01-01T00:00:00"}},
	{oidTimestamp, "0044-03-15 10:00:00 BC", [4]string{"0044-03-15 10:00:00 BC", "", "", ""}},
	{oidTime, "12:13:14", [4]string{"12:13:14", "12:13:14.000000", "12:13:14.000", "12:13:14"}},
	{oidTime, "12:13:14.5", [4]string{"12:13:14.5", "12:13:14.500000", "12:13:14.500", "12:13:14"}},
	{oidTime, "12:13:14.123456", [4]string{"12:13:14.123456", "12:13:14.123456", "12:13:14.123", "12:13:14"}},
	{oidTime, "24:00:00", [4]string{"24:00:00", "24:00:00.000000", "24:00:00.000", "24:00:00"}},
	// timetz and date are plain text in PowerSync whatever the options.
	{1266, "12:13:14+05:30", [4]string{"12:13:14+05:30", "12:13:14+05:30", "12:13:14+05:30", "12:13:14+05:30"}},
	{1082, "2024-01-02", [4]string{"2024-01-02", "2024-01-02", "2024-01-02", "2024-01-02"}},
}

var allStyles = [4]TimeStyle{TimeLegacy, TimeISOMicros, TimeISOMillis, TimeISOSeconds}

func TestTimeStylesText(t *testing.T) {
	for _, c := range timeStyleCases {
		for si, st := range allStyles {
			v, err := DecodeText(Column{Name: "c", TypeOID: c.oid, Times: st}, []byte(c.text))
			if err != nil {
				t.Errorf("%d %q style %d: %v", c.oid, c.text, st, err)
				continue
			}
			if got, want := v.Str(), c.want[si]; got != want || v.IsNull() != (want == "") {
				t.Errorf("%d %q style %d = %q (null %v), want %q", c.oid, c.text, st, got, v.IsNull(), want)
			}
		}
	}
}

// TestTimeStylesBinary checks the snapshot's binary timestamptz path
// against the text path in every style.
func TestTimeStylesBinary(t *testing.T) {
	for _, c := range timeStyleCases {
		if c.oid != oidTimestamptz || c.want[0] == "" {
			continue
		}
		var micros int64
		switch c.text {
		case "infinity":
			micros = 1<<63 - 1
		case "-infinity":
			micros = -1 << 63
		default:
			ts, err := time.Parse("2006-01-02 15:04:05.999999-07", c.text)
			if err != nil {
				t.Fatal(err)
			}
			micros = ts.UnixMicro() - pgEpochUnixMicros
		}
		var raw [8]byte
		binary.BigEndian.PutUint64(raw[:], uint64(micros))
		for si, st := range allStyles {
			v, err := decodeBinary(Column{Name: "c", TypeOID: oidTimestamptz, Times: st}, raw[:])
			if err != nil || v.Str() != c.want[si] {
				t.Errorf("binary %q style %d = %q, %v; want %q", c.text, st, v.Str(), err, c.want[si])
			}
		}
	}
}

func TestTimeStylesArrays(t *testing.T) {
	cases := []struct {
		elem uint32
		text string
		want [2]string // TimeLegacy, TimeISOMicros
	}{
		{oidTimestamptz, `{"2024-01-02 03:04:05+00","2024-01-02 03:04:05.12345+00",NULL}`,
			[2]string{`["2024-01-02 03:04:05Z","2024-01-02 03:04:05.12345Z",null]`, `["2024-01-02T03:04:05.000000Z","2024-01-02T03:04:05.123450Z",null]`}},
		{oidTimestamp, `{"2024-01-02 03:04:05.5",infinity}`,
			[2]string{`["2024-01-02 03:04:05.5","infinity"]`, `["2024-01-02T03:04:05.500000","9999-12-31T23:59:59.000000"]`}},
		{oidTime, `{12:13:14,NULL}`, [2]string{`["12:13:14",null]`, `["12:13:14.000000",null]`}},
		{1082, `{2024-01-02}`, [2]string{`["2024-01-02"]`, `["2024-01-02"]`}},
	}
	for _, c := range cases {
		for si, st := range allStyles[:2] {
			col := Column{Name: "a", TypeOID: 1, IsArray: true, ElemOID: c.elem, Times: st}
			v, err := DecodeText(col, []byte(c.text))
			if err != nil || v.Str() != c.want[si] {
				t.Errorf("%q style %d = %q, %v; want %q", c.text, st, v.Str(), err, c.want[si])
			}
		}
	}
}

func TestTimeStyleFor(t *testing.T) {
	for _, c := range []struct {
		iso    bool
		digits int
		want   TimeStyle
	}{{false, 9, TimeLegacy}, {true, 9, TimeISOMicros}, {true, 6, TimeISOMicros}, {true, 3, TimeISOMillis}, {true, 0, TimeISOSeconds}} {
		if got := TimeStyleFor(c.iso, c.digits); got != c.want {
			t.Errorf("TimeStyleFor(%v, %d) = %d, want %d", c.iso, c.digits, got, c.want)
		}
	}
}

// TestTimeStyleNoAlloc keeps the per-value mode switch free of
// allocations on the snapshot's append path.
func TestTimeStyleNoAlloc(t *testing.T) {
	buf := make([]byte, 0, 128)
	ts, tm := []byte("2024-01-02 03:04:05.5"), []byte("12:13:14")
	n := testing.AllocsPerRun(100, func() {
		b, _ := appendTimestamptzValue(buf[:0], 1704164645123456, TimeISOMillis)
		b, _ = appendTemporalISO(b, codecTimestamp, ts, TimeISOMicros)
		_, _ = appendTemporalISO(b, codecTime, tm, TimeISOMicros)
	})
	if n != 0 {
		t.Errorf("%v allocations per run", n)
	}
}
