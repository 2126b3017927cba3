package bucketstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/syncpipe/syncpipe/model"
)

// Result describes what one write persisted.
type Result struct {
	// Rows is the number of source rows written; Skipped counts snapshot
	// rows that storage already had (a resumed chunk) and so got no ops.
	Rows, Skipped int
	// Ops is the number of bucket operations written, Params the number of
	// parameter lookup entries.
	Ops, Params int
	// Bytes is the size of the op data written.
	Bytes int64
	// MaxOpID is the highest op id written, 0 if none.
	MaxOpID int64
}

// add accumulates r2 into r.
func (r *Result) add(r2 Result) {
	r.Rows += r2.Rows
	r.Skipped += r2.Skipped
	r.Ops += r2.Ops
	r.Params += r2.Params
	r.Bytes += r2.Bytes
	r.MaxOpID = max(r.MaxOpID, r2.MaxOpID)
}

// Writer writes batches of changes of one group on a connection of its
// own. A Writer is not safe for concurrent use; a pipeline's flush stage
// gives each of its writer goroutines one Writer, and several Writers (in
// one process or many) may write the same group at once.
type Writer struct {
	s      *Writes
	group  int
	fence  Fence
	conn   *pgxpool.Conn
	broken bool
	lay    *layout

	// v2 (layout.interned): the ids of the batch's bucket names, the
	// names of the buckets its REMOVEs leave, and the numbers of the
	// tables the writer has written.
	bucketIDs map[string]int64
	idNames   map[int64]string
	leaving   []leaving // the memberships a stream write's rows leave
	tables    *tableMap // the group's tables the writer has written, and maybe more

	writeBufs
	blocks  []int64 // allocate's nextval results
	fresh   []bool
	subkey  []byte
	changed changeRecord // what this transaction touched (changerecords.go)
	home    *writeBufs   // where Close returns the buffers; nil = dropped

	// beforeCommit, when set by tests, runs just before each commit, to
	// widen race windows.
	beforeCommit func()
}

// The templates of the write path's layout statements (see newLayout).
const (
	copyCurrentSQL = `COPY {cur} ({curcols}) FROM STDIN BINARY`
	copyStageSQL   = `COPY stage_{cur} ({curcols}) FROM STDIN BINARY`
	copyOpsSQL     = `COPY {ops} (group_id, {bucket}, op_id, op, source_table, source_key, object_type, {objcols}, checksum, data) FROM STDIN BINARY`
	// createStageSQL: the staging table is needed only on the rare
	// resume path, so it is created there rather than per writer; it
	// lives for the session and is emptied at every commit. It is named
	// for the table it copies: a pooled connection may stage rows for
	// groups of several versions, and CREATE … IF NOT EXISTS would keep
	// the first shape.
	createStageSQL  = `CREATE TEMP TABLE IF NOT EXISTS stage_{cur} (LIKE {cur}) ON COMMIT DELETE ROWS`
	insertStagedSQL = `INSERT INTO {cur} SELECT * FROM stage_{cur} ON CONFLICT DO NOTHING RETURNING source_table::text, source_key`
)

const (
	copyParamsSQL = `COPY bucket_parameters (id, group_id, source_table, source_key, lookup, bucket_parameters) FROM STDIN BINARY`
	allocateSQL   = `SELECT array_agg(v ORDER BY v) FROM (SELECT nextval('op_id_seq') AS v FROM generate_series(1, $1)) s`
)

// opIDBlock is how many op ids one nextval of op_id_seq hands out (its
// INCREMENT, migration 5): a writer draws ceil(n/opIDBlock) values v and
// owns the ids v … v+opIDBlock-1 of each, instead of calling nextval once
// per id, which cost the storage backend more than a microsecond per op.
// Ids a batch does not use are gaps, which clients never see as such (op
// ids only ever need to grow).
const opIDBlock = 100

// lastIssuedSQL is the highest op id any writer may have been handed (0
// before the first): the end of the sequence's last block.
const lastIssuedSQL = `(SELECT CASE WHEN is_called THEN last_value + 99 ELSE 0 END FROM op_id_seq)` // opIDBlock - 1

// Op codes stored in bucket_data.op.
const (
	OpPut    int16 = 1
	OpRemove int16 = 2
	OpMove   int16 = 3
	OpClear  int16 = 4
)

// NewWriter returns a writer for group holding one pooled connection until
// Close.
func (s *Writes) NewWriter(ctx context.Context, group int) (*Writer, error) {
	return s.newWriter(ctx, group, Fence{}, nil)
}

// NewFencedWriter is NewWriter for a work unit holding a lease: every
// write commits only while f holds (see Fence), else fails with an error
// matching ErrLeaseLost.
func (s *Writes) NewFencedWriter(ctx context.Context, group int, f Fence) (*Writer, error) {
	return s.newWriter(ctx, group, f, nil)
}

// newWriter is NewWriter with the encode buffers taken from, and given
// back to, home when it is set: a caller that opens a writer per batch
// (the sink's flush workers) keeps its buffers grown instead of growing
// (and copying) them again for every batch.
func (s *Writes) newWriter(ctx context.Context, group int, f Fence, home *writeBufs) (*Writer, error) {
	lay, err := s.layout(ctx, group)
	if err != nil {
		return nil, err
	}
	conn, err := s.acquire(ctx, f.Epoch, fmt.Sprintf("writer for group %d", group))
	if err != nil {
		return nil, err
	}
	w := &Writer{s: s, group: group, fence: f, conn: conn, home: home, lay: lay}
	if home != nil {
		w.writeBufs = *home
	}
	return w, nil
}

// writeBufs are a writer's reusable encode buffers.
type writeBufs struct {
	cur, ops, params copyBuf
	ids              []int64
	order            []putRef        // a snapshot batch's PUTs in bucket order
	final            []*model.Change // a stream batch's changes, one per row (collapse)
	byRow            []int32         // collapse's scratch space
	prev             prevState       // the stored state of final's rows
}

// keptBufBytes is the capacity up to which a byte buffer is kept for the
// next batch, after a batch of items rows (or ops): maxKeptBufBytes, or
// keptBytesPerItem a row if more. A batch with a huge row grows the encode
// buffers to its size (a 50 MB row: several buffers of 50 MB and more),
// and keeping them would hold that memory for as long as the process
// runs, for a size the usual batch never needs; a bigger buffer is
// dropped after its batch, and the next huge row grows it again (a copy
// as costly as the row). A flat bound is not enough: a batch of many
// usual rows needs megabytes too (10,000 todos: 4.1 MiB each of current
// rows and ops), and a 4 MiB bound made such batches regrow their buffers
// every time — a 1M-row transaction streamed at 0.91× the rate of keeping
// them (same run). The allowance per row keeps them.
func keptBufBytes(items int) int {
	return max(maxKeptBufBytes, items*keptBytesPerItem)
}

const (
	// maxKeptBufBytes is what any batch may keep (see keptBufBytes).
	maxKeptBufBytes = 4 << 20
	// keptBytesPerItem is the size of a row, in a batch's buffers, up to
	// which the batch's buffers are kept (see keptBufBytes).
	keptBytesPerItem = 16 << 10
)

// trim drops the buffers grown beyond keptBufBytes(items).
func (b *writeBufs) trim(items int) {
	limit := keptBufBytes(items)
	b.cur.trim(limit)
	b.ops.trim(limit)
	b.params.trim(limit)
	b.prev.trim(limit)
}

// maxSpareBufs bounds the store's shelf of encode buffers kept between
// batches (Writes.spare): snapshot runs are short (a unit of a few chunks
// opens its writers afresh), and buffers grown from nothing for every unit
// cost more CPU in append's copying and in faulting fresh pages than
// encoding the rows. The bound is about the writers of a few units at
// once (workers_per_process × flush_writers); a process writing more at
// once grows the rest.
const maxSpareBufs = 8

// takeBufs returns a set of encode buffers off the shelf, or a new one.
func (s *Writes) takeBufs() *writeBufs {
	if b, ok := s.spare.Get(); ok {
		return b
	}
	return &writeBufs{}
}

// Close returns the writer's connection to the pool (or closes it if a
// failure left its state unknown).
func (w *Writer) Close() {
	if w.conn == nil {
		return
	}
	if w.broken {
		_ = w.conn.Conn().Close(context.Background())
	}
	w.conn.Release()
	w.conn = nil
	if w.home != nil {
		clear(w.order) // its strings would keep the batch's memory alive
		clear(w.final) // and its pointers
		b := &w.writeBufs
		b.trim(max(len(b.ids), len(b.order), len(b.final)))
		b.ids, b.order, b.final, b.byRow = b.ids[:0], b.order[:0], b.final[:0], b.byRow[:0]
		*w.home = *b
	}
	w.writeBufs = writeBufs{}
}

// write runs a write transaction (batchTx: head queues statements sent
// with BEGIN, body may queue statements on tail) bracketed by an op id
// reservation (see doc.go, "The checkpoint invariant"), retrying
// serialization failures and deadlocks. head and body must be safe to run
// again from scratch.
func (w *Writer) write(ctx context.Context, head func(b *pgx.Batch), body func(tx pgx.Tx, tail *pgx.Batch) error) error {
	if w.conn == nil {
		return errors.New("bucketstore: write on a closed writer")
	}
	var claim int64
	if err := w.conn.QueryRow(ctx, reserveSQL, w.group).Scan(&claim); err != nil {
		w.broken = true
		return fmt.Errorf("reserve op ids: %w", err)
	}
	t := batchTx{
		head: head,
		body: func(tx pgx.Tx, tail *pgx.Batch) error {
			if err := body(tx, tail); err != nil {
				return err
			}
			w.queueRelease(tail, claim)
			return nil
		},
		beforeCommit: w.beforeCommit,
	}
	err := retry(ctx, &w.s.counters.retries, func() error { return t.run(ctx, w.conn) })
	if err != nil {
		// The claim must not outlive the failed write, or it would hold
		// checkpoints back until this connection dies.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		if _, rerr := w.conn.Exec(rctx, releaseSQL, claim); rerr != nil {
			w.broken = true
		}
	}
	return err
}

// queueRelease queues dropping the write's op id claim in its transaction,
// checking the writer's fence: the last statement before the commit, so
// that its share lock on the lease is held for the shortest time.
func (w *Writer) queueRelease(tail *pgx.Batch, claim int64) {
	if w.fence.Lease == "" {
		tail.Queue(releaseSQL, claim)
		return
	}
	tail.Queue(fencedReleaseSQL, claim, w.fence.Lease, w.fence.Token).Exec(func(tag pgconn.CommandTag) error {
		if tag.RowsAffected() == 0 {
			return w.fence.lost("write")
		}
		return nil
	})
}

// WriteSnapshot persists snapshot rows (Upserts). A row that storage
// already has — because a crashed run wrote this chunk but did not commit
// its progress — is detected by current_data's primary key at write time
// and gets no ops; every other row is written with its ops. The fast path
// COPYs the rows straight in; only when the key reports a conflict is the
// batch re-done through a staging table with ON CONFLICT DO NOTHING.
func (w *Writer) WriteSnapshot(ctx context.Context, changes []model.Change) (Result, error) {
	start := time.Now()
	var res Result
	if err := w.prepareNames(ctx, len(changes), func(i int) *model.Change { return &changes[i] }); err != nil {
		return Result{}, fmt.Errorf("write snapshot batch (%d rows) for group %d: %w", len(changes), w.group, err)
	}
	savepoint := func(b *pgx.Batch) { b.Queue("SAVEPOINT snapshot_rows") } // see insertSnapshotRows
	err := w.write(ctx, savepoint, func(tx pgx.Tx, tail *pgx.Batch) error {
		res = Result{}
		fresh, err := w.insertSnapshotRows(ctx, tx, changes)
		if err != nil {
			return err
		}
		w.ops.reset()
		w.params.reset()
		w.changed.reset(false)
		need := 0
		for i := range changes {
			if fresh == nil || fresh[i] {
				need += len(changes[i].Puts) + len(changes[i].Lookups)
				res.Rows++
			} else {
				res.Skipped++
			}
		}
		w.ids = w.ids[:0]
		if err := w.allocate(ctx, tx, need); err != nil {
			return err
		}
		// PUTs go in bucket order, so that each bucket's ops of the batch
		// share heap pages: a client's bucket read and a checksum then
		// visit a page per batch rather than a page per op.
		w.order = w.order[:0]
		for i := range changes {
			if fresh != nil && !fresh[i] {
				continue
			}
			for j := range changes[i].Puts {
				w.order = append(w.order, putRef{changes[i].Puts[j].Bucket, int32(i), int32(j)})
			}
		}
		slices.SortStableFunc(w.order, func(a, b putRef) int { return strings.Compare(a.bucket, b.bucket) })
		next := 0
		for _, r := range w.order {
			c := &changes[r.change]
			w.encodePut(c, &c.Puts[r.put], w.ids[next], &res)
			next++
		}
		for i := range changes {
			if fresh != nil && !fresh[i] {
				continue
			}
			c := &changes[i]
			for j := range c.Lookups {
				w.encodeParam(c, c.Lookups[j].Key, c.Lookups[j].Params, w.ids[next], &res)
				next++
			}
		}
		return w.flushOps(ctx, tx, tail, &res)
	})
	if err != nil {
		return Result{}, fmt.Errorf("write snapshot batch (%d rows) for group %d: %w", len(changes), w.group, err)
	}
	w.s.counters.record(res, time.Since(start))
	if res.Skipped > 0 {
		w.s.log.Info("snapshot rows already stored (resumed chunk)", "group", w.group, "rows", res.Rows, "skipped", res.Skipped)
	}
	return res, nil
}

// putRef names one PUT of a batch: changes[change].Puts[put].
type putRef struct {
	bucket      string
	change, put int32
}

// insertSnapshotRows writes current_data rows after the savepoint
// snapshot_rows (which the write's head set). It returns nil when every
// row was new, or a per-change "was new" mask after a conflict.
func (w *Writer) insertSnapshotRows(ctx context.Context, tx pgx.Tx, changes []model.Change) ([]bool, error) {
	w.cur.reset()
	for i := range changes {
		w.encodeCurrent(&changes[i])
	}
	w.cur.finish()
	_, err := tx.Conn().PgConn().CopyFrom(ctx, w.cur.reader(), w.lay.copyCurrent)
	if err == nil {
		return nil, nil
	}
	if !isUniqueViolation(err) {
		return nil, fmt.Errorf("copy current rows: %w", err)
	}
	if _, err := tx.Exec(ctx, "ROLLBACK TO SAVEPOINT snapshot_rows"); err != nil {
		return nil, err
	}
	if _, err := tx.Exec(ctx, w.lay.createStage); err != nil {
		return nil, fmt.Errorf("create staging table: %w", err)
	}
	if _, err := tx.Conn().PgConn().CopyFrom(ctx, w.cur.reader(), w.lay.copyStage); err != nil {
		return nil, fmt.Errorf("copy current rows to staging: %w", err)
	}
	rows, err := tx.Query(ctx, w.lay.insertStaged)
	if err != nil {
		return nil, fmt.Errorf("insert new current rows: %w", err)
	}
	inserted := make(map[rowKey]struct{}, len(changes))
	var k rowKey
	for rows.Next() {
		if err := rows.Scan(&k.table, &k.key); err != nil {
			rows.Close()
			return nil, err
		}
		inserted[k] = struct{}{}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("insert new current rows: %w", err)
	}
	w.fresh = append(w.fresh[:0], make([]bool, len(changes))...)
	for i := range changes {
		_, w.fresh[i] = inserted[rowKey{w.tableText(changes[i].Table.ID), changes[i].Key}]
	}
	return w.fresh, nil
}

// rowKey identifies a source row within a group: its source_table
// column as text, and its key.
type rowKey struct {
	table string
	key   [16]byte
}

// queueAllocate queues drawing op ids for at least n ops on b, when the
// batch's needs are only estimated before its first statement runs: more
// are drawn by allocate if they fall short, and ids drawn but not used are
// gaps.
func (w *Writer) queueAllocate(b *pgx.Batch, n int) {
	w.ids = w.ids[:0]
	if n <= 0 {
		return
	}
	blocks := (n + opIDBlock - 1) / opIDBlock
	b.Queue(allocateSQL, blocks).QueryRow(func(r pgx.Row) error { return w.takeBlocks(r, blocks) })
}

// allocate makes sure w.ids holds at least n op ids, drawing the missing
// ones from the global sequence in blocks of opIDBlock: ids stay
// ascending, as each draw is above every earlier one.
func (w *Writer) allocate(ctx context.Context, tx pgx.Tx, n int) error {
	if len(w.ids) >= n {
		return nil
	}
	blocks := (n - len(w.ids) + opIDBlock - 1) / opIDBlock
	return w.takeBlocks(tx.QueryRow(ctx, allocateSQL, blocks), blocks)
}

// takeBlocks appends to w.ids every id of the blocks allocateSQL drew.
func (w *Writer) takeBlocks(r pgx.Row, blocks int) error {
	if err := r.Scan(&w.blocks); err != nil {
		return fmt.Errorf("allocate %d op id blocks: %w", blocks, err)
	}
	if len(w.blocks) != blocks {
		return fmt.Errorf("allocate op ids: got %d blocks, want %d", len(w.blocks), blocks)
	}
	for _, v := range w.blocks {
		for id := v; id < v+opIDBlock; id++ {
			w.ids = append(w.ids, id)
		}
	}
	return nil
}

// prepareNames readies a v2 writer for a batch of n changes (at(i)),
// before its transaction: it interns the bucket names of their PUTs
// (bucketIDs) and reads the numbers of tables it has not written yet.
func (w *Writer) prepareNames(ctx context.Context, n int, at func(i int) *model.Change) error {
	if !w.lay.interned {
		return nil
	}
	var names, tables []string
	for i := range n {
		c := at(i)
		for j := range c.Puts {
			names = append(names, c.Puts[j].Bucket)
		}
		if !w.hasTable(c.Table.ID) && !slices.Contains(tables, c.Table.ID) {
			tables = append(tables, c.Table.ID)
		}
	}
	if len(tables) > 0 {
		// The store's map of the group's tables, which it loads again
		// when a table is new to it; the writer keeps the one that has
		// its tables (maps are never changed once loaded).
		m, err := w.s.tables.mapWith(ctx, w.conn, w.group, tables)
		if err != nil {
			return err
		}
		w.tables = m
	}
	ids, err := w.s.bucketIDs(ctx, w.conn, w.group, names, true)
	if err != nil {
		return err
	}
	w.bucketIDs = ids
	return nil
}

// hasTable tells whether the writer has the number of table id.
func (w *Writer) hasTable(id string) bool {
	if w.tables == nil {
		return false
	}
	_, ok := w.tables.num[id]
	return ok
}

// tableText is the source_table column of table id as text: the id (v1)
// or its number (v2).
func (w *Writer) tableText(id string) string {
	if !w.lay.interned {
		return id
	}
	return strconv.Itoa(int(w.tables.num[id]))
}

// table writes the source_table column of table id.
func (w *Writer) table(b *copyBuf, id string) {
	if w.lay.interned {
		b.int4(w.tables.num[id])
	} else {
		b.text(id)
	}
}

// bucket writes the bucket column of bucket name (v2: its id).
func (w *Writer) bucket(b *copyBuf, name string, id int64) {
	if w.lay.interned {
		b.int8(id)
	} else {
		b.text(name)
	}
}

// opColumns is the number of columns of copyOpsSQL in w's layout.
func (w *Writer) opColumns() int {
	if w.lay.interned {
		return 11
	}
	return 10
}

// objectType writes the object type column of an op of c: v2 leaves it
// NULL when it is the name of c's table (as is the rules' output table
// most often), which readers put back from the table's number; with the
// int4 checksum that takes 8 bytes off a todos op after alignment.
func (w *Writer) objectType(b *copyBuf, c *model.Change, typ string) {
	if w.lay.interned && typ == c.Table.Name && typ != "" {
		b.null()
		return
	}
	b.text(typ)
}

// objectID writes the object id column(s) of an op: v2 stores a
// canonical UUID id as its 16 bytes in object_uuid (21 bytes less than
// its text), any other id in object_id; readers format the UUID back to
// the same text.
func (w *Writer) objectID(b *copyBuf, id string) {
	if !w.lay.interned {
		b.text(id)
		return
	}
	if u, ok := parseUUID(id); ok {
		b.uuid(u)
		b.null()
		return
	}
	b.null()
	b.text(id)
}

// checksum writes an op's checksum column (see layout.checksumArg).
func (w *Writer) checksum(b *copyBuf, sum uint32) {
	if w.lay.interned {
		b.int4(int32(sum))
	} else {
		b.int8(int64(sum))
	}
}

func (w *Writer) encodeCurrent(c *model.Change) {
	b := &w.cur
	if w.lay.ordered {
		b.row(7)
	} else {
		b.row(6)
	}
	b.int4(int32(w.group))
	w.table(b, c.Table.ID)
	b.uuid(c.Key)
	if w.lay.interned {
		b.members(w.lay.compactMembers, c.Puts, c.Table.Name, w.bucketIDs)
	} else {
		start := b.beginArray(oidText, len(c.Puts))
		for j := range c.Puts {
			p := &c.Puts[j]
			b.elemMember(p.Bucket, p.ObjectType, p.ObjectID)
		}
		b.endArray(start)
	}
	if c.TracksLookups || len(c.Lookups) > 0 {
		start := b.beginArray(oidBytea, len(c.Lookups))
		for j := range c.Lookups {
			b.elem(c.Lookups[j].Key)
		}
		b.endArray(start)
	} else {
		b.null()
	}
	b.bytes(c.RowData)
	if w.lay.ordered {
		b.int4(c.KeyOrder)
	}
}

func (w *Writer) encodePut(c *model.Change, p *model.Put, id int64, res *Result) {
	b := &w.ops
	b.row(w.opColumns())
	b.int4(int32(w.group))
	w.bucket(b, p.Bucket, w.bucketIDs[p.Bucket])
	b.int8(id)
	b.int2(OpPut)
	w.table(b, c.Table.ID)
	b.uuid(c.Key)
	w.objectType(b, c, p.ObjectType)
	w.objectID(b, p.ObjectID)
	w.checksum(b, p.Checksum)
	b.bytes(p.Data)
	w.changed.bucket(p.Bucket)
	res.Ops++
	res.Bytes += int64(len(p.Data))
	res.MaxOpID = max(res.MaxOpID, id)
}

// encodeRemove encodes a REMOVE from bucket (v2: of id bucketID).
func (w *Writer) encodeRemove(c *model.Change, bucket string, bucketID int64, objectType, objectID string, sum uint32, id int64, res *Result) {
	b := &w.ops
	b.row(w.opColumns())
	b.int4(int32(w.group))
	w.bucket(b, bucket, bucketID)
	b.int8(id)
	b.int2(OpRemove)
	w.table(b, c.Table.ID)
	b.uuid(c.Key)
	w.objectType(b, c, objectType)
	w.objectID(b, objectID)
	w.checksum(b, sum)
	b.null()
	w.changed.bucket(bucket)
	res.Ops++
	res.MaxOpID = max(res.MaxOpID, id)
}

func (w *Writer) encodeParam(c *model.Change, lookup, params []byte, id int64, res *Result) {
	b := &w.params
	b.row(6)
	b.int8(id)
	b.int4(int32(w.group))
	b.text(c.Table.ID)
	b.uuid(c.Key)
	b.bytes(lookup)
	b.bytes(params)
	w.changed.lookup(lookup)
	res.Params++
	res.MaxOpID = max(res.MaxOpID, id)
}

// flushOps COPYs the encoded ops and parameter entries and queues the
// record of what they changed on tail.
func (w *Writer) flushOps(ctx context.Context, tx pgx.Tx, tail *pgx.Batch, res *Result) error {
	if res.Ops > 0 {
		w.ops.finish()
		if _, err := tx.Conn().PgConn().CopyFrom(ctx, w.ops.reader(), w.lay.copyOps); err != nil {
			return fmt.Errorf("copy ops: %w", err)
		}
	}
	if res.Params > 0 {
		w.params.finish()
		if _, err := tx.Conn().PgConn().CopyFrom(ctx, w.params.reader(), copyParamsSQL); err != nil {
			return fmt.Errorf("copy parameter entries: %w", err)
		}
	}
	w.recordChanges(tail, res)
	return nil
}

func isUniqueViolation(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "23505"
}
