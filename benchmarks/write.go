package benchmarks

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/syncpipe/syncpipe/internal/pgcluster"
	"github.com/syncpipe/syncpipe/internal/todos"
	"github.com/syncpipe/syncpipe/model"
	"github.com/syncpipe/syncpipe/sinks/bucketstore"
	"github.com/syncpipe/syncpipe/stages/checksum"
)

// WriteOptions configures the storage write scenario.
type WriteOptions struct {
	Rows      int   // todos to write
	Lists     int   // lists (by_list buckets)
	BatchRows int   // rows per write transaction
	Writers   []int // writer counts to measure
	Runs      int   // repetitions per configuration (median reported)
	Log       io.Writer
}

// RunWrite measures the bucket storage write path: todos evaluated into
// `global` and `by_list` (2 ops per row) written through bucketstore
// Writers, next to a raw COPY of the same storage rows (current rows + ops)
// into index-identical tables over the same number of connections — the
// ceiling for these rows on this machine, measured in the same run.
func RunWrite(ctx context.Context, opt WriteOptions) (Result, error) {
	res := Result{Scenario: "write", Date: time.Now(),
		Params: fmt.Sprintf("%d todos × 2 ops (global + by_list over %d lists), %d rows per transaction, median of %d runs, throwaway cluster with fsync on, storage synchronous_commit=off",
			opt.Rows, opt.Lists, opt.BatchRows, opt.Runs)}
	cluster, err := pgcluster.Start(ctx, pgcluster.Options{Durable: true})
	if err != nil {
		return res, err
	}
	defer cluster.Stop()
	if err := cluster.CreateDatabase(ctx, "storage"); err != nil {
		return res, err
	}
	store, err := bucketstore.Open(ctx, bucketstore.Config{URI: cluster.URI("storage"), MaxConns: 16, SynchronousCommit: "off"})
	if err != nil {
		return res, err
	}
	defer store.Close()
	pool := store.Pool()
	if _, err := pool.Exec(ctx, createRawSQL); err != nil {
		return res, fmt.Errorf("create raw tables: %w", err)
	}
	group, err := store.Catalog().CreateGroup(ctx, todos.Rules, "bench_")
	if err != nil {
		return res, err
	}
	st, err := store.Catalog().RegisterTable(ctx, group.ID, 1, "public", "todos", []string{"id"})
	if err != nil {
		return res, err
	}
	logf(opt.Log, "generating %d evaluated todos…", opt.Rows)
	batches := evaluatedTodos(&st.Table, opt.Rows, opt.Lists, opt.BatchRows)

	var rows rowSet
	var raw []rawBatch
	for run := range opt.Runs {
		for _, n := range opt.Writers {
			if err := reset(ctx, pool); err != nil {
				return res, err
			}
			s, err := writeStore(ctx, store.Writes(), batches, n, group.ID)
			if err != nil {
				return res, err
			}
			name := fmt.Sprintf("bucketstore, %d writer(s)", n)
			rawName := fmt.Sprintf("raw COPY of the same rows, %d conn", n)
			rows.add(name, rawName, s)
			logf(opt.Log, "run %d: %s: %.0f rows/s", run+1, name, float64(s.Rows)/s.Duration.Seconds())
			if raw == nil {
				if raw, err = dumpRaw(ctx, pool, batches); err != nil {
					return res, err
				}
			}

			if err := reset(ctx, pool); err != nil {
				return res, err
			}
			s, err = writeRaw(ctx, pool, raw, n)
			if err != nil {
				return res, err
			}
			rows.add(rawName, "", s)
			logf(opt.Log, "run %d: %s: %.0f rows/s", run+1, rawName, float64(s.Rows)/s.Duration.Seconds())
		}
	}
	res.Rows = rows.list()
	return res, nil
}

func logf(w io.Writer, format string, args ...any) {
	if w != nil {
		fmt.Fprintf(w, format+"\n", args...)
	}
}

// reset empties the written tables and checkpoints, so every run starts
// from the same state without paying for the previous run's dirty pages.
func reset(ctx context.Context, pool *pgxpool.Pool) error {
	_, err := pool.Exec(ctx, `TRUNCATE current_data, bucket_data, current_data2, current_data3, bucket_data2, bucket_parameters, raw_current, raw_ops`)
	if err == nil {
		_, err = pool.Exec(ctx, `CHECKPOINT`)
	}
	if err != nil {
		return fmt.Errorf("reset tables: %w", err)
	}
	return nil
}

// evaluatedTodos builds what the eval and op-build stages produce for
// todos under global + by_list: each row in its list's bucket and the
// global bucket, with JSON data and PUT checksums.
func evaluatedTodos(table *model.Table, n, lists, batchRows int) [][]model.Change {
	g := todos.NewGenerator(todos.Size{Lists: lists, Todos: n, Seed: 42})
	listIDs := g.ListIDs()
	buckets := make([]string, lists)
	for i, id := range listIDs {
		buckets[i] = `1#by_list["` + id.String() + `"]`
	}
	var out [][]model.Change
	var batch []model.Change
	for i := range n {
		id := uuid.NewSHA1(uuid.NameSpaceOID, fmt.Appendf(nil, "todo-%d", i)).String()
		li := i % lists
		data := fmt.Appendf(nil, `{"id":"%s","list_id":"%s","description":"%s","completed":%d,"created_at":"2026-01-01 09:%02d:%02d.123456Z"}`,
			id, listIDs[li], strings.ReplaceAll(g.Description(i), `"`, `'`), i%2, i/60%60, i%60)
		sum := checksum.Put("todos", id, data)
		batch = append(batch, model.Change{Table: table, Kind: model.Upsert,
			Key: uuid.NewSHA1(uuid.NameSpaceURL, []byte(id)),
			Puts: []model.Put{
				{Bucket: buckets[li], ObjectType: "todos", ObjectID: id, Data: data, Checksum: sum},
				{Bucket: "1#global[]", ObjectType: "todos", ObjectID: id, Data: data, Checksum: sum},
			}})
		if len(batch) == batchRows {
			out = append(out, batch)
			batch = nil
		}
	}
	if len(batch) > 0 {
		out = append(out, batch)
	}
	return out
}

// parallel runs work(worker, batch) over all batches with n workers.
func parallel(ctx context.Context, n, batches int, setup func(worker int) (func(int) (Sample, error), func(), error)) (Sample, error) {
	var next atomic.Int64
	var mu sync.Mutex
	var total Sample
	var firstErr error
	var wg sync.WaitGroup
	works := make([]func(int) (Sample, error), n)
	for w := range n {
		work, cleanup, err := setup(w)
		if err != nil {
			return total, err
		}
		defer cleanup()
		works[w] = work
	}
	start := time.Now()
	for w := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				i := int(next.Add(1)) - 1
				if i >= batches {
					return
				}
				s, err := works[w](i)
				mu.Lock()
				if err != nil && firstErr == nil {
					firstErr = err
				}
				total.Rows += s.Rows
				total.Ops += s.Ops
				total.Bytes += s.Bytes
				mu.Unlock()
				if err != nil {
					return
				}
			}
		}()
	}
	wg.Wait()
	total.Duration = time.Since(start)
	return total, firstErr
}

func writeStore(ctx context.Context, writes *bucketstore.Writes, batches [][]model.Change, n, group int) (Sample, error) {
	return parallel(ctx, n, len(batches), func(int) (func(int) (Sample, error), func(), error) {
		w, err := writes.NewWriter(ctx, group)
		if err != nil {
			return nil, nil, err
		}
		return func(i int) (Sample, error) {
			r, err := w.WriteSnapshot(ctx, batches[i])
			return Sample{Rows: int64(r.Rows), Ops: int64(r.Ops), Bytes: r.Bytes}, err
		}, w.Close, nil
	})
}

// rawBatch is one transaction's worth of storage rows as binary COPY
// streams, exactly as a bucketstore writer stored them.
type rawBatch struct {
	current, ops []byte
	rows, nops   int64
	bytes        int64
}

// The raw ceiling's tables are shaped and indexed like a group's
// partitions of storage version 2, which every group the benchmarks
// create has.
const (
	rawCurrentCols = "group_id, source_table, source_key, buckets, lookups, data"
	rawOpsCols     = "group_id, bucket, op_id, op, source_table, source_key, object_type, object_id, checksum, data"
	createRawSQL   = `CREATE TABLE raw_current (LIKE syncpipe.current_data2 INCLUDING ALL, PRIMARY KEY (source_table, source_key));
		CREATE TABLE raw_ops (LIKE syncpipe.bucket_data2 INCLUDING ALL, PRIMARY KEY (bucket, op_id))`
)

// dumpRaw cuts the rows a bucketstore run stored into per-transaction
// streams (batchRows current rows and their ops each), so the raw ceiling
// replays the very same bytes with no client-side work at all, and counts
// each batch's op data as writers do.
func dumpRaw(ctx context.Context, pool *pgxpool.Pool, batches [][]model.Change) ([]rawBatch, error) {
	out, err := dumpStored(ctx, pool, len(batches[0]))
	if err != nil {
		return nil, err
	}
	for i := range out {
		for _, c := range batches[i] {
			for _, p := range c.Puts {
				out[i].bytes += int64(len(p.Data))
			}
		}
	}
	return out, nil
}

var copySignature = []byte("PGCOPY\n\xff\r\n\x00")

// splitTuples cuts a binary COPY stream into its tuples.
func splitTuples(b []byte) ([][]byte, error) {
	if len(b) < 19 || !bytes.HasPrefix(b, copySignature) {
		return nil, fmt.Errorf("not a binary COPY stream")
	}
	ext := int(binary.BigEndian.Uint32(b[15:19]))
	p := 19 + ext
	var out [][]byte
	for p+2 <= len(b) {
		n := int16(binary.BigEndian.Uint16(b[p:]))
		if n == -1 {
			return out, nil
		}
		start := p
		p += 2
		for range n {
			l := int32(binary.BigEndian.Uint32(b[p:]))
			p += 4
			if l > 0 {
				p += int(l)
			}
		}
		out = append(out, b[start:p])
	}
	return nil, fmt.Errorf("binary COPY stream without trailer")
}

func joinTuples(ts [][]byte) []byte {
	out := append([]byte(nil), copySignature...)
	out = append(out, 0, 0, 0, 0, 0, 0, 0, 0)
	for _, t := range ts {
		out = append(out, t...)
	}
	return append(out, 0xff, 0xff)
}

// writeRaw replays the dumped rows into index-identical tables, one
// transaction per batch as a writer does: the ceiling for these storage
// rows (no conflict detection, no op id allocation, no encoding).
func writeRaw(ctx context.Context, pool *pgxpool.Pool, batches []rawBatch, n int) (Sample, error) {
	return parallel(ctx, n, len(batches), func(int) (func(int) (Sample, error), func(), error) {
		conn, err := pool.Acquire(ctx)
		if err != nil {
			return nil, nil, err
		}
		return func(i int) (Sample, error) {
			b := batches[i]
			err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
				pc := tx.Conn().PgConn()
				if _, err := pc.CopyFrom(ctx, bytes.NewReader(b.current), "COPY raw_current ("+rawCurrentCols+") FROM STDIN BINARY"); err != nil {
					return err
				}
				_, err := pc.CopyFrom(ctx, bytes.NewReader(b.ops), "COPY raw_ops ("+rawOpsCols+") FROM STDIN BINARY")
				return err
			})
			return Sample{Rows: b.rows, Ops: b.nops, Bytes: b.bytes}, err
		}, conn.Release, nil
	})
}
