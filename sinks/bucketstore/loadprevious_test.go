package bucketstore

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/syncpipe/syncpipe/model"
)

// TestLoadPreviousPlan checks the plan of the stream batch's read of
// previous row state over a group of 20k stored rows: one primary key probe
// per key, no hash of the group's rows, no more current_data rows read than
// keys asked for — with the planner's custom plan and with the generic plan
// a prepared statement switches to after a few executions. The rows have
// key orders of their own, as a source's rows do: v3's probe must seek by
// them (a probe by source_key alone would read every row of the table).
func TestLoadPreviousPlan(t *testing.T) {
	if testing.Short() {
		t.Skip("loads 20k rows")
	}
	t.Parallel()
	ctx := context.Background()
	s, g := openStore(t)
	todos := registerTable(t, s, g.ID, "todos")
	w := newWriter(t, s, g.ID)
	const rows, batch = 20000, 500
	var cs []model.Change
	for i := range rows {
		cs = append(cs, model.Change{Table: todos, Kind: model.Upsert, Key: key(i), KeyOrder: int32(i),
			Puts: []model.Put{put(fmt.Sprintf(`1#by_list["%d"]`, i%100), "todos", fmt.Sprint(i), `{}`)}})
	}
	if _, err := w.WriteSnapshot(ctx, cs); err != nil {
		t.Fatal(err)
	}
	lay := testLayout(t, s, g.ID)
	_, _, curRel := relations(t, s, g.ID)
	if _, err := s.pool.Exec(ctx, "ANALYZE "+lay.cur); err != nil {
		t.Fatal(err)
	}
	tables := make([]string, batch)
	keys := make([]pgtype.UUID, batch)
	orders := make([]int32, batch)
	for i := range batch {
		tables[i], keys[i], orders[i] = todos.ID, pgtype.UUID{Bytes: key(i * 37), Valid: true}, int32(i*37)
	}
	for _, mode := range []string{"force_custom_plan", "force_generic_plan"} {
		t.Run(mode, func(t *testing.T) {
			conn, err := s.pool.Acquire(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Release()
			if _, err := conn.Exec(ctx, "SET plan_cache_mode = "+mode); err != nil {
				t.Fatal(err)
			}
			defer conn.Exec(context.WithoutCancel(ctx), "RESET plan_cache_mode")
			var raw []byte
			args := lay.probeArgs(g.ID, tableKeys(t, s, g.ID, tables), keys, orders)
			if err := conn.QueryRow(ctx, "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) "+lay.loadPrevious, args...).Scan(&raw); err != nil {
				t.Fatal(err)
			}
			plan := parsePlan(t, raw)
			read, probes := 0.0, 0.0
			walkPlan(&plan, func(n *planNode, path []string) {
				if strings.Contains(n.NodeType, "Hash") || strings.Contains(n.NodeType, "Sort") || n.NodeType == "Seq Scan" ||
					strings.HasPrefix(n.NodeType, "Bitmap") {
					t.Errorf("plan has a %s node (%s): %s", n.NodeType, strings.Join(path, " > "), raw)
				}
				if n.Relation == curRel {
					read += n.ActualRows * n.ActualLoops
					if n.NodeType == "Index Scan" && strings.Contains(n.IndexCond, "source_key") &&
						(!lay.ordered || strings.Contains(n.IndexCond, "key_order")) {
						probes += n.ActualLoops
					}
				}
			}, nil)
			if read != batch || probes != batch {
				t.Fatalf("read %.0f current_data rows in %.0f key probes, want %d of each: %s", read, probes, batch, raw)
			}
		})
	}
}

// TestConcurrentStreamWritersStayConsistent runs four writers of one group
// that keep moving the same rows between buckets. Stream writes take no row
// locks, so the group's stream lock alone must keep each write's view of
// the previous state exact: replaying every row's ops in op id order, a
// PUT into a new bucket always comes after the REMOVE from the old one, and
// at the end each row is live in exactly the bucket current_data names.
func TestConcurrentStreamWritersStayConsistent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, g := openStore(t)
	todos := registerTable(t, s, g.ID, "todos")
	const writers, rounds, rows = 4, 25, 10
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for wi := range writers {
		w := newWriter(t, s, g.ID)
		wg.Go(func() {
			for r := range rounds {
				cs := make([]model.Change, rows)
				for i := range cs {
					id := fmt.Sprint(i)
					cs[i] = model.Change{Table: todos, Kind: model.Upsert, Key: key(i),
						Puts: []model.Put{put(fmt.Sprintf("1#w[%d,%d]", wi, r), "todos", id, `{}`)}}
				}
				if _, err := w.WriteStream(ctx, cs, StreamProgress{LSN: pglogrepl.LSN(wi*rounds + r + 1)}); err != nil {
					errs <- fmt.Errorf("writer %d round %d: %w", wi, r, err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	live := map[string]map[string]bool{} // object id → buckets with an unremoved PUT
	for _, o := range ops(t, s, g.ID) {
		id := o.ObjectID
		if live[id] == nil {
			live[id] = map[string]bool{}
		}
		switch o.Op {
		case OpPut:
			for b := range live[id] {
				if b != o.Bucket {
					t.Fatalf("row %s: PUT into %s at op %d while still live in %s", id, o.Bucket, o.OpID, b)
				}
			}
			live[id][o.Bucket] = true
		case OpRemove:
			if !live[id][o.Bucket] {
				t.Fatalf("row %s: REMOVE from %s at op %d, where it was not", id, o.Bucket, o.OpID)
			}
			delete(live[id], o.Bucket)
		}
	}
	for i := range rows {
		var stored []byte
		if err := s.pool.QueryRow(ctx, `SELECT buckets::bytea FROM `+testLayout(t, s, g.ID).cur+` WHERE group_id = $1 AND source_key = $2`,
			g.ID, key(i)).Scan(&stored); err != nil {
			t.Fatal(err)
		}
		buckets := memberBuckets(t, s, g.ID, stored)
		id := fmt.Sprint(i)
		if len(live[id]) != 1 || len(buckets) != 1 || !live[id][buckets[0]] {
			t.Fatalf("row %s: live in %v, current_data says %q", id, live[id], buckets)
		}
	}
}
