package bucketstore

import (
	"context"
	"fmt"
	"maps"
	"strings"
	"testing"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"

	"github.com/syncpipe/syncpipe/model"
)

// syncedBucket is one bucket as a client holds it: rows by
// "type/id/subkey" and the checksum of the ops it applied.
type syncedBucket struct {
	after int64
	sum   uint32
	rows  map[string]string
	ops   int
}

// download reads b's ops after b.after up to checkpoint cp, at most
// limit per read (all when pages is 0, else that many reads), applying
// them as a PowerSync client does.
func (b *syncedBucket) download(t *testing.T, s *Store, group int, bucket string, cp int64, limit, pages int) {
	t.Helper()
	if b.rows == nil {
		b.rows = map[string]string{}
	}
	for n := 0; pages == 0 || n < pages; n++ {
		more, err := s.Reader().ReadBucketData(context.Background(), group, cp, []BucketRequest{{Bucket: bucket, After: b.after}}, limit,
			func(r *OpRow) error {
				k := r.ObjectType + "/" + r.ObjectID + "/" + r.Subkey
				switch r.Op {
				case OpPut:
					b.rows[k] = string(r.Data)
					b.sum += r.Checksum
				case OpRemove:
					delete(b.rows, k)
					b.sum += r.Checksum
				case OpMove:
					b.sum += r.Checksum
				case OpClear:
					clear(b.rows)
					b.sum = r.Checksum
				}
				b.after = r.OpID
				b.ops++
				return nil
			})
		if err != nil {
			t.Fatal(err)
		}
		if !more {
			return
		}
	}
}

// TestCompactKeepsChecksums: rows updated many times, some moved to
// another bucket and some deleted, compact to one op per row plus a
// CLEAR; the bucket checksums (fresh and cached) do not change; a client
// that synced before compaction, one that syncs after and one whose
// download compaction interrupted all end up holding the same rows with
// the stored checksum.
func TestCompactKeepsChecksums(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, g, todos := streamingStore(t)
	w := newWriter(t, s, g.ID)
	const rows, updates = 40, 25
	bk, other := "1#b[]", "1#c[]"
	var lsn pglogrepl.LSN
	commit := func(cs []model.Change) int64 {
		t.Helper()
		res, err := w.WriteChanges(ctx, cs)
		if err != nil {
			t.Fatal(err)
		}
		lsn++
		cp, ok, err := s.Writes().Commit(ctx, g.ID, lsn, res.MaxOpID)
		if err != nil || !ok {
			t.Fatalf("commit: %v (published %v)", err, ok)
		}
		return cp.OpID
	}
	var cp, cpMid int64
	var stale syncedBucket // reads a little of an old checkpoint before compaction, the rest after
	for u := range updates {
		if u == updates/2 {
			cpMid = cp
			stale.download(t, s, g.ID, bk, cpMid, 50, 1)
		}
		var cs []model.Change
		for i := range rows {
			b := bk
			if i%10 == 0 && u >= updates-5 {
				b = other // moved away late: REMOVE in bk
			}
			c := model.Change{Table: todos, Kind: model.Upsert, Key: key(i),
				Puts: []model.Put{put(b, "todos", fmt.Sprint(i), fmt.Sprintf(`{"v":%d}`, u))}}
			if i%7 == 3 && u == updates-1 {
				c = model.Change{Table: todos, Kind: model.Delete, Key: key(i)}
			}
			cs = append(cs, c)
		}
		cp = commit(cs)
	}
	before := len(ops(t, s, g.ID))
	// early synced at cp; partial has read a third of bk at cp.
	var early, partial syncedBucket
	early.download(t, s, g.ID, bk, cp, 100, 0)
	partial.download(t, s, g.ID, bk, cp, before/6, 1)
	cache := s.Reader().NewChecksumCache(100)
	sums, err := cache.Checksums(ctx, g.ID, cp, []string{bk, other})
	if err != nil {
		t.Fatal(err)
	}
	if early.sum != sums[0].Checksum {
		t.Fatalf("before compaction: the client's sum %d, storage's %d", early.sum, sums[0].Checksum)
	}

	st, err := s.Compactor().Compact(ctx, g.ID, CompactOptions{BatchOps: 64})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("compacted %d ops: %+v", before, st)
	after := ops(t, s, g.ID)
	perBucket := map[string]int{}
	clears := 0
	for _, o := range after {
		perBucket[o.Bucket]++
		if o.Op == OpClear {
			clears++
		}
	}
	live := map[string]int{}
	for k := range early.rows {
		live[k]++
	}
	if perBucket[bk] > len(early.rows)+1 || clears == 0 || st.Moved == 0 || st.Cleared == 0 || st.UpTo != cp {
		t.Fatalf("after compaction bucket %s holds %d ops (%d rows live), %d CLEARs; stats %+v", bk, perBucket[bk], len(early.rows), clears, st)
	}
	for _, fresh := range []*ChecksumCache{cache, s.Reader().NewChecksumCache(100)} {
		got, err := fresh.Checksums(ctx, g.ID, cp, []string{bk, other})
		if err != nil {
			t.Fatal(err)
		}
		for i := range got {
			if got[i].Checksum != sums[i].Checksum {
				t.Fatalf("bucket %s checksum %d after compaction, %d before", got[i].Bucket, got[i].Checksum, sums[i].Checksum)
			}
		}
	}
	// A client that read part of an older checkpoint before compaction
	// and the rest after cannot complete it: CLEARs took ops it had not
	// read, beyond its checkpoint. The floor, read after its reads, says so.
	stale.download(t, s, g.ID, bk, cpMid, 50, 0)
	if v, err := s.Reader().ReadValidity(ctx, g.ID); err != nil || v.CompactFloor <= cpMid || v.CompactFloor != st.UpTo || !v.Serving {
		t.Fatalf("validity %+v (%v), want compaction floor %d, above the stale client's checkpoint %d, and serving", v, err, st.UpTo, cpMid)
	}
	if stale.sum == sums[0].Checksum && maps.Equal(stale.rows, early.rows) {
		t.Log("the stale client happened to read nothing compaction took")
	}
	var late syncedBucket
	late.download(t, s, g.ID, bk, cp, 7, 0)
	partial.download(t, s, g.ID, bk, cp, 7, 0)
	for name, c := range map[string]*syncedBucket{"late": &late, "interrupted": &partial} {
		if c.sum != sums[0].Checksum || !maps.Equal(c.rows, early.rows) {
			t.Fatalf("%s client: sum %d (want %d), %d rows (want %d)", name, c.sum, sums[0].Checksum, len(c.rows), len(early.rows))
		}
	}
	if late.ops > len(early.rows)+1 {
		t.Fatalf("a fresh client downloaded %d ops for %d rows", late.ops, len(early.rows))
	}

	// More updates after compaction: the early client catches up from its
	// position, and a second compaction changes no checksum either.
	var cs []model.Change
	for i := range 5 {
		cs = append(cs, model.Change{Table: todos, Kind: model.Upsert, Key: key(i*7 + 1),
			Puts: []model.Put{put(bk, "todos", fmt.Sprint(i*7+1), `{"v":"again"}`)}})
	}
	cp2 := commit(cs)
	want, err := s.Reader().NewChecksumCache(10).Checksums(ctx, g.ID, cp2, []string{bk})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Compactor().Compact(ctx, g.ID, CompactOptions{Buckets: []string{bk}}); err != nil {
		t.Fatal(err)
	}
	early.download(t, s, g.ID, bk, cp2, 100, 0)
	late = syncedBucket{}
	late.download(t, s, g.ID, bk, cp2, 100, 0)
	if early.sum != want[0].Checksum || late.sum != want[0].Checksum || !maps.Equal(early.rows, late.rows) {
		t.Fatalf("after a second compaction: sums %d and %d, want %d; rows equal %v", early.sum, late.sum, want[0].Checksum, maps.Equal(early.rows, late.rows))
	}
	got, err := s.Catalog().Group(ctx, g.ID)
	if err != nil || got.Compaction.UpTo != cp2 || !got.Compaction.Partial || got.Compaction.At.IsZero() {
		t.Fatalf("recorded compaction %+v (%v), want up to %d, partial", got.Compaction, err, cp2)
	}
}

// rowBytes sums pg_column_size of group's bucket_data rows, the measure
// CompactStats.Reclaimed counts in: each row's stored tuple length. It
// sums here, not in SQL: PostgreSQL 15 may hand an aggregate the first
// row's composite, when under 127 bytes, with a 1-byte varlena header
// instead of 4, so sum(pg_column_size(d.*)) can come out 3 bytes short.
func rowBytes(t *testing.T, s *Store, group int) int64 {
	t.Helper()
	opsRel, _, _ := relations(t, s, group)
	rows, err := s.pool.Query(context.Background(), `SELECT pg_column_size(d.*) FROM `+opsRel+` d WHERE group_id = $1`, group)
	if err != nil {
		t.Fatal(err)
	}
	sizes, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	for _, size := range sizes {
		n += size
	}
	return n
}

// TestCompactReclaimed: the bytes a compaction reports reclaimed are what
// the group's bucket_data rows shrank by, across the MOVE pass, the
// deleted ops and the rewrites into CLEARs, and compacting compacted
// data reclaims nothing.
func TestCompactReclaimed(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, g, todos := streamingStore(t)
	w := newWriter(t, s, g.ID)
	const rows, updates = 30, 8
	var lsn pglogrepl.LSN
	for u := range updates {
		var cs []model.Change
		for i := range rows {
			b := "1#b[]"
			if i%5 == 0 && u == updates-1 {
				b = "1#c[]" // moved away: a REMOVE in 1#b[]
			}
			c := model.Change{Table: todos, Kind: model.Upsert, Key: key(i),
				Puts: []model.Put{put(b, "todos", fmt.Sprint(i), fmt.Sprintf(`{"v":%d,"pad":%q}`, u, strings.Repeat("x", 10*i)))}}
			if i%7 == 3 && u == updates-1 {
				c = model.Change{Table: todos, Kind: model.Delete, Key: key(i)}
			}
			cs = append(cs, c)
		}
		res, err := w.WriteChanges(ctx, cs)
		if err != nil {
			t.Fatal(err)
		}
		lsn++
		if _, ok, err := s.Writes().Commit(ctx, g.ID, lsn, res.MaxOpID); err != nil || !ok {
			t.Fatalf("commit: %v (published %v)", err, ok)
		}
	}

	before := rowBytes(t, s, g.ID)
	st, err := s.Compactor().Compact(ctx, g.ID, CompactOptions{BatchOps: 16})
	if err != nil {
		t.Fatal(err)
	}
	after := rowBytes(t, s, g.ID)
	t.Logf("row bytes %d → %d; stats %+v", before, after, st)
	if st.Moved == 0 || st.Cleared == 0 || st.Reclaimed <= 0 || st.Reclaimed != before-after {
		t.Fatalf("compaction reclaimed %d bytes (stats %+v), the rows shrank by %d", st.Reclaimed, st, before-after)
	}
	got, err := s.Catalog().Group(ctx, g.ID)
	if err != nil || got.Compaction.Reclaimed != st.Reclaimed {
		t.Fatalf("recorded compaction %+v (%v), want %d bytes reclaimed", got.Compaction, err, st.Reclaimed)
	}

	again, err := s.Compactor().Compact(ctx, g.ID, CompactOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if again.Reclaimed != 0 || again.Moved != 0 || again.Cleared != 0 || rowBytes(t, s, g.ID) != after {
		t.Fatalf("compacting compacted data: %+v, rows %d bytes (were %d)", again, rowBytes(t, s, g.ID), after)
	}
}
