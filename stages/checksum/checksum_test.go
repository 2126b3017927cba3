package checksum

import (
	"crypto/sha256"
	"encoding/binary"
	"strings"
	"testing"

	"github.com/google/uuid"
)

// The SPEC §3 vectors, taken from PowerSync's own storage test snapshots.
func TestPutVectors(t *testing.T) {
	cases := []struct {
		typ, id, data string
		want          uint32
		signed        int32
	}{
		{"test", "a", `{"id":"a","description":"Test 1"}`, 2582164875, -1712802421},
		{"test", "b", `{"id":"b","description":"Test 2"}`, 3003552978, -1291414318},
		{"test", "test1", `{"id":"test1","description":"test1"}`, 2871785649, int32(-1423181647)},
	}
	for _, c := range cases {
		if got := Put(c.typ, c.id, []byte(c.data)); got != c.want {
			t.Errorf("Put(%q,%q,%q) = %d, want %d", c.typ, c.id, c.data, got, c.want)
		}
		if got := int32(c.want); got != c.signed { // checkpoint lines carry int32, as JavaScript sums
			t.Errorf("int32(%d) = %d, want %d", c.want, got, c.signed)
		}
	}
}

func TestRemoveVector(t *testing.T) {
	var k ReplicaKey
	k.String("id", "test1")
	id := k.UUID()
	if id.String() != "b40bd986-036a-51c7-ad7d-789ecb75e38c" {
		t.Fatalf("replica id = %s", id)
	}
	// Must agree with the library's UUIDv5.
	if lib := uuid.NewSHA1(ReplicaNamespace, k.Document()); lib != id {
		t.Fatalf("ReplicaID %s != uuid.NewSHA1 %s", id, lib)
	}
	sub := Subkey("6544e3899293153fa7b38331", id)
	if sub != "6544e3899293153fa7b38331/b40bd986-036a-51c7-ad7d-789ecb75e38c" {
		t.Fatalf("subkey = %s", sub)
	}
	if got := Remove(sub); got != 2872534815 {
		t.Fatalf("Remove = %d, want 2872534815", got)
	}
}

// PowerSync's subkey for a non-UUID replica id: uuid5 of BSON {table, id}.
func TestStringReplicaSubkeyVector(t *testing.T) {
	var k ReplicaKey
	k.String("table", "6544e3899293153fa7b38331")
	k.String("id", "t1")
	if got := k.UUID().String(); got != "02d285ac-4f96-5124-8fba-c6d1df992dd1" {
		t.Fatalf("got %s", got)
	}
}

func TestBSONEncoding(t *testing.T) {
	var k ReplicaKey
	k.String("id", "test1")
	want := []byte{
		0x13, 0, 0, 0, // total length 19
		0x02, 'i', 'd', 0, 6, 0, 0, 0, 't', 'e', 's', 't', '1', 0,
		0,
	}
	if got := k.Document(); string(got) != string(want) {
		t.Fatalf("doc = %x, want %x", got, want)
	}
	k.Reset()
	k.Int64("a", -2)
	k.Double("b", 1.5)
	k.Null("c")
	k.Binary("d", []byte{9, 8})
	doc := k.Document()
	if int(binary.LittleEndian.Uint32(doc)) != len(doc) || doc[len(doc)-1] != 0 {
		t.Fatalf("bad framing %x", doc)
	}
	want2 := "" +
		"\x12a\x00\xfe\xff\xff\xff\xff\xff\xff\xff" +
		"\x01b\x00\x00\x00\x00\x00\x00\x00\xf8\x3f" +
		"\x0ac\x00" +
		"\x05d\x00\x02\x00\x00\x00\x00\x09\x08"
	if string(doc[4:len(doc)-1]) != want2 {
		t.Fatalf("elements = %q\nwant       %q", doc[4:len(doc)-1], want2)
	}
	// Document is idempotent and elements can still be appended afterwards.
	if string(k.Document()) != string(doc) {
		t.Fatal("Document not idempotent")
	}
	var empty ReplicaKey
	if got := empty.Document(); string(got) != "\x05\x00\x00\x00\x00" {
		t.Fatalf("empty doc = %x", got)
	}
}

func TestLargeInputsMatchDirectHash(t *testing.T) {
	data := []byte(strings.Repeat("x", 5000))
	sum := sha256.Sum256([]byte("put.t.i." + string(data)))
	if got, want := Put("t", "i", data), binary.LittleEndian.Uint32(sum[:4]); got != want {
		t.Fatalf("large Put = %d want %d", got, want)
	}
	long := strings.Repeat("k", 1000)
	sum = sha256.Sum256([]byte("delete." + long))
	if got, want := Remove(long), binary.LittleEndian.Uint32(sum[:4]); got != want {
		t.Fatalf("large Remove = %d want %d", got, want)
	}
	// Boundary around the stack buffer.
	for n := stackLimit - 12; n <= stackLimit-8; n++ {
		d := []byte(strings.Repeat("y", n))
		s := sha256.Sum256([]byte("put.a.b." + string(d)))
		if Put("a", "b", d) != binary.LittleEndian.Uint32(s[:4]) {
			t.Fatalf("mismatch at data length %d", n)
		}
	}
}

func TestAddWraps(t *testing.T) {
	if Add(0xffffffff, 2) != 1 {
		t.Fatal("Add does not wrap")
	}
	if Add(2582164875, 3003552978) != uint32((2582164875+3003552978)%(1<<32)) {
		t.Fatal("Add wrong")
	}
	if FromInt64(2582164875+3003552978) != Add(2582164875, 3003552978) {
		t.Fatal("FromInt64 disagrees with Add")
	}
	if FromInt64(-1) != 0xffffffff {
		t.Fatal("FromInt64(-1)")
	}
}

func TestNoAllocs(t *testing.T) {
	data := []byte(`{"id":"a","description":"Test 1"}`)
	big := []byte(strings.Repeat("z", 4000))
	var k ReplicaKey
	k.String("id", "warm")
	k.Reset()
	var buf []byte = make([]byte, 0, 128)
	allocs := testing.AllocsPerRun(200, func() {
		_ = Put("todos", "a", data)
		_ = Put("todos", "a", big)
		_ = Remove("6544e3899293153fa7b38331/b40bd986-036a-51c7-ad7d-789ecb75e38c")
		k.Reset()
		k.String("id", "abc")
		buf = AppendSubkey(buf[:0], "tbl", k.UUID())
	})
	if allocs != 0 {
		t.Fatalf("allocs per run = %v, want 0", allocs)
	}
}

func TestLargeReplicaKey(t *testing.T) {
	var k ReplicaKey
	k.String("id", strings.Repeat("q", 2000))
	if got, want := k.UUID(), uuid.NewSHA1(ReplicaNamespace, k.Document()); got != want {
		t.Fatalf("large replica id %s != %s", got, want)
	}
}
