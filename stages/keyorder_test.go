package stages

import (
	"bytes"
	"cmp"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/google/uuid"

	"github.com/syncpipe/syncpipe/model"
)

// monotone fails t when a ≤ b (ord) but KeyOrderOf(a) > KeyOrderOf(b).
func monotone(t *testing.T, a, b model.Value, ord int) {
	t.Helper()
	ka, kb := KeyOrderOf(a), KeyOrderOf(b)
	if ord <= 0 && ka > kb || ord >= 0 && ka < kb {
		t.Fatalf("KeyOrderOf(%v) = %d, KeyOrderOf(%v) = %d: not in the values' order (%d)", a, ka, b, kb, ord)
	}
}

func FuzzKeyOrderInteger(f *testing.F) {
	for _, n := range []int64{0, 1, -1, 2, 1<<25 - 1, 1 << 25, 1<<26 - 1, 1 << 26, 1<<26 + 1, 1 << 31, math.MaxInt64, math.MinInt64, math.MinInt64 + 1} {
		f.Add(n, n+1)
		f.Add(n, -n)
	}
	f.Fuzz(func(t *testing.T, a, b int64) {
		monotone(t, model.Int(a), model.Int(b), cmp.Compare(a, b))
	})
}

func FuzzKeyOrderReal(f *testing.F) {
	for _, x := range []float64{0, math.Copysign(0, -1), 1, -1, math.Inf(1), math.Inf(-1), math.SmallestNonzeroFloat64, -math.MaxFloat64} {
		f.Add(x, -x)
		f.Add(x, x*2)
	}
	f.Fuzz(func(t *testing.T, a, b float64) {
		if math.IsNaN(a) || math.IsNaN(b) {
			t.Skip()
		}
		monotone(t, model.Real(a), model.Real(b), cmp.Compare(a, b))
	})
}

func FuzzKeyOrderText(f *testing.F) {
	for _, s := range []string{"", "a", "ab", "abcd", "abcde", "\x00", "\xff\xff\xff\xff", "3f2a0000-0000"} {
		f.Add([]byte(s), []byte(s+"\x00"))
		f.Add([]byte(s), []byte("b"))
	}
	f.Fuzz(func(t *testing.T, a, b []byte) {
		ord := bytes.Compare(a, b)
		monotone(t, model.Text(string(a)), model.Text(string(b)), ord)
		monotone(t, model.Blob(a), model.Blob(b), ord)
	})
}

// TestKeyOrderOf pins values whose order keys matter: integers below 2^26
// keep their exact order (consecutive serial keys get consecutive storage
// keys), the kinds map onto the whole signed range, and other kinds get 0.
func TestKeyOrderOf(t *testing.T) {
	for n := int64(-70); n < 70; n++ {
		if KeyOrderOf(model.Int(n)) >= KeyOrderOf(model.Int(n+1)) {
			t.Fatalf("integers %d and %d share an order key", n, n+1)
		}
	}
	for _, n := range []int64{1<<26 - 2, -(1<<26 - 1)} {
		if KeyOrderOf(model.Int(n)) >= KeyOrderOf(model.Int(n+1)) {
			t.Fatalf("integers %d and %d share an order key", n, n+1)
		}
	}
	for _, tc := range []struct {
		v    model.Value
		want int32
	}{
		{model.Int(0), 0},
		{model.Int(math.MaxInt64), math.MaxInt32},
		{model.Int(math.MinInt64), math.MinInt32},
		{model.Text(""), math.MinInt32},
		{model.Blob([]byte{0x80}), 0},
		{model.Real(math.Inf(-1)), int32(0x000fffff ^ -1<<31)},
		{model.Text("\xff\xff\xff\xff\xff"), math.MaxInt32},
		{model.Text("3f2a-…"), int32(0x33663261 ^ -1<<31)},
		{model.Null(), 0},
		{model.JSON(`{"a":1}`), 0},
	} {
		if got := KeyOrderOf(tc.v); got != tc.want {
			t.Errorf("KeyOrderOf(%v) = %#x, want %#x", tc.v, got, tc.want)
		}
	}
}

// TestKeyOrderUUIDText: UUID keys, which arrive as text, get storage keys
// in their order from their first 4 hex digits (16 bits: at 10M rows about
// 150 rows share one, inserted among themselves at random but all into
// the same leaf or two of the primary key).
func TestKeyOrderUUIDText(t *testing.T) {
	rng := rand.New(rand.NewPCG(4, 7))
	ids := make([]string, 100000)
	for i := range ids {
		var b [16]byte
		for j := range b {
			b[j] = byte(rng.Uint32())
		}
		ids[i] = uuid.UUID(b).String()
	}
	slices.Sort(ids)
	for i := 1; i < len(ids); i++ {
		a, b := KeyOrderOf(model.Text(ids[i-1])), KeyOrderOf(model.Text(ids[i]))
		if a > b || a == b && ids[i-1][:4] != ids[i][:4] {
			t.Fatalf("%s → %d, %s → %d: want ascending storage keys, equal only within 4 hex digits", ids[i-1], a, ids[i], b)
		}
	}
	// Other text keeps its first 4 bytes' order.
	if a, b := KeyOrderOf(model.Text("mome")), KeyOrderOf(model.Text("momf")); a >= b {
		t.Fatalf("mome → %d, momf → %d: want the 4th byte to count", a, b)
	}
}

func TestKeyOrderAllocates(t *testing.T) {
	vs := []model.Value{model.Int(12345678), model.Text("3f2a0000"), model.Blob([]byte("abc")), model.Real(2.5)}
	if n := testing.AllocsPerRun(100, func() {
		for _, v := range vs {
			_ = KeyOrderOf(v)
		}
	}); n != 0 {
		t.Fatalf("KeyOrderOf allocates %v times", n)
	}
}
