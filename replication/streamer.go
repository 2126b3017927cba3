package replication

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/syncpipe/syncpipe/model"
	"github.com/syncpipe/syncpipe/pipeline"
	"github.com/syncpipe/syncpipe/sinks/bucketstore"
	"github.com/syncpipe/syncpipe/sources/postgres"
	"github.com/syncpipe/syncpipe/sources/postgres/logrepl"
	"github.com/syncpipe/syncpipe/stages"
)

// streamPos is the progress token of the stream pipeline: what the batch's
// write records in storage, and the streamer's batch number.
type streamPos struct {
	bucketstore.StreamProgress
	seq uint64
}

// streamBatch is one batch of the stream pipeline as its read stage makes
// it: changes bound to their layouts, not decoded yet.
type streamBatch = pipeline.Batch[rawItem, streamPos]

// tableState is the stream's view of one table of the group: the shape
// storage records for it (reloaded from storage at every stream start,
// kept in step with what this stream writes), the rules bound to that
// shape, and the relation the decoding is bound to.
type tableState struct {
	t      *table
	info   postgres.TableInfo // the catalog, as last discovered
	shape  shape
	layout *layout

	rel *logrepl.Relation // relation the layout decodes; nil until seen
	// oid is the source relation the stored rows come from, as storage
	// records it: the stream follows it through renames and schema moves.
	oid uint32

	// check is set when the catalog showed a shape other than the stored
	// one: once the stream passes check.lsn (the DDL is behind it) and the
	// table still has not been re-shaped by a relation, it is re-shaped to
	// the catalog's shape.
	check *catalogCheck
}

type catalogCheck struct {
	lsn  logrepl.LSN
	info postgres.TableInfo
}

// streamer is the read stage of the bucketstore stream: it turns logical
// replication batches into stream pipeline batches, binding every change
// to the layout of its table's shape at that point of the stream (and
// re-shaping tables whose shape changed), and interleaves the re-reads of
// re-shaped tables. It runs in the pipeline's source goroutine only; the
// toast state is shared with the decode stage.
type streamer struct {
	r     *Replicator
	g     *group
	side  *pgx.Conn // normal source connection: catalog reads, TOAST re-reads
	toast toastState

	byName map[string]*tableState // by schema.name (the rules')
	byID   map[string]*tableState // by storage table id
	byOID  map[uint32]*tableState // by the relation its stored rows come from

	// pos is the position after the last batch handed to the pipeline.
	pos bucketstore.StreamProgress
	// skip is the partly stored transaction of a resumed stream: its first
	// skip.TxnChanges changes are in storage already.
	skip bucketstore.StreamProgress
	// txnChanges counts the changes of the current source transaction
	// (RelationChanged events excluded), across its pieces.
	txnChanges int64

	queue []streamBatch // ready, not yet handed to the pipeline
	cur   *streamBatch  // being filled
	seq   uint64
	// lastItems is the item count of the last batch cut: the next batch's
	// slice starts at that capacity instead of growing from nothing.
	lastItems int
	// cutPos and cutTime are the end position and time of the last batch
	// cut; idleBytes are the source bytes of positions not cut since (see
	// idleWait).
	cutPos    bucketstore.StreamProgress
	cutTime   time.Time
	idleBytes int64

	resnaps    []*resnap // tables being re-read, first one active
	resnapTurn bool      // the next read is a re-read chunk
	lastCheck  time.Time // of the catalog (checkCatalog)

	st  *logrepl.Stream
	lim logrepl.BatchLimits
	// fence is the stream unit's lease, carried by every storage write.
	fence bucketstore.Fence
	lag   *lagTracker // replication lag metric (metrics.go)
}

// errTxnNotRedelivered: storage holds part of a source transaction the
// slot no longer delivers, so the group cannot be completed by streaming.
var errTxnNotRedelivered = errors.New("the slot no longer delivers a source transaction storage holds part of")

// open starts a new batch unless one is open.
func (s *streamer) open() *streamBatch {
	if s.cur == nil {
		s.seq++
		s.cur = &streamBatch{Progress: streamPos{seq: s.seq}}
		if s.lastItems > 0 {
			s.cur.Items = make([]rawItem, 0, s.lastItems)
		}
	}
	return s.cur
}

// position is where the changes so far leave the stream: inside txn (its
// first txnChanges changes) when txn is set.
func (s *streamer) position(txn *logrepl.Txn) bucketstore.StreamProgress {
	if txn == nil {
		return s.pos
	}
	n := s.txnChanges
	if s.skip.TxnLSN == txn.CommitLSN {
		// Storage holds more of the transaction than was re-delivered yet.
		n = max(n, s.skip.TxnChanges)
	}
	return bucketstore.StreamProgress{LSN: s.pos.LSN, TxnLSN: txn.CommitLSN, TxnChanges: n}
}

// cutAt queues the open batch (an empty one if none is open) ending at p.
func (s *streamer) cutAt(p bucketstore.StreamProgress) {
	b := s.open()
	b.Progress.LSN, b.Progress.TxnLSN, b.Progress.TxnChanges = p.LSN, p.TxnLSN, p.TxnChanges
	if b.Rows == 0 {
		b.Rows = len(b.Items)
	}
	b.Bytes += s.idleBytes
	s.idleBytes = 0
	s.lastItems = len(b.Items)
	s.queue = append(s.queue, *b)
	s.cur = nil
	s.cutPos, s.cutTime = p, time.Now()
}

// cut queues the open batch at the current position (inside txn if set).
func (s *streamer) cut(txn *logrepl.Txn) { s.cutAt(s.position(txn)) }

// cutIfAny is cut for a batch that holds something.
func (s *streamer) cutIfAny(txn *logrepl.Txn) {
	if s.cur != nil && (len(s.cur.Items) > 0 || len(s.cur.Progress.Tables) > 0) {
		s.cut(txn)
	}
}

// convert queues the pipeline batches of one logical replication batch: a
// TRUNCATE and a table shape change each get a batch of their own (their
// writes take several transactions, which a replay must be able to repeat
// harmlessly), everything else is applied in one batch. Batches that end
// inside a source transaction carry its commit LSN and change count.
func (s *streamer) convert(ctx context.Context, lb logrepl.Batch) error {
	queued := len(s.queue)
	for ti := range lb.Txns {
		txn := &lb.Txns[ti]
		if !txn.Continued {
			s.txnChanges = 0
		}
		skipping := false
		if s.skip.TxnLSN != 0 {
			if txn.CommitLSN != s.skip.TxnLSN {
				return fmt.Errorf("storage holds %d changes of the source transaction committed at %s, but the slot delivered the transaction at %s first: %w",
					s.skip.TxnChanges, s.skip.TxnLSN, txn.CommitLSN, errTxnNotRedelivered)
			}
			skipping = true
		}
		for i := range txn.Changes {
			c := &txn.Changes[i]
			if c.Kind == logrepl.RelationChanged {
				if err := s.relation(ctx, c.Relation, txn); err != nil {
					return err
				}
				continue
			}
			if skipping && s.txnChanges < s.skip.TxnChanges {
				s.txnChanges++
				continue // stored before the restart
			}
			if err := s.change(ctx, c, txn); err != nil {
				return err
			}
			s.txnChanges++
		}
		if txn.EndLSN != 0 { // the transaction is complete
			s.pos = bucketstore.StreamProgress{LSN: txn.EndLSN}
			s.txnChanges = 0
			s.skip = bucketstore.StreamProgress{}
		}
	}
	if len(s.queue) > queued || s.cur != nil {
		// Transactions that changed nothing the rules use are not waited
		// for: they are applied as soon as their position is recorded.
		s.lag.received(lb.Txns)
	}
	// The source bytes go to the last batch (for tracing and summaries).
	if lb.Partial {
		s.pos = s.position(&lb.Txns[0])
		if s.cur == nil {
			s.idleBytes += int64(lb.Bytes)
			return nil // a piece of changes the rules do not use: an idle position
		}
		s.open().Bytes += int64(lb.Bytes)
		s.cut(nil)
		return nil
	}
	if s.skip.TxnLSN != 0 && lb.EndLSN > s.skip.TxnLSN {
		return fmt.Errorf("storage holds %d changes of the source transaction committed at %s, but the slot moved on to %s: %w",
			s.skip.TxnChanges, s.skip.TxnLSN, lb.EndLSN, errTxnNotRedelivered)
	}
	if lb.EndLSN > s.pos.LSN {
		s.pos.LSN = lb.EndLSN // an idle position after the last transaction
	}
	switch {
	case s.cur != nil:
		s.open().Bytes += int64(lb.Bytes)
		s.cut(nil)
	case lb.EndLSN > 0:
		s.idleBytes += int64(lb.Bytes)
		if lb.Prompt || s.idleWait(time.Now()) == 0 {
			s.cut(nil)
		}
	}
	return s.checkCatalogDue(ctx)
}

// idleWait is how long the position not cut yet may still wait (0: it is
// due now); -1 when there is none. A position that carries no change
// becomes a batch (a storage commit, then an acknowledgement) only once
// replication.stream.idle_commit_interval has passed since the last batch
// cut. Recording every one at once would never let a stream go idle when
// storage shares the source's cluster: each commit writes WAL, which the
// slot's walsender reports as a new position (see doc.go, "Idle
// positions").
func (s *streamer) idleWait(now time.Time) time.Duration {
	switch {
	case s.pos.TxnLSN != 0 || s.pos.LSN <= s.cutPos.LSN && s.cutPos.TxnLSN == 0:
		return -1
	case s.cutPos.TxnLSN != 0:
		// The last batch ended inside a transaction (a TRUNCATE, a shape
		// change): the transaction's end publishes what it wrote.
		return 0
	}
	return max(0, s.r.cfg.Replication.Stream.IdleCommitInterval-now.Sub(s.cutTime))
}

// change adds one row change (or a TRUNCATE) of txn to the open batch.
func (s *streamer) change(ctx context.Context, c *logrepl.Change, txn *logrepl.Txn) error {
	if c.Kind == logrepl.Truncate {
		var items []rawItem
		for _, rel := range c.TruncateRelations {
			ts, err := s.bind(ctx, rel, txn)
			if err != nil {
				return err
			}
			if ts != nil {
				items = append(items, rawItem{lay: ts.layout, rc: stages.RowChange{Spec: ts.layout.spec, Kind: model.Truncate}})
			}
		}
		if len(items) == 0 {
			return nil
		}
		// Changes before it, then the TRUNCATE alone, each with its position.
		s.cutIfAny(txn)
		s.open().Items = items
		p := s.position(txn)
		p.TxnChanges++
		s.cutAt(p)
		return nil
	}
	ts, err := s.bind(ctx, c.Relation, txn)
	if err != nil || ts == nil {
		return err
	}
	b := s.open()
	b.Items = append(b.Items, rawItem{c: c, lay: ts.layout})
	return nil
}

// relation handles a RelationChanged event: the table's layout is
// re-bound (or the table re-shaped) before its next change.
func (s *streamer) relation(ctx context.Context, rel *logrepl.Relation, txn *logrepl.Txn) error {
	_, err := s.bind(ctx, rel, txn)
	return err
}

// bind returns the state of rel's table with its layout bound to rel,
// re-shaping the table first when rel's shape is not the stored one. It
// returns nil for a relation the rules do not use.
//
// A relation is the rules' table by its name, or — under any other name —
// by its OID: the table whose rows storage holds, renamed or moved to
// another schema. Its changes there apply as under its own name, so once
// it is back nothing was lost, without re-reading it (doc.go, "Renamed,
// moved and re-created tables"). Another table under the rules' name (the
// table was dropped and re-created, or another renamed into its place)
// has rows storage never saw: its table is emptied and re-read.
func (s *streamer) bind(ctx context.Context, rel *logrepl.Relation, txn *logrepl.Txn) (*tableState, error) {
	ts := s.byName[rel.Namespace+"."+rel.Name]
	if ts == nil {
		if ts = s.byOID[rel.ID]; ts == nil {
			return nil, nil // published but not used by the rules
		}
	}
	if ts.rel == rel {
		return ts, nil
	}
	if sh := relationShape(rel); rel.ID != ts.oid {
		if err := s.reshape(ctx, ts, sh, rel.ID, txn); err != nil {
			return nil, err
		}
	} else if !sh.equal(ts.shape) {
		if err := s.reshape(ctx, ts, sh, ts.oid, txn); err != nil {
			return nil, err
		}
	}
	ts.rel = rel
	ts.check = nil
	return ts, nil
}

// follow records that ts's stored rows come from relation oid from now
// on. A table that followed oid before loses it: oid is ts's now, and
// that table is re-read once its name shows another relation.
func (s *streamer) follow(ts *tableState, oid uint32) {
	if s.byOID[ts.oid] == ts {
		delete(s.byOID, ts.oid)
	}
	if other := s.byOID[oid]; other != nil && other != ts {
		other.oid = 0
	}
	ts.oid = oid
	s.byOID[oid] = ts
}

// newStreamer loads what storage records about the group's tables (shape,
// replica identity, re-reads in progress) and binds the rules to it, with
// decoding details from the source catalog.
func (r *Replicator) newStreamer(ctx context.Context, g *group, side *pgx.Conn, pos bucketstore.StreamProgress) (*streamer, error) {
	s := &streamer{r: r, g: g, side: side, byName: map[string]*tableState{}, byID: map[string]*tableState{},
		byOID: map[uint32]*tableState{}, pos: pos, cutPos: pos}
	if pos.TxnLSN != 0 {
		s.skip = pos
	}
	stored, err := r.store.SourceTables(ctx, g.g.ID)
	if err != nil {
		return nil, err
	}
	byID := make(map[string]bucketstore.SourceTable, len(stored))
	for _, st := range stored {
		byID[st.ID] = st
	}
	var names []string
	for _, t := range g.tables {
		names = append(names, t.info.QualifiedName())
	}
	infos, err := discover(ctx, side, names, g.rules)
	if errors.Is(err, postgres.ErrTableNotFound) {
		return nil, fmt.Errorf("%w: %w", err, errTableAway)
	}
	if err != nil {
		return nil, err
	}
	for _, t := range g.tables {
		st, ok := byID[t.stored.ID]
		if !ok || st.Shape == nil {
			return nil, fmt.Errorf("table %s of group %d has no stored shape", t.info.QualifiedName(), g.g.ID)
		}
		sh, err := parseShape(st.Shape)
		if err != nil {
			return nil, err
		}
		info := t.info
		for _, in := range infos {
			if in.OID == t.info.OID || in.Schema == t.info.Schema && in.Name == t.info.Name {
				info = in
			}
		}
		lay, err := newLayout(&t.stored.Table, g, sh, info)
		if err != nil {
			return nil, err
		}
		ts := &tableState{t: t, info: info, shape: sh, layout: lay}
		s.byName[info.Schema+"."+info.Name] = ts
		s.byID[t.stored.ID] = ts
		// The stored relation, not the catalog's: if another table has
		// the name now, the catalog check re-reads it once the stream
		// has passed what the old one's changes it still delivers.
		s.follow(ts, st.RelationID)
		if rp := st.Resnapshot; rp != nil {
			s.startResnap(ts, rp.LastKey, rp.Rows)
		}
	}
	return s, nil
}

// next is the pipeline source: the next queued batch, reading the slot (and
// re-reading tables whose shape changed, a chunk between stream batches)
// until there is one.
func (s *streamer) next(ctx context.Context) (streamBatch, error) {
	for len(s.queue) == 0 {
		if err := s.checkCatalogEvery(ctx); err != nil {
			return streamBatch{}, err
		}
		if len(s.resnaps) > 0 && s.resnapTurn {
			s.resnapTurn = false
			if err := s.resnapChunk(ctx); err != nil {
				return streamBatch{}, err
			}
			continue
		}
		s.resnapTurn = true
		wait := s.idleWait(time.Now())
		if wait == 0 {
			s.cut(nil) // the idle position is due
			continue
		}
		if len(s.resnaps) > 0 && (wait < 0 || s.lim.MaxWait < wait) {
			wait = s.lim.MaxWait // do not wait for the slot while a re-read has work
		}
		nctx, cancel := ctx, context.CancelFunc(func() {})
		if wait > 0 {
			nctx, cancel = context.WithTimeout(ctx, wait)
		}
		lb, err := s.st.Next(nctx, s.lim)
		cancel()
		if err != nil {
			if ctx.Err() == nil && nctx.Err() != nil {
				continue // the re-read's or the idle position's turn
			}
			return streamBatch{}, err
		}
		if err := s.convert(ctx, lb); err != nil {
			return streamBatch{}, err
		}
	}
	b := s.queue[0]
	s.queue[0] = streamBatch{}
	s.queue = s.queue[1:]
	return b, nil
}

// checkCatalogEvery runs checkCatalog at start and then every
// replication.stream.schema_check_interval (never when it is 0).
func (s *streamer) checkCatalogEvery(ctx context.Context) error {
	every := s.r.cfg.Replication.Stream.SchemaCheckInterval
	if every <= 0 || time.Since(s.lastCheck) < every {
		return nil
	}
	s.lastCheck = time.Now()
	if err := s.checkCatalog(ctx); err != nil {
		return err
	}
	return s.checkCatalogDue(ctx)
}

// close releases the re-reads' connections.
func (s *streamer) close() {
	for _, rs := range s.resnaps {
		rs.close()
	}
}
