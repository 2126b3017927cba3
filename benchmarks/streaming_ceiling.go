package benchmarks

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"path/filepath"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/sourcegraph/conc/pool"

	"github.com/syncpipe/syncpipe/model"
	"github.com/syncpipe/syncpipe/stages"
	"github.com/syncpipe/syncpipe/stages/checksum"
)

// Names of P3's ceiling rows (storageCeiling): with and without the
// probe.
const (
	streamCeiling        = "ceiling: decode + storage's probe and op insert"
	streamCeilingNoProbe = "ceiling: decode + op insert"
)

// ceilingBatchRows is where the ceiling cuts a storage write, at the next
// commit: about the size of syncpipe's stream writes at 1k-row source
// transactions (600000 changes in 80 writes).
const ceilingBatchRows = 7500

// storageCeiling is P3's second reference, measured when storage has a
// cluster of its own: a consumer of a slot of its own that decodes pgoutput
// as decodeOnly does, then runs per change only the storage statements
// syncpipe's stream writes cost storage for these updates — the primary
// key probe of the row's stored state (current_data3 of syncpipe's group,
// the statement the stream write runs) and the insert of one op row (binary
// COPY into raw_ops, shaped and indexed like a group's partition of bucket_data2) — in
// transactions of whole source transactions. Nothing else: no sync rules
// (a row's bucket id and JSON are pasted together from its columns), no
// pipeline, no op id reservation, no change record. Decode, probe and write
// run on three goroutines, probe and write on connections of their own, as
// in syncpipe. Its rate bounds what a pipeline that writes these ops
// through this storage can reach on this machine: the difference to the
// decode-only consumer is storage's, the difference to syncpipe is
// syncpipe's own.
type storageCeiling struct {
	*decodeOnly
	probe, write *pgx.Conn
	probing      bool // false: the op inserts alone (no probe connection)
	group        int32
	table        int32 // source_tables.num of todos in group
	// buckets numbers the by_list buckets as storage interns them (the
	// writer's cache hit: no query).
	buckets map[string]int64
	nextOp  *int64 // the last op id written to raw_ops
	data    []byte // scratch space for an op's JSON
}

// newStorageCeiling creates a ceiling's temporary slot on the source at
// the current WAL position (like newDecodeOnly) and connects to storage,
// where syncpipe's group already holds the todos. Ceilings of one storage
// database share nextOp (0: not read yet).
func newStorageCeiling(ctx context.Context, sourceURI, storageURI, slot string, probing bool, nextOp *int64) (_ *storageCeiling, err error) {
	dec, err := newDecodeOnly(ctx, sourceURI, slot)
	if err != nil {
		return nil, err
	}
	c := &storageCeiling{decodeOnly: dec, probing: probing, nextOp: nextOp}
	defer func() {
		if err != nil {
			c.Close(context.WithoutCancel(ctx))
		}
	}()
	// syncpipe's schema and, as its storage connections,
	// synchronous_commit=off.
	connect := func() (*pgx.Conn, error) {
		conn, err := pgx.Connect(ctx, storageURI)
		if err == nil {
			if _, err = conn.Exec(ctx, `SET search_path = syncpipe; SET synchronous_commit = off`); err != nil {
				conn.Close(context.WithoutCancel(ctx))
			}
		}
		if err != nil {
			return nil, fmt.Errorf("storage ceiling: connect: %w", err)
		}
		return conn, nil
	}
	if c.write, err = connect(); err != nil {
		return nil, err
	}
	if probing {
		if c.probe, err = connect(); err != nil {
			return nil, err
		}
	}
	// raw_ops starts as a copy of the ops (storage version 2's, shaped
	// and indexed like a group's partition), so that its inserts go into
	// an index of the same size.
	var exists bool
	if err := c.write.QueryRow(ctx, `SELECT to_regclass('raw_ops') IS NOT NULL`).Scan(&exists); err != nil {
		return nil, fmt.Errorf("storage ceiling: %w", err)
	}
	if !exists {
		// No autovacuum, and the copy on disk at once: neither may run
		// beside the measurements after it.
		for _, q := range []string{`CREATE TABLE raw_ops (LIKE bucket_data2 INCLUDING ALL, PRIMARY KEY (bucket, op_id)) WITH (autovacuum_enabled = off)`,
			`INSERT INTO raw_ops SELECT * FROM bucket_data2`, `VACUUM ANALYZE raw_ops`, `CHECKPOINT`} {
			if _, err := c.write.Exec(ctx, q); err != nil {
				return nil, fmt.Errorf("storage ceiling: create raw_ops: %w", err)
			}
		}
	}
	c.buckets = map[string]int64{}
	err = c.write.QueryRow(ctx, `SELECT st.group_id, st.num FROM source_tables st
		WHERE st.table_name = 'todos' ORDER BY st.group_id DESC LIMIT 1`).Scan(&c.group, &c.table)
	if err == nil && *nextOp == 0 {
		err = c.write.QueryRow(ctx, `SELECT coalesce(max(op_id), 0) FROM raw_ops`).Scan(nextOp)
	}
	if err != nil {
		return nil, fmt.Errorf("storage ceiling: read syncpipe's group: %w", err)
	}
	return c, nil
}

// name is the ceiling's row name.
func (c *storageCeiling) name() string {
	if c.probing {
		return streamCeiling
	}
	return streamCeilingNoProbe
}

// Close ends the replication connection (dropping the slot) and the
// storage connections.
func (c *storageCeiling) Close(ctx context.Context) {
	c.decodeOnly.Close(ctx)
	for _, conn := range []*pgx.Conn{c.probe, c.write} {
		if conn != nil {
			conn.Close(ctx)
		}
	}
}

// ceilingBatch is one storage write of the ceiling.
type ceilingBatch struct {
	tables []int32
	keys   []pgtype.UUID
	orders []int32 // the rows' key orders (storage version 3's key_order)
	ops    []byte  // binary COPY of its op rows
}

// ceilingProbeSQL is the stream write's probe (bucketstore's
// loadPreviousSQL).
const ceilingProbeSQL = `SELECT k.i, c.ctid, c.buckets, c.lookups, c.data
	FROM unnest($2::int4[], $3::uuid[], $4::int4[]) WITH ORDINALITY AS k (t, key, ord, i)
	CROSS JOIN LATERAL (
		SELECT ctid, buckets, lookups, data FROM current_data3
		WHERE group_id = $1 AND source_table = k.t AND key_order = k.ord AND source_key = k.key
		OFFSET 0) c`

const ceilingCopySQL = `COPY raw_ops (group_id, bucket, op_id, op, source_table, source_key, object_type, object_uuid, object_id, checksum, data) FROM STDIN BINARY`

// consume streams from the slot until updates UPDATEs are decoded and
// their ops committed to storage, and returns how long that took from
// START_REPLICATION on and how many op rows it wrote.
func (c *storageCeiling) consume(ctx context.Context, publication string, updates int64) (time.Duration, int64, error) {
	start := time.Now()
	if err := c.start(ctx, publication); err != nil {
		return 0, 0, err
	}
	probeQ, writeQ := make(chan *ceilingBatch, 1), make(chan *ceilingBatch, 1)
	p := pool.New().WithContext(ctx).WithCancelOnError()
	var written int64
	p.Go(func(ctx context.Context) error {
		defer close(writeQ)
		for b := range probeQ {
			if c.probing {
				if err := c.probeRows(ctx, b); err != nil {
					return err
				}
			}
			select {
			case writeQ <- b:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		return nil
	})
	p.Go(func(ctx context.Context) error {
		for b := range writeQ {
			n, err := c.writeOps(ctx, b)
			if err != nil {
				return err
			}
			written += n
		}
		return nil
	})
	p.Go(func(ctx context.Context) error {
		defer close(probeQ)
		return c.decode(ctx, updates, probeQ)
	})
	if err := p.Wait(); err != nil {
		return 0, 0, err
	}
	return time.Since(start), written, nil
}

// decode receives changes until updates UPDATEs and the commit after the
// last are in, handing batches of whole transactions to out.
func (c *storageCeiling) decode(ctx context.Context, updates int64, out chan<- *ceilingBatch) error {
	var seen int64
	var last pglogrepl.LSN
	var cols map[string]int // todos' column positions, from its Relation message
	var rk checksum.ReplicaKey
	b := c.newBatch()
	for seen < updates || len(b.keys) > 0 {
		m, err := c.next(ctx, last)
		if err != nil {
			return fmt.Errorf("storage ceiling: after %d updates: %w", seen, err)
		}
		switch m := m.(type) {
		case *pglogrepl.RelationMessage:
			if m.RelationName == "todos" {
				cols = map[string]int{}
				for i, col := range m.Columns {
					cols[col.Name] = i
				}
			}
		case *pglogrepl.UpdateMessage:
			if cols == nil || m.NewTuple == nil {
				return fmt.Errorf("storage ceiling: an update of relation %d before its Relation message", m.RelationID)
			}
			c.add(b, &rk, cols, m.NewTuple.Columns)
			seen++
		case *pglogrepl.CommitMessage:
			last = m.TransactionEndLSN
			if len(b.keys) >= ceilingBatchRows || (seen >= updates && len(b.keys) > 0) {
				select {
				case out <- b:
				case <-ctx.Done():
					return ctx.Err()
				}
				b = c.newBatch()
			}
		}
	}
	return nil
}

func (c *storageCeiling) newBatch() *ceilingBatch {
	b := &ceilingBatch{ops: make([]byte, 0, 4<<20)}
	b.ops = append(b.ops, copySignature...)
	b.ops = binary.BigEndian.AppendUint64(b.ops, 0) // flags, header extension length
	return b
}

// add appends one updated todo's op row to b: a PUT into by_list[list_id]
// with the row's columns as JSON.
func (c *storageCeiling) add(b *ceilingBatch, rk *checksum.ReplicaKey, cols map[string]int, tuple []*pglogrepl.TupleDataColumn) {
	val := func(name string) []byte { return tuple[cols[name]].Data }
	id, list := val("id"), val("list_id")
	rk.Reset()
	rk.String("id", string(id))
	key := rk.UUID()
	b.tables = append(b.tables, c.table)
	b.keys = append(b.keys, pgtype.UUID{Bytes: key, Valid: true})
	b.orders = append(b.orders, stages.KeyOrderOf(model.Text(string(id))))

	d := append(c.data[:0], `{"id":"`...)
	d = append(append(d, id...), `","list_id":"`...)
	d = append(append(d, list...), `","description":`...)
	d = model.AppendJSONString(d, val("description"))
	if bytes.Equal(val("completed"), []byte("t")) {
		d = append(d, `,"completed":1,"created_at":"`...)
	} else {
		d = append(d, `,"completed":0,"created_at":"`...)
	}
	d = append(append(d, val("created_at")...), `"}`...)
	c.data = d
	*c.nextOp++

	o := binary.BigEndian.AppendUint16(b.ops, 11)
	o = binary.BigEndian.AppendUint32(binary.BigEndian.AppendUint32(o, 4), uint32(c.group))
	bucket, ok := c.buckets[string(list)]
	if !ok {
		bucket = int64(len(c.buckets) + 1)
		c.buckets[string(list)] = bucket
	}
	o = binary.BigEndian.AppendUint64(binary.BigEndian.AppendUint32(o, 8), uint64(bucket))
	o = binary.BigEndian.AppendUint64(binary.BigEndian.AppendUint32(o, 8), uint64(*c.nextOp))
	o = binary.BigEndian.AppendUint16(binary.BigEndian.AppendUint32(o, 2), 1) // PUT
	o = binary.BigEndian.AppendUint32(binary.BigEndian.AppendUint32(o, 4), uint32(c.table))
	o = appendField(o, key[:])
	// As storage version 2 stores a todo's op: no object type (it is the
	// table's name), the UUID id as its 16 bytes, no text id.
	o = binary.BigEndian.AppendUint32(o, 0xFFFFFFFF) // NULL
	if uid, err := uuid.Parse(string(id)); err == nil {
		o = appendField(o, uid[:])
		o = binary.BigEndian.AppendUint32(o, 0xFFFFFFFF)
	} else {
		o = appendField(binary.BigEndian.AppendUint32(o, 0xFFFFFFFF), id)
	}
	o = binary.BigEndian.AppendUint32(binary.BigEndian.AppendUint32(o, 4), crc32.ChecksumIEEE(d))
	b.ops = appendField(o, d)
}

func appendField(b, v []byte) []byte {
	b = binary.BigEndian.AppendUint32(b, uint32(len(v)))
	return append(b, v...)
}

// probeRows runs the stream write's probe for b's rows and reads what it
// returns, as the stream write does (raw values, no scanning).
func (c *storageCeiling) probeRows(ctx context.Context, b *ceilingBatch) error {
	rows, err := c.probe.Query(ctx, ceilingProbeSQL, c.group, b.tables, b.keys, b.orders)
	if err != nil {
		return fmt.Errorf("storage ceiling: probe: %w", err)
	}
	found := 0
	for rows.Next() {
		if len(rows.RawValues()) == 5 {
			found++
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("storage ceiling: probe: %w", err)
	}
	if found != len(b.keys) {
		return fmt.Errorf("storage ceiling: probe found %d of %d rows in syncpipe's group %d", found, len(b.keys), c.group)
	}
	return nil
}

// writeOps COPYs b's op rows in a transaction of their own.
func (c *storageCeiling) writeOps(ctx context.Context, b *ceilingBatch) (int64, error) {
	b.ops = binary.BigEndian.AppendUint16(b.ops, 0xffff) // trailer
	tx, err := c.write.Begin(ctx)
	if err != nil {
		return 0, fmt.Errorf("storage ceiling: begin: %w", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	tag, err := tx.Conn().PgConn().CopyFrom(ctx, bytes.NewReader(b.ops), ceilingCopySQL)
	if err != nil {
		return 0, fmt.Errorf("storage ceiling: copy ops: %w", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return 0, fmt.Errorf("storage ceiling: commit: %w", err)
	}
	return tag.RowsAffected(), nil
}

// ceilingCost adds up what the ceiling's runs cost, for per-change
// figures: the harness process's CPU (the ceiling's goroutines; nothing
// else of it runs meanwhile), the source's walsender and the storage
// backends.
type ceilingCost struct {
	changes                 int64
	own, walsender, storage time.Duration
}

// perChange divides d by the changes consumed.
func (c *ceilingCost) perChange(d time.Duration) time.Duration {
	return d / time.Duration(max(c.changes, 1))
}

// dropRawOps drops the ceilings' table from storage of t once they are
// done: its vacuum and checkpoint would otherwise fall into the lag
// measurement.
func dropRawOps(ctx context.Context, t *streamTarget) error {
	if _, err := t.storage.Exec(ctx, `DROP TABLE IF EXISTS syncpipe.raw_ops`); err != nil {
		return fmt.Errorf("storage ceiling: drop raw_ops: %w", err)
	}
	return nil
}

// newCeilings creates both ceilings (op inserts alone, then with the
// probe) for storage of t, before the run's updates.
func (sr *streamRun) newCeilings(ctx context.Context, t *streamTarget) ([]*storageCeiling, error) {
	var out []*storageCeiling
	for i, probing := range []bool{false, true} {
		c, err := newStorageCeiling(ctx, sr.cluster.URI("app"), t.storageURI(), fmt.Sprintf("bench_ceiling_%d", i), probing, &sr.rawOp)
		if err != nil {
			closeCeilings(ctx, out)
			return nil, err
		}
		out = append(out, c)
	}
	return out, nil
}

func closeCeilings(ctx context.Context, cs []*storageCeiling) {
	for _, c := range cs {
		c.Close(context.WithoutCancel(ctx))
	}
}

// runCeiling consumes the run's updates with c into storage of t (a
// two-cluster target, whose children are stopped), adding its CPU to cost.
func (sr *streamRun) runCeiling(ctx context.Context, c *storageCeiling, t *streamTarget, cost *ceilingCost) (Sample, error) {
	src, sto := filepath.Join(sr.cluster.Dir(), "data"), filepath.Join(t.storageCluster.Dir(), "data")
	p0, s0, own0 := clusterProcs(src), clusterProcs(sto), selfCPU()
	updates := int64(sr.opt.Updates)
	d, ops, err := c.consume(ctx, "syncpipe", updates)
	if err != nil {
		return Sample{}, err
	}
	cost.own += selfCPU() - own0
	cost.walsender += clusterProcs(src).since(p0)["walsender"]
	cost.storage += clusterProcs(sto).since(s0)["backend "+t.storageDB]
	cost.changes += updates
	return Sample{Duration: d, Rows: updates, Ops: ops}, nil
}

// ceilingCosts are the ceilings' costs by row name.
type ceilingCosts map[string]*ceilingCost

func (cc ceilingCosts) of(name string) *ceilingCost {
	if cc[name] == nil {
		cc[name] = &ceilingCost{}
	}
	return cc[name]
}

// ceilingNote describes the ceilings' rates next to the baseline and
// syncpipe (primary), with what they cost per change; "" when not measured.
func ceilingNote(res Result, primary *streamTarget, costs ceilingCosts) string {
	base, sp := baseRate(res, streamBaseline), baseRate(res, primary.name())
	var parts []string
	for _, name := range []string{streamCeilingNoProbe, streamCeiling} {
		c := costs[name]
		v := baseRate(res, name)
		if c == nil || v == 0 {
			continue
		}
		us := func(d time.Duration) string { return c.perChange(d).Round(100 * time.Nanosecond).String() }
		parts = append(parts, fmt.Sprintf("%s: %.0f changes/s = %.0f%% of the decode-only consumer (CPU per change: consumer %s + walsender %s + storage backends %s = %s)",
			strings.TrimPrefix(name, "ceiling: "), v, 100*v/max(base, 1), us(c.own), us(c.walsender), us(c.storage), us(c.own+c.walsender+c.storage)))
	}
	if len(parts) == 0 {
		return ""
	}
	return fmt.Sprintf("Ceilings, %s, in the same runs (streaming_ceiling.go): a consumer of a slot of its own that decodes as the baseline does, then runs only storage's statements for these updates — "+
		"the stream write's primary-key probe of current_data3 and one op row COPYed into raw_ops (shaped and indexed like a group's partition of bucket_data2, started as a copy of the ops), whole source transactions per write of ≥ %d changes, decode, probe and write on goroutines of their own — "+
		"with no sync rules, no checksums of their output, no pipeline: %s. syncpipe, evaluating the rules and writing the same ops, reached %.0f changes/s = %.0f%% of the probe ceiling.",
		topologyLabel(primary.topology), ceilingBatchRows, strings.Join(parts, "; "), sp, 100*sp/max(baseRate(res, streamCeiling), 1))
}
