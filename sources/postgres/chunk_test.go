package postgres

import (
	"bytes"
	"testing"
)

// TestChunkBuilderKeepsNoHugeScratch: after a chunk with a 6 MiB text
// value, the builder's scratch buffers kept for the next chunk are bounded
// by maxScratchBytes, and the value came out whole.
func TestChunkBuilderKeepsNoHugeScratch(t *testing.T) {
	cb := newChunkBuilder(todosColumns, []int{0})
	cb.start(2)
	raw := todosRawBinary()
	huge := bytes.Repeat([]byte("t"), 6<<20)
	raw[2] = huge
	if err := cb.add(raw); err != nil {
		t.Fatal(err)
	}
	rows := cb.finish()
	if len(rows) != 1 || rows[0][2].Str() != string(huge) {
		t.Fatalf("got %d rows, want the one with its 6 MiB description", len(rows))
	}
	if c := max(cap(cb.text), cap(cb.blob)); c > maxScratchBytes {
		t.Errorf("the builder keeps a %d MiB scratch buffer, want ≤ %d MiB", c>>20, maxScratchBytes>>20)
	}
}
