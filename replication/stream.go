package replication

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/syncpipe/syncpipe/config"
	"github.com/syncpipe/syncpipe/pipeline"
	"github.com/syncpipe/syncpipe/sinks"
	"github.com/syncpipe/syncpipe/sinks/bucketstore"
	"github.com/syncpipe/syncpipe/sources/postgres"
	"github.com/syncpipe/syncpipe/sources/postgres/logrepl"
	"github.com/syncpipe/syncpipe/stages"
)

// closeTimeout bounds the I/O of closing a connection or a stream: a
// shutdown never waits on a dead peer for longer.
const closeTimeout = 5 * time.Second

// submitStream queues the group's stream unit.
func (r *Replicator) submitStream(g *group) error {
	if r.opts.Role == "replication:snapshot" {
		return nil
	}
	unit := fmt.Sprintf("group %d stream", g.g.ID)
	return r.sched.Submit(pipeline.Unit{
		Key:      unit,
		Kind:     "stream",
		Priority: g.prio + 1,
		Run: r.leased(streamLease(g), func(ctx context.Context, f bucketstore.Fence) error {
			err := r.retry(ctx, g.g.ID, unit, "stream", func(ctx context.Context) error {
				return r.stream(ctx, g, f)
			})
			switch {
			case err == nil || ctx.Err() != nil:
				return nil
			case slotGone(err), errors.Is(err, postgres.ErrTxnNotRedelivered):
				return r.replaceRetrying(ctx, g, err)
			case publicationProblem(err):
				// Changes made while the publication did not publish the
				// tables are lost to this slot: once it is fixed, a new
				// group re-snapshots while this one keeps serving.
				if err := r.awaitPublication(ctx, g, err); err != nil || ctx.Err() != nil {
					return err
				}
				return r.replaceRetrying(ctx, g, err)
			case errors.Is(err, bucketstore.ErrGroupStopped):
				return r.retire(ctx, g.g)
			}
			return err
		}),
	})
}

// replaceRetrying is replace, retried while storage or the source fail.
func (r *Replicator) replaceRetrying(ctx context.Context, g *group, cause error) error {
	return r.retry(ctx, g.g.ID, fmt.Sprintf("group %d replace", g.g.ID), "stream", func(ctx context.Context) error {
		return r.replace(ctx, g, cause)
	})
}

// closeCtx bounds clean-up I/O that must run even when ctx has ended.
func closeCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), closeTimeout)
}

// stream applies the group's slot to storage until ctx ends: read →
// decode → eval → build → probe → one writer (changes of a row must apply
// in order) → commit: publish a checkpoint, make storage durable, then
// acknowledge the LSN to the source. Every connection it opens is closed
// on every way out, with bounded I/O.
func (r *Replicator) stream(ctx context.Context, g *group, f bucketstore.Fence) (err error) {
	// A retry inside the unit starts here: the lease may have gone while
	// the last attempt failed.
	if err := r.fences.CheckFence(ctx, f); err != nil {
		return err
	}
	// The attempt's writes go through only on the storage run its
	// position comes from (see bucketstore.ErrStorageRestarted).
	f.Epoch = r.fences.Epoch()
	pos, _, err := r.writes.StreamResume(ctx, g.g.ID)
	if err != nil {
		return err
	}
	if h := r.hooks.streamResumed; h != nil {
		h(ctx, g.g.ID)
	}
	side, err := r.connectSource(ctx)
	if err != nil {
		return err
	}
	defer closeConn(side)
	s, err := r.newStreamer(ctx, g, side, pos)
	if err != nil {
		return err
	}
	defer s.close()

	r.log.Info("streaming from the replication slot", "group", g.g.ID, "slot", g.g.SlotName, "lsn", pos.LSN.String())
	st, closeStream, err := r.takeSlot(ctx, side, g, f, pos.LSN)
	if err != nil {
		return err
	}
	defer closeStream()
	s.fence = f
	s.lag = r.metrics.streaming(g.g.ID)
	defer s.lag.stop()
	s.lim = streamLimits(r.pl.Stages.BatchMaxRows, int(r.pl.Stages.BatchMaxBytes), r.cfg.Replication.Stream.BatchMaxWait)
	s.start(st)
	return r.runStream(ctx, g, s, st)
}

// eagerSlotWait bounds a wait for the slot when batches are eager
// (batch_max_wait 0) and a table re-read waits for its turn.
const eagerSlotWait = 20 * time.Millisecond

// streamLimits are the stream's batch limits. batch_max_wait 0 makes
// batches eager (logrepl.BatchLimits.Eager): measured at 5,000 changes/s,
// a 50 ms collection window was most of the commit → checkpoint latency.
func streamLimits(rows, bytes int, wait time.Duration) logrepl.BatchLimits {
	if wait <= 0 {
		return logrepl.BatchLimits{MaxChanges: rows, MaxBytes: bytes, MaxWait: eagerSlotWait, Eager: true}
	}
	return logrepl.BatchLimits{MaxChanges: rows, MaxBytes: bytes, MaxWait: wait}
}

// eagerInFlight is the stream's bound on uncommitted batches when batches
// are eager: one committing, one being written, one decoded ahead. More
// would only queue small batches in front of the writer (measured at
// 5,000 changes/s in 100-row transactions: commit → checkpoint p50 1 s
// with the channels full of them).
const eagerInFlight = 3

// maxInFlight is pipeline.Config.MaxInFlight for a stream read with lim.
func maxInFlight(lim logrepl.BatchLimits) int {
	if lim.Eager {
		return eagerInFlight
	}
	return 0
}

// streamSource adapts the group's stream reader to the stream pipeline's
// source: the position a batch leaves off at becomes its progress, and the
// table records its write stores (shapes, re-read progress) go with it as
// side data (bucketstore.StreamTables).
func streamSource(rd *postgres.StreamReader[streamPos]) pipeline.SourceFunc[postgres.StreamItem, sinks.Position] {
	return func(ctx context.Context) (pipeline.Batch[postgres.StreamItem, sinks.Position], error) {
		sb, err := rd.Next(ctx)
		if err != nil {
			return pipeline.Batch[postgres.StreamItem, sinks.Position]{}, err
		}
		p := sb.Progress
		b := pipeline.Batch[postgres.StreamItem, sinks.Position]{Rows: sb.Rows, Bytes: sb.Bytes, Items: sb.Items,
			Progress: sinks.Position{LSN: uint64(p.LSN), TxnLSN: uint64(p.TxnLSN), TxnChanges: p.TxnChanges}}
		if len(p.Tables) > 0 {
			pipeline.Attach(&b, bucketstore.StreamTables, p.Tables)
		}
		return b, nil
	}
}

// runStream builds and runs the stream pipeline: the streamer's batches →
// decode → the shared chain into the group's sink (eval → build → probe
// (the rows' stored state) → one storage writer → ordered commit), whose
// published checkpoints this feeds to acknowledgements, lag and group
// activation.
func (r *Replicator) runStream(ctx context.Context, g *group, s *streamer, st *logrepl.Stream) error {
	p := pipeline.New[sinks.Position](pipeline.Config{Name: fmt.Sprintf("stream group %d", g.g.ID), Tracer: r.opts.Tracer,
		Depth: r.pl.Stages.ChannelDepth, MaxInFlight: maxInFlight(s.lim)})
	// Changes of a row must reach the single writer in stream order:
	// decode stays on one goroutine (readDecode), and the chain keeps
	// batch order for an ordered sink.
	decoded, dec := r.readDecode(p, g, s)
	defer dec.Close()
	active := g.state() == bucketstore.StateActive
	// Acknowledgements trail the checkpoints: storage may commit
	// asynchronously, so only a flushed WAL makes a position safe to
	// confirm to the source. A published checkpoint is flushed (Commit
	// waits for it), but a batch that publishes none — inside a source
	// transaction, or a keepalive — is not, so MakeDurable comes first.
	// The slot only needs to advance now and then to free source WAL, but
	// it must reach an idle stream's last position too: a source server
	// shutting down waits for its walsenders' clients to confirm the end
	// of its WAL. So a ticker, not the next batch, acknowledges.
	bs := r.writes.FencedSink(g.g.ID, s.fence)
	var committed atomic.Uint64 // end LSN of the last committed transaction
	var durable atomic.Uint64   // the LSN of the last published checkpoint, durable as Commit returned
	ack := func(ctx context.Context) error {
		lsn := logrepl.LSN(committed.Load())
		if lsn <= st.Acked() {
			return nil
		}
		if lsn > logrepl.LSN(durable.Load()) {
			if err := bs.MakeDurable(ctx); err != nil {
				return err
			}
		}
		st.Ack(lsn)
		return nil
	}
	actx, stopAcks := context.WithCancel(ctx)
	var acks sync.WaitGroup
	acks.Go(func() { r.ackEvery(actx, time.Second, ack) })
	onCommit := func(ctx context.Context, b sinks.Batch, published bool) error {
		dec.Committed(b.Seq)
		if b.Progress.TxnLSN != 0 {
			return nil // inside a source transaction: nothing published
		}
		lsn := logrepl.LSN(b.Progress.LSN)
		if published {
			durable.Store(uint64(lsn))
		}
		committed.Store(uint64(lsn))
		s.lag.checkpointed(lsn)
		r.recovered(ctx, g.g.ID)
		if !active {
			// The first checkpoint of a processing group activates it and
			// stops the group it replaces, whose clean-up is due now.
			cur, err := r.catalog.Group(ctx, g.g.ID)
			if err != nil {
				return err
			}
			if active = cur.State == bucketstore.StateActive; active {
				g.setState(bucketstore.StateActive)
				return r.submitRetirements(ctx)
			}
		}
		return nil
	}
	err := stages.Chain(ctx, decoded, r.streamSink(bs), stages.ChainConfig{EvalWorkers: r.streamEvalWorkers(),
		Stream: true, OnRowError: r.rowError, OnCommit: onCommit})
	if err == nil {
		err = p.Run(ctx)
	}
	stopAcks()
	acks.Wait()
	// Confirm what storage holds before the stream's final status.
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.cfg.Replication.StorageTimeout)
	aerr := ack(fctx)
	cancel()
	if aerr != nil && err == nil && ctx.Err() == nil {
		err = aerr
	}
	if ctx.Err() != nil {
		return nil
	}
	return err
}

// ackEvery calls ack every interval until ctx ends. A failure is logged
// and tried again at the next tick: the position stays unconfirmed, which
// costs source WAL, never data, and the commit stage reports storage
// trouble itself.
func (r *Replicator) ackEvery(ctx context.Context, interval time.Duration, ack func(context.Context) error) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		sctx, cancel := r.storageCtx(ctx)
		err := ack(sctx)
		cancel()
		if err != nil && ctx.Err() == nil {
			r.log.Warn("cannot confirm the stream position to the source yet", "err", err)
		}
	}
}

// streamEvalWorkers is the stream's eval and build parallelism: the
// pipeline's eval_workers, else two — the stream is one unit, and its
// writer, not evaluation, is what bounds it.
func (r *Replicator) streamEvalWorkers() int {
	if w := r.pl.Stages.EvalWorkers; w > 0 {
		return w
	}
	return 2
}

// startSlot starts streaming slot from lsn over a replication connection
// to pl's source and, with source.heartbeat_interval set, sends a
// periodic logical message on a second connection, which keeps the slot
// advancing while the published tables are idle so the server can
// recycle WAL. closeStream stops the heartbeat and then sends the final
// status and closes the connection (it cannot stream again, see
// logrepl.Stream.Close), all with bounded I/O.
func startSlot(ctx context.Context, cfg *config.Config, pl config.Pipeline, slot string, lsn logrepl.LSN, log *slog.Logger) (st *logrepl.Stream, closeStream func(), err error) {
	conn, err := logrepl.Connect(ctx, replicationURI(pl.Source.URI, cfg.Source.ConnectTimeout, true))
	if err != nil {
		return nil, nil, err
	}
	rs := cfg.Replication.Stream
	st, err = logrepl.Start(ctx, conn, logrepl.Config{Slot: slot, Publication: pl.Source.Publication, StartLSN: lsn,
		StatusInterval: rs.StatusInterval, ReceiveTimeout: rs.ReceiveTimeout})
	if err != nil {
		cctx, cancel := closeCtx()
		conn.Close(cctx)
		cancel()
		return nil, nil, err
	}
	var wg sync.WaitGroup
	hctx, stop := context.WithCancel(ctx)
	closeStream = func() {
		stop()
		wg.Wait() // the heartbeat ends before the connections are gone
		cctx, cancel := closeCtx()
		defer cancel()
		_ = st.Close(cctx)
		conn.Close(cctx)
	}
	if every := cfg.Source.HeartbeatInterval; every > 0 {
		hb, err := postgres.Connect(ctx, pl.Source.URI, cfg.Source.ConnectTimeout)
		if err != nil {
			closeStream()
			return nil, nil, err
		}
		wg.Go(func() {
			defer closeConn(hb)
			if err := logrepl.RunHeartbeat(hctx, hb, every); err != nil {
				log.Warn("heartbeat stopped", "err", err)
			}
		})
	}
	return st, closeStream, nil
}

// takeSlot starts the group's slot. The slot belongs to the holder of the
// stream unit's lease, which this process is: a connection still using it
// is a holder that lost the lease (paused past it, or cut off), so it is
// terminated and the start tried again.
func (r *Replicator) takeSlot(ctx context.Context, side *pgx.Conn, g *group, f bucketstore.Fence, lsn logrepl.LSN) (*logrepl.Stream, func(), error) {
	for attempt := 0; ; attempt++ {
		st, closeStream, err := startSlot(ctx, r.cfg, r.pl, g.g.SlotName, lsn, r.log.With("group", g.g.ID))
		if !errors.Is(err, logrepl.ErrSlotInUse) || attempt >= 10 {
			return st, closeStream, err
		}
		if attempt == 0 {
			r.log.Warn("the group's slot is used by a process that no longer holds the stream; terminating its connection",
				"group", g.g.ID, "slot", g.g.SlotName, "err", err)
		}
		// Only the lease's holder may take the slot: a process that woke
		// from a pause (or whose stream failed) after losing the lease
		// must not cut off the process that took the unit over.
		if err := r.fences.CheckFence(ctx, f); err != nil {
			return nil, nil, err
		}
		if _, err := side.Exec(ctx, `SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots
			WHERE slot_name = $1 AND active_pid IS NOT NULL`, g.g.SlotName); err != nil {
			return nil, nil, fmt.Errorf("terminate the connection using slot %s: %w", g.g.SlotName, err)
		}
		select {
		case <-ctx.Done():
			return nil, nil, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// storageCtx bounds one storage write or commit: by
// replication.storage_timeout, and once ctx ends (the unit's lease lost,
// a stage failed, shutdown) by closeTimeout more. A write in flight is not
// cut off when its unit ends: cancelling it would close its connection
// and leave the outcome to when the server notices; it ends on its own,
// and its lease fence decides whether it commits (see bucketstore.Fence).
func (r *Replicator) storageCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	var wctx context.Context
	var cancel context.CancelFunc
	if d := r.cfg.Replication.StorageTimeout; d > 0 {
		wctx, cancel = context.WithTimeout(context.WithoutCancel(ctx), d)
	} else {
		wctx, cancel = context.WithCancel(context.WithoutCancel(ctx))
	}
	stop := context.AfterFunc(ctx, func() {
		t := time.NewTimer(closeTimeout)
		defer t.Stop()
		select {
		case <-wctx.Done():
		case <-t.C:
			cancel()
		}
	})
	return wctx, func() {
		stop()
		cancel()
	}
}

// closeConn closes a source connection with bounded I/O.
func closeConn(c *pgx.Conn) {
	ctx, cancel := closeCtx()
	defer cancel()
	_ = c.Close(ctx)
}

// replicationURI is the source URI for replication connections: the
// configured connect timeout and, for streaming, the snapshot's session
// parameters, so pgoutput prints values (dates, intervals, floats, bytea)
// in the same text form the snapshot decoded: the same row must give the
// same data and checksum on both paths. Unknown URI parameters become
// startup settings.
func (r *Replicator) replicationURI(stream bool) string {
	return replicationURI(r.pl.Source.URI, r.cfg.Source.ConnectTimeout, stream)
}

// replicationURI is uri with the connect timeout d and, for streaming, the
// snapshot's session parameters (see Replicator.replicationURI).
func replicationURI(uri string, d time.Duration, stream bool) string {
	u, err := url.Parse(uri)
	if err != nil {
		return uri
	}
	q := u.Query()
	if d > 0 && !q.Has("connect_timeout") {
		q.Set("connect_timeout", strconv.Itoa(max(1, int((d+time.Second-1)/time.Second))))
	}
	if stream {
		for k, v := range postgres.SessionParams() {
			if !q.Has(k) {
				q.Set(k, v)
			}
		}
	}
	// Spaces as %20: the connection string parser does not read '+'.
	u.RawQuery = strings.ReplaceAll(q.Encode(), "+", "%20")
	return u.String()
}

// readDecode adds the stream's read and decode stages to p: the group's
// stream reader (the slot, with relation binding, re-shapes and re-reads:
// streamer.go) → decode, which merges unchanged TOAST values from the
// rows' previous states — the ones not committed yet, then storage's — and
// so decodes on one goroutine whatever decode_workers says. Tell the
// decoder every committed batch, and close it when the stream ends.
func (r *Replicator) readDecode(p *pipeline.Pipeline[sinks.Position], g *group, s *streamer) (*pipeline.Stream[stages.RowChange, sinks.Position], *postgres.StreamDecoder) {
	src := pipeline.From(p, pipeline.StageConfig{Name: "read"}, streamSource(s.rd))
	dec := postgres.NewStreamDecoder(postgres.DecodeConfig{Rows: groupRows{r.writes, g.g.ID}, Connect: r.connectSource,
		Log: r.log, Merged: &r.toastMerged, Reread: &r.toastReread})
	return postgres.Decode(src, pipeline.StageConfig{Name: postgres.StageDecode}, dec), dec
}

// groupRows is the stored row data of a group, from which the stream
// merges unchanged TOAST values (postgres.RowStore).
type groupRows struct {
	store groupWrites
	group int
}

// RowData reads the stored row data of refs.
func (g groupRows) RowData(ctx context.Context, refs []postgres.RowRef) (map[postgres.RowRef][]byte, error) {
	rows := make([]bucketstore.RowRef, len(refs))
	for i, ref := range refs {
		rows[i] = bucketstore.RowRef(ref)
	}
	got, err := g.store.RowData(ctx, g.group, rows)
	if err != nil {
		return nil, err
	}
	out := make(map[postgres.RowRef][]byte, len(got))
	for ref, data := range got {
		out[postgres.RowRef(ref)] = data
	}
	return out, nil
}
