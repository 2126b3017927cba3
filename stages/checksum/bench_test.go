package checksum

import (
	"strings"
	"testing"
)

// A 150-byte PUT, the size of a typical todos row (SPEC §9).
func BenchmarkPut150(b *testing.B) {
	data := []byte(`{"id":"0b7ad3a6-5f7e-4c1b-9d0a-1f2e3d4c5b6a","list_id":"9c8b7a6f-5e4d-4c3b-2a19-0f8e7d6c5b4a","description":"` +
		strings.Repeat("d", 14) + `"}`)
	typ, id := "todos", "0b7ad3a6-5f7e-4c1b-9d0a-1f2e3d4c5b6a"
	if n := len("put.") + len(typ) + 1 + len(id) + 1 + len(data); n < 150 {
		b.Fatalf("input only %d bytes", n)
	}
	b.ReportAllocs()
	var s uint32
	for b.Loop() {
		s += Put(typ, id, data)
	}
	_ = s
}

func BenchmarkRemove(b *testing.B) {
	sub := "6544e3899293153fa7b38331/b40bd986-036a-51c7-ad7d-789ecb75e38c"
	b.ReportAllocs()
	for b.Loop() {
		_ = Remove(sub)
	}
}

func BenchmarkReplicaID(b *testing.B) {
	var k ReplicaKey
	b.ReportAllocs()
	for b.Loop() {
		k.Reset()
		k.String("id", "0b7ad3a6-5f7e-4c1b-9d0a-1f2e3d4c5b6a")
		_ = k.UUID()
	}
}
