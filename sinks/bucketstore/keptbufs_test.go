package bucketstore

import (
	"context"
	"strings"
	"testing"

	"github.com/syncpipe/syncpipe/stages"
)

// TestHugeRowBuffersNotKept: after stream batches with a 12 MB row (its
// data and its row data, written, then read back as the row's previous
// state, ahead of the write and inside it), the buffers a stream writer
// keeps for its next batch are bounded by maxKeptBufBytes: one huge row
// must not pin its size in memory for the life of the process.
func TestHugeRowBuffersNotKept(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, g := openStore(t)
	todos := registerTable(t, s, g.ID, "todos")
	sw := s.NewStreamWriter(g.ID, Fence{})
	huge := strings.Repeat("x", 12<<20)
	change := func(data string) []stages.Change {
		return []stages.Change{{Table: todos, Kind: stages.Upsert, Key: key(1), RowData: []byte(data),
			Puts: []stages.Put{put("1#b1[]", "todos", "a", `{"d":"`+data+`"}`)}}}
	}
	lsn := StreamProgress{}
	for i, cs := range [][]stages.Change{change(huge), change(huge + "y"), change("small")} {
		var prep *Prepared
		if i == 1 { // the huge previous state read ahead of the write
			var err error
			if prep, err = sw.Prepare(ctx, cs); err != nil || prep == nil {
				t.Fatalf("Prepare: %v, %v", prep, err)
			}
		}
		lsn.LSN += 10
		if _, err := sw.Write(ctx, cs, lsn, prep); err != nil {
			t.Fatal(err)
		}
		b := &sw.bufs
		for name, c := range map[string]int{"cur": cap(b.cur.buf), "ops": cap(b.ops.buf), "params": cap(b.params.buf), "prev.arena": cap(b.prev.arena)} {
			if c > maxKeptBufBytes {
				t.Errorf("after batch %d the stream writer keeps %s of %d MiB, want ≤ %d MiB", i, name, c>>20, maxKeptBufBytes>>20)
			}
		}
		for sw.prepared.Len() > 0 {
			p, _ := sw.prepared.Get()
			if c := cap(p.prev.arena); c > maxKeptBufBytes {
				t.Errorf("after batch %d a spare Prepared keeps an arena of %d MiB, want ≤ %d MiB", i, c>>20, maxKeptBufBytes>>20)
			}
		}
	}
}
