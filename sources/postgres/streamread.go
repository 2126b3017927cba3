package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/syncpipe/syncpipe/model"
	"github.com/syncpipe/syncpipe/pipeline"
	"github.com/syncpipe/syncpipe/sources/postgres/logrepl"
	"github.com/syncpipe/syncpipe/stages"
)

// StreamItem is one item of the stream between its read and decode
// stages: a change from the slot with the table binding it decodes in
// (bound by the reader, which sees relations and shape changes in stream
// order), or, when Change is nil, a row change that needs no decoding (a
// TRUNCATE, a row read aside). Row.TxnLSN and Row.TxnIndex place a change
// in its source transaction.
type StreamItem struct {
	Change *logrepl.Change
	Table  *StreamTable
	Row    stages.RowChange
}

// StreamPosition is where a batch of the stream leaves off: LSN is the
// end of the last complete transaction (where a restarted stream starts);
// inside a transaction too large for one batch, TxnLSN is its commit LSN
// and TxnChanges counts its changes the sink holds with the batch.
type StreamPosition struct {
	LSN        logrepl.LSN
	TxnLSN     logrepl.LSN
	TxnChanges int64
}

// ErrTxnNotRedelivered: a stream resumed inside a transaction, but the
// slot did not deliver that transaction again; the changes the sink holds
// cannot be completed, and the pipeline must snapshot afresh.
var ErrTxnNotRedelivered = errors.New("the slot no longer delivers a source transaction the sink holds part of")

// StreamAside reads rows outside the slot that go to the sink between the
// stream's batches (the re-read of a re-shaped table), so every write
// applies in stream order.
type StreamAside[P any] interface {
	// Pending reports whether there is something to read.
	Pending() bool
	// ReadAside adds the next chunk's rows (and its progress) to b, a
	// batch of its own at the stream's current position.
	ReadAside(ctx context.Context, b *pipeline.Batch[StreamItem, P]) error
}

// StreamReaderConfig configures a StreamReader.
type StreamReaderConfig[P any] struct {
	// Limits bound the batches read from the slot.
	Limits logrepl.BatchLimits
	// From is the committed position to resume from; the stream must
	// have been started at From.LSN.
	From StreamPosition
	// Position records the position a batch leaves off at in its
	// progress. Required.
	Position func(*P, StreamPosition)
	// Tables are the pipeline's tables, Reshape what to do when one
	// changes shape. Required.
	Tables  []*ReadTable
	Reshape StreamTables[P]
	// IdleInterval is how often a position that carries no change (see
	// idleWait) becomes a batch; 0: each at once.
	IdleInterval time.Duration
	// Aside, if set, interleaves its rows with the stream's batches.
	Aside StreamAside[P]
	// Catalog, if set, is checked at the start and every CatalogInterval.
	Catalog         StreamCatalog
	CatalogInterval time.Duration
	// Received, if set, is told the transactions of every slot batch that
	// held a change for the pipeline (for lag metrics).
	Received func([]logrepl.Txn)
}

// StreamReader is the stream's read stage: it turns the batches of a
// logical replication stream into pipeline batches of changes bound to
// their tables, with the position each batch leaves off at. It follows a
// table by its relation's OID through renames, detects shape changes (in
// relations, and with Catalog in the catalog), gives a TRUNCATE and a
// shape change a batch of their own (a sink may need several
// transactions for them, which a replay must repeat harmlessly), resumes
// inside a transaction the sink holds part of by skipping the changes it
// holds (the slot delivers the transaction again from its start, with the
// same changes in the same order), and records idle positions no more
// often than IdleInterval. Its Next is a pipeline source; one goroutine
// only.
type StreamReader[P any] struct {
	st  *logrepl.Stream
	cfg StreamReaderConfig[P]

	byName map[string]*ReadTable // by schema.name (the pipeline's)
	byOID  map[uint32]*ReadTable // by the relation the sink's rows come from

	// pos is the position after the changes read so far.
	pos StreamPosition
	// skip is the partly held transaction of a resumed stream: its first
	// skip.TxnChanges changes are in the sink already.
	skip StreamPosition
	// txnChanges counts the changes of the current source transaction
	// (RelationChanged events excluded), across its pieces.
	txnChanges int64

	queue []pipeline.Batch[StreamItem, P] // ready, not yet handed on
	cur   *pipeline.Batch[StreamItem, P]  // being filled
	// lastItems is the item count of the last batch cut: the next batch's
	// slice starts at that capacity instead of growing from nothing.
	lastItems int
	// cutPos and cutTime are the end position and time of the last batch
	// cut; idleBytes are the source bytes of positions not cut since (see
	// idleWait).
	cutPos    StreamPosition
	cutTime   time.Time
	idleBytes int64

	asideTurn bool      // the next read is Aside's
	lastCheck time.Time // of the catalog
}

// NewStreamReader reads st as cfg says.
func NewStreamReader[P any](st *logrepl.Stream, cfg StreamReaderConfig[P]) *StreamReader[P] {
	// The position starts where the sink is: inside a transaction when it
	// holds part of one. A position-only batch cut before the rest of
	// that transaction arrives must say so, or the sink would record the
	// stream as past a transaction it holds only part of.
	r := &StreamReader[P]{st: st, cfg: cfg, byName: map[string]*ReadTable{}, byOID: map[uint32]*ReadTable{},
		pos: cfg.From, cutPos: cfg.From}
	if cfg.From.TxnLSN != 0 {
		r.skip = cfg.From
	}
	for _, t := range cfg.Tables {
		r.byName[t.Name] = t
		oid := t.OID
		t.OID = 0
		r.follow(t, oid)
	}
	return r
}

// Limits returns the batch limits the reader reads the slot with.
func (r *StreamReader[P]) Limits() logrepl.BatchLimits { return r.cfg.Limits }

// Next is the pipeline source: the next batch, reading the slot (and,
// with Aside, a chunk read aside between stream batches) until there is
// one. A batch may hold no change: it then carries an idle position.
func (r *StreamReader[P]) Next(ctx context.Context) (pipeline.Batch[StreamItem, P], error) {
	for len(r.queue) == 0 {
		if err := r.checkCatalogEvery(ctx); err != nil {
			return pipeline.Batch[StreamItem, P]{}, err
		}
		aside := r.cfg.Aside != nil && r.cfg.Aside.Pending()
		if aside && r.asideTurn {
			r.asideTurn = false
			if err := r.cfg.Aside.ReadAside(ctx, r.open()); err != nil {
				return pipeline.Batch[StreamItem, P]{}, err
			}
			r.cutAt(r.pos)
			continue
		}
		r.asideTurn = true
		wait := r.idleWait(time.Now())
		if wait == 0 {
			r.cut(nil) // the idle position is due
			continue
		}
		if aside && (wait < 0 || r.cfg.Limits.MaxWait < wait) {
			wait = r.cfg.Limits.MaxWait // do not wait for the slot while Aside has work
		}
		nctx, cancel := ctx, context.CancelFunc(func() {})
		if wait > 0 {
			nctx, cancel = context.WithTimeout(ctx, wait)
		}
		lb, err := r.st.Next(nctx, r.cfg.Limits)
		cancel()
		if err != nil {
			if ctx.Err() == nil && nctx.Err() != nil {
				continue // Aside's or the idle position's turn
			}
			return pipeline.Batch[StreamItem, P]{}, err
		}
		if err := r.convert(ctx, lb); err != nil {
			return pipeline.Batch[StreamItem, P]{}, err
		}
	}
	b := r.queue[0]
	r.queue[0] = pipeline.Batch[StreamItem, P]{}
	r.queue = r.queue[1:]
	return b, nil
}

// open starts a new batch unless one is open.
func (r *StreamReader[P]) open() *pipeline.Batch[StreamItem, P] {
	if r.cur == nil {
		r.cur = &pipeline.Batch[StreamItem, P]{}
		if r.lastItems > 0 {
			r.cur.Items = make([]StreamItem, 0, r.lastItems)
		}
	}
	return r.cur
}

// position is where the changes so far leave the stream: inside txn (its
// first txnChanges changes) when txn is set.
func (r *StreamReader[P]) position(txn *logrepl.Txn) StreamPosition {
	if txn == nil {
		return r.pos
	}
	n := r.txnChanges
	if r.skip.TxnLSN == txn.CommitLSN {
		// The sink holds more of the transaction than was re-delivered yet.
		n = max(n, r.skip.TxnChanges)
	}
	return StreamPosition{LSN: r.pos.LSN, TxnLSN: txn.CommitLSN, TxnChanges: n}
}

// cutAt queues the open batch (an empty one if none is open) ending at p.
func (r *StreamReader[P]) cutAt(p StreamPosition) {
	b := r.open()
	r.cfg.Position(&b.Progress, p)
	if b.Rows == 0 {
		b.Rows = len(b.Items)
	}
	b.Bytes += r.idleBytes
	r.idleBytes = 0
	r.lastItems = len(b.Items)
	r.queue = append(r.queue, *b)
	r.cur = nil
	r.cutPos, r.cutTime = p, time.Now()
}

// cut queues the open batch at the current position (inside txn if set).
func (r *StreamReader[P]) cut(txn *logrepl.Txn) { r.cutAt(r.position(txn)) }

// cutIfAny is cut for a batch that holds changes.
func (r *StreamReader[P]) cutIfAny(txn *logrepl.Txn) {
	if r.cur != nil && len(r.cur.Items) > 0 {
		r.cut(txn)
	}
}

// convert queues the pipeline batches of one logical replication batch: a
// TRUNCATE and a table shape change each get a batch of their own,
// everything else goes in one batch. Batches that end inside a source
// transaction carry its commit LSN and change count.
func (r *StreamReader[P]) convert(ctx context.Context, lb logrepl.Batch) error {
	queued := len(r.queue)
	for ti := range lb.Txns {
		txn := &lb.Txns[ti]
		if !txn.Continued {
			r.txnChanges = 0
		}
		skipping := false
		if r.skip.TxnLSN != 0 {
			if txn.CommitLSN != r.skip.TxnLSN {
				return fmt.Errorf("the sink holds %d changes of the source transaction committed at %s, but the slot delivered the transaction at %s first: %w",
					r.skip.TxnChanges, r.skip.TxnLSN, txn.CommitLSN, ErrTxnNotRedelivered)
			}
			skipping = true
		}
		for i := range txn.Changes {
			c := &txn.Changes[i]
			if c.Kind == logrepl.RelationChanged {
				if _, err := r.bind(ctx, c.Relation, txn); err != nil {
					return err
				}
				continue
			}
			if skipping && r.txnChanges < r.skip.TxnChanges {
				r.txnChanges++
				continue // held by the sink since before the restart
			}
			if err := r.change(ctx, c, txn); err != nil {
				return err
			}
			r.txnChanges++
		}
		if txn.EndLSN != 0 { // the transaction is complete
			r.pos = StreamPosition{LSN: txn.EndLSN}
			r.txnChanges = 0
			r.skip = StreamPosition{}
		}
	}
	if r.cfg.Received != nil && (len(r.queue) > queued || r.cur != nil) {
		// Transactions that changed nothing the pipeline uses are not
		// waited for: they are applied as soon as their position is
		// recorded.
		r.cfg.Received(lb.Txns)
	}
	// The source bytes go to the last batch (for tracing and summaries).
	if lb.Partial {
		r.pos = r.position(&lb.Txns[0])
		if r.cur == nil {
			r.idleBytes += int64(lb.Bytes)
			return nil // a piece of changes the pipeline does not use: an idle position
		}
		r.open().Bytes += int64(lb.Bytes)
		r.cut(nil)
		return nil
	}
	if r.skip.TxnLSN != 0 && lb.EndLSN > r.skip.TxnLSN {
		return fmt.Errorf("the sink holds %d changes of the source transaction committed at %s, but the slot moved on to %s: %w",
			r.skip.TxnChanges, r.skip.TxnLSN, lb.EndLSN, ErrTxnNotRedelivered)
	}
	if lb.EndLSN > r.pos.LSN {
		r.pos.LSN = lb.EndLSN // an idle position after the last transaction
	}
	switch {
	case r.cur != nil:
		r.open().Bytes += int64(lb.Bytes)
		r.cut(nil)
	case lb.EndLSN > 0:
		r.idleBytes += int64(lb.Bytes)
		if lb.Prompt || r.idleWait(time.Now()) == 0 {
			r.cut(nil)
		}
	}
	return r.checkCatalogDue(ctx)
}

// idleWait is how long the position not cut yet may still wait (0: it is
// due now); -1 when there is none. A position that carries no change
// becomes a batch (a sink commit, then an acknowledgement) only once
// IdleInterval has passed since the last batch cut. Recording every one
// at once would never let a stream go idle when the sink writes to the
// source's cluster: each commit writes WAL, which the slot's walsender
// reports as a new position (replication/doc.go, "Idle positions").
func (r *StreamReader[P]) idleWait(now time.Time) time.Duration {
	switch {
	case r.pos.TxnLSN != 0 || r.pos.LSN <= r.cutPos.LSN && r.cutPos.TxnLSN == 0:
		return -1
	case r.cutPos.TxnLSN != 0:
		// The last batch ended inside a transaction (a TRUNCATE, a shape
		// change): the transaction's end publishes what it wrote.
		return 0
	}
	return max(0, r.cfg.IdleInterval-now.Sub(r.cutTime))
}

// change adds one row change (or a TRUNCATE) of txn to the open batch.
func (r *StreamReader[P]) change(ctx context.Context, c *logrepl.Change, txn *logrepl.Txn) error {
	row := stages.RowChange{TxnLSN: uint64(txn.CommitLSN), TxnIndex: r.txnChanges}
	if c.Kind == logrepl.Truncate {
		var items []StreamItem
		for _, rel := range c.TruncateRelations {
			t, err := r.bind(ctx, rel, txn)
			if err != nil {
				return err
			}
			if t != nil {
				row.Spec, row.Kind = t.Table.Spec, model.Truncate
				items = append(items, StreamItem{Table: t.Table, Row: row})
			}
		}
		if len(items) == 0 {
			return nil
		}
		// Changes before it, then the TRUNCATE alone, each with its position.
		r.cutIfAny(txn)
		r.open().Items = items
		p := r.position(txn)
		p.TxnChanges++
		r.cutAt(p)
		return nil
	}
	t, err := r.bind(ctx, c.Relation, txn)
	if err != nil || t == nil {
		return err
	}
	b := r.open()
	b.Items = append(b.Items, StreamItem{Change: c, Table: t.Table, Row: row})
	return nil
}
