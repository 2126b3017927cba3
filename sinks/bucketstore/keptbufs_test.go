package bucketstore

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/syncpipe/syncpipe/model"
)

// TestHugeRowBuffersNotKept: after stream batches with a 12 MB row (its
// data and its row data, written, then read back as the row's previous
// state, ahead of the write and inside it), the buffers a stream writer
// keeps for its next batch are bounded by keptBufBytes: one huge row
// must not pin its size in memory for the life of the process.
func TestHugeRowBuffersNotKept(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, g := openStore(t)
	todos := registerTable(t, s, g.ID, "todos")
	sw := s.Writes().NewStreamWriter(g.ID, Fence{})
	huge := strings.Repeat("x", 12<<20)
	change := func(data string) []model.Change {
		return []model.Change{{Table: todos, Kind: model.Upsert, Key: key(1), RowData: []byte(data),
			Puts: []model.Put{put("1#b1[]", "todos", "a", `{"d":"`+data+`"}`)}}}
	}
	lsn := StreamProgress{}
	for i, cs := range [][]model.Change{change(huge), change(huge + "y"), change("small")} {
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

// TestUsualBatchBuffersKept: a stream batch of 15,000 usual rows (a todo's
// data, one bucket each) needs more than maxKeptBufBytes of current rows
// and of ops, and keeps those buffers for the next batch: regrowing them
// every batch cost a 1M-row transaction 9 % of its rate. (Storage version
// 2's rows are smaller: 10,000 of them needed 3.3 MiB, where version 1's
// needed more than 4.)
func TestUsualBatchBuffersKept(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, g := openStore(t)
	todos := registerTable(t, s, g.ID, "todos")
	sw := s.Writes().NewStreamWriter(g.ID, Fence{})
	data := `{"id":"0f8fad5b-d9cb-469f-a165-70867728950e","list_id":"7c9e6679-7425-40de-944b-e07fc1f90ae7","description":"` +
		strings.Repeat("d", 60) + `","completed":false,"created_at":"2026-12-07 03:00:00Z"}`
	cs := make([]model.Change, 15000)
	for i := range cs {
		cs[i] = model.Change{Table: todos, Kind: model.Upsert, Key: key(i), RowData: []byte(data),
			Puts: []model.Put{put(fmt.Sprintf(`1#by_list["%d"]`, i%1000), "todos", strconv.Itoa(i), data)}}
	}
	if _, err := sw.Write(ctx, cs, StreamProgress{LSN: 10}, nil); err != nil {
		t.Fatal(err)
	}
	b := &sw.bufs
	for name, c := range map[string]int{"cur": cap(b.cur.buf), "ops": cap(b.ops.buf)} {
		if c <= maxKeptBufBytes {
			t.Errorf("after a batch of %d rows the stream writer keeps %s of %d KiB, want the batch's size (> %d MiB)",
				len(cs), name, c>>10, maxKeptBufBytes>>20)
		}
	}
}
