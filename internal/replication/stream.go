package replication

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/syncpipe/syncpipe/pipeline"
	"github.com/syncpipe/syncpipe/sinks"
	"github.com/syncpipe/syncpipe/sinks/bucketstore"
	"github.com/syncpipe/syncpipe/sources/postgres"
	"github.com/syncpipe/syncpipe/sources/postgres/logrepl"
	"github.com/syncpipe/syncpipe/stages"
	"github.com/syncpipe/syncpipe/stages/syncrules"
)

// submitStream queues the group's stream unit.
func (r *Replicator) submitStream(g *group) error {
	if r.opts.Role == "replication:snapshot" {
		return nil
	}
	return r.sched.Submit(pipeline.Unit{
		Key:      fmt.Sprintf("group %d stream", g.g.ID),
		Kind:     "stream",
		Priority: g.prio + 1,
		Run: func(ctx context.Context) error {
			err := r.retry(ctx, fmt.Sprintf("group %d stream", g.g.ID), func(ctx context.Context) error {
				return r.stream(ctx, g)
			})
			switch {
			case slotGone(err):
				return r.replace(ctx, g, err)
			case errors.Is(err, bucketstore.ErrGroupStopped):
				return r.retire(ctx, g.g)
			}
			return err
		},
	})
}

// streamTable maps a pgoutput relation onto a table of the group.
type streamTable struct {
	t       *table
	rel     *logrepl.Relation
	cols    []int // relation column → TableInfo column (-1: not replicated)
	builder *stages.Builder
	begun   uint64 // the streamer's batch the builder's arenas were started for
}

// streamer turns logical replication batches into storage changes. It runs
// in the pipeline's source goroutine, so it needs no locking.
type streamer struct {
	r      *Replicator
	g      *group
	side   *pgx.Conn // normal source connection: re-reads and re-snapshots
	byOID  map[uint32]*streamTable
	byName map[string]*table
	byID   map[string]*table // by storage table id
	toast  toastState

	// batchSeq counts batches; a table's builder starts fresh arenas, sized
	// for the batch, the first time the batch has a change of it (not for
	// every known table at every batch).
	batchSeq              uint64
	batchRows, batchBytes int
}

// stream applies the group's slot to storage until ctx ends: read →
// decode, eval and op build → one writer (changes of a row must apply in
// order) → commit: publish a checkpoint, make storage durable, then
// acknowledge the LSN to the source.
func (r *Replicator) stream(ctx context.Context, g *group) error {
	sink := r.sink(g)
	pos, _, err := sink.Resume(ctx, "", 0)
	if err != nil {
		return err
	}
	conn, err := logrepl.Connect(ctx, streamURI(r.cfg.Source.URI))
	if err != nil {
		return err
	}
	r.log.Info("streaming from the replication slot", "group", g.g.ID, "slot", g.g.SlotName, "lsn", logrepl.LSN(pos.LSN).String())
	st, err := logrepl.Start(ctx, conn, logrepl.Config{
		Slot: g.g.SlotName, Publication: r.cfg.Source.Publication, StartLSN: logrepl.LSN(pos.LSN),
		StatusInterval: r.cfg.Replication.Stream.StatusInterval, ReceiveTimeout: r.cfg.Replication.Stream.ReceiveTimeout,
	})
	if err != nil {
		conn.Close(context.WithoutCancel(ctx))
		return err
	}
	defer st.Close(context.WithoutCancel(ctx))
	side, err := r.connectSource(ctx)
	if err != nil {
		return err
	}
	defer side.Close(context.WithoutCancel(ctx))

	if every := r.cfg.Source.HeartbeatInterval; every > 0 {
		// A periodic logical message keeps the slot advancing while the
		// published tables are idle, so the server can recycle WAL.
		hb, err := r.connectSource(ctx)
		if err != nil {
			return err
		}
		hctx, stopHB := context.WithCancel(ctx)
		defer stopHB()
		go func() {
			defer hb.Close(context.WithoutCancel(ctx))
			if err := logrepl.RunHeartbeat(hctx, hb, every); err != nil {
				r.log.Warn("heartbeat stopped", "group", g.g.ID, "err", err)
			}
		}()
	}
	s := &streamer{r: r, g: g, side: side, byOID: map[uint32]*streamTable{}, byName: map[string]*table{}, byID: map[string]*table{}}
	for _, t := range g.tables {
		s.byName[t.info.Schema+"."+t.info.Name] = t
		s.byID[t.stored.Table.ID] = t
	}
	lim := logrepl.BatchLimits{MaxChanges: r.cfg.Replication.Stream.BatchMaxRows,
		MaxBytes: int(r.cfg.Replication.Stream.BatchMaxBytes), MaxWait: r.cfg.Replication.Stream.BatchMaxWait}
	p := pipeline.New[sinks.Position](pipeline.Config{Name: fmt.Sprintf("stream group %d", g.g.ID), Tracer: r.opts.Tracer})
	src := pipeline.From(p, pipeline.StageConfig{Name: "read+eval"}, pipeline.SourceFunc[stages.Change, sinks.Position](
		func(ctx context.Context) (sinks.Batch, error) {
			for {
				lb, err := st.Next(ctx, lim)
				if err != nil {
					return sinks.Batch{}, err
				}
				if lb.Partial {
					// TODO(stream): large transactions are applied whole for now.
					return sinks.Batch{}, errors.New("a source transaction exceeds replication.stream.batch_max_rows: raise the limit")
				}
				b, err := s.batch(ctx, lb)
				if err != nil {
					return b, err
				}
				if len(b.Items) > 0 || lb.EndLSN > 0 {
					return b, nil
				}
			}
		}))
	active := g.g.State == bucketstore.StateActive
	// Acknowledgements trail the checkpoints: storage may commit
	// asynchronously, so only a flushed WAL makes a position safe to
	// confirm to the source, and one WAL flush a second instead of one per
	// batch keeps fsyncs off the path from source commit to checkpoint.
	// The slot only needs to advance now and then to free source WAL.
	const ackEvery = time.Second
	var committed uint64 // end LSN of the last committed batch
	var lastAck time.Time
	ack := func(ctx context.Context) error {
		lsn := committed
		if err := r.store.MakeDurable(ctx); err != nil {
			return err
		}
		st.Ack(logrepl.LSN(lsn))
		lastAck = time.Now()
		return nil
	}
	w, err := sink.Writer(ctx, 0)
	if err != nil {
		return err
	}
	flushed := pipeline.Flush(src, pipeline.StageConfig{Name: sinks.StageFlush}, []sinks.Writer{w})
	pipeline.Commit(flushed, pipeline.StageConfig{Name: sinks.StageCommit}, func(ctx context.Context, b sinks.Batch) error {
		if err := sink.Commit(ctx, b); err != nil {
			return err
		}
		s.toast.committed(b.Progress.LSN)
		committed = b.Progress.LSN
		if time.Since(lastAck) >= ackEvery {
			if err := ack(ctx); err != nil {
				return err
			}
		}
		if !active {
			// The first checkpoint of a processing group activates it and
			// stops the group it replaces, whose clean-up is due now.
			cur, err := r.store.Group(ctx, g.g.ID)
			if err != nil {
				return err
			}
			if active = cur.State == bucketstore.StateActive; active {
				return r.submitRetirements(ctx)
			}
		}
		return nil
	})
	err = p.Run(ctx)
	if committed > uint64(st.Acked()) {
		// Confirm what storage holds before the stream's final status.
		if aerr := ack(context.WithoutCancel(ctx)); aerr != nil && err == nil && ctx.Err() == nil {
			err = aerr
		}
	}
	if ctx.Err() != nil {
		return nil
	}
	return err
}

// batch converts one logical replication batch into storage changes.
func (s *streamer) batch(ctx context.Context, lb logrepl.Batch) (sinks.Batch, error) {
	// Most changes make one storage change: sized once, the batch is not
	// grown (and copied) change by change.
	out := sinks.Batch{Progress: sinks.Position{LSN: uint64(lb.EndLSN)}, Items: make([]stages.Change, 0, lb.Changes)}
	s.batchSeq++
	s.batchRows, s.batchBytes = lb.Changes, lb.Bytes*2+1024
	if err := s.prefetchToast(ctx, lb); err != nil {
		return out, err
	}
	for _, txn := range lb.Txns {
		for i := range txn.Changes {
			n := len(out.Items)
			if err := s.change(ctx, &txn.Changes[i], &out.Items); err != nil {
				return out, err
			}
			s.remember(out.Items[n:], out.Progress.LSN)
		}
	}
	out.Rows = len(out.Items)
	out.Bytes = int64(lb.Bytes)
	return out, nil
}

// table returns the mapping for a relation, building it on first sight,
// with its builder started for the current batch.
func (s *streamer) table(rel *logrepl.Relation) (*streamTable, error) {
	if st, ok := s.byOID[rel.ID]; ok && st.rel == rel {
		s.begin(st)
		return st, nil
	}
	t := s.byName[rel.Namespace+"."+rel.Name]
	if t == nil {
		return nil, nil // published but not used by the rules
	}
	st := &streamTable{t: t, rel: rel, cols: make([]int, len(rel.Columns)), builder: stages.NewBuilder(t.spec)}
	for i, c := range rel.Columns {
		st.cols[i] = -1
		for j, tc := range t.info.Columns {
			if tc.Name == c.Name {
				st.cols[i] = j
			}
		}
		if st.cols[i] < 0 {
			return nil, fmt.Errorf("table %s: column %s appeared in the stream: %w", t.info.QualifiedName(), c.Name, postgres.ErrSchemaChanged)
		}
	}
	s.begin(st)
	s.byOID[rel.ID] = st
	return st, nil
}

// begin starts st's builder for the current batch unless it already is.
func (s *streamer) begin(st *streamTable) {
	if st.begun != s.batchSeq {
		st.builder.Begin(s.batchRows, s.batchBytes)
		st.begun = s.batchSeq
	}
}

func (s *streamer) change(ctx context.Context, c *logrepl.Change, out *[]stages.Change) error {
	switch c.Kind {
	case logrepl.Insert, logrepl.Update:
		st, err := s.table(c.Relation)
		if err != nil || st == nil {
			return err
		}
		row, missing, err := s.decode(st, c.New)
		if err != nil {
			return err
		}
		var old []syncrules.Value
		if c.Kind == logrepl.Update && c.OldKind != logrepl.OldNone {
			// An old image means the key changed (or identity is FULL):
			// retract the row under its old key when that key differs.
			if old, _, err = s.decode(st, c.Old); err != nil {
				return err
			}
			if st.builder.ReplicaID(old) != st.builder.ReplicaID(row) {
				*out = st.builder.Delete(old, *out)
			}
		}
		if len(missing) > 0 {
			// Unchanged TOAST values come from the row's previous state,
			// stored under its previous key.
			prev := row
			if old != nil {
				prev = old
			}
			if row, err = s.mergeToast(ctx, st, st.builder.ReplicaID(prev), c.New, row, missing); err != nil {
				return err
			}
		}
		*out, err = st.builder.Upsert(row, *out)
		if err != nil {
			s.r.log.Warn("sync rules failed on a row", "table", st.t.info.QualifiedName(), "err", err)
		}
		return nil
	case logrepl.Delete:
		st, err := s.table(c.Relation)
		if err != nil || st == nil {
			return err
		}
		row, _, err := s.decode(st, c.Old)
		if err != nil {
			return err
		}
		*out = st.builder.Delete(row, *out)
		return nil
	case logrepl.Truncate:
		for _, rel := range c.TruncateRelations {
			if t := s.byName[rel.Namespace+"."+rel.Name]; t != nil {
				*out = append(*out, stages.Change{Table: &t.stored.Table, Kind: stages.Truncate})
			}
		}
		return nil
	case logrepl.RelationChanged:
		return s.resnapshot(ctx, c.Relation, out)
	}
	return nil
}

// resnapshot handles a table whose shape changed while streaming (a column
// added or dropped, the replica identity changed): it re-discovers the
// table, re-binds the rules and re-reads every row into this batch as
// upserts, so stored data gets the new shape. If the replica identity
// changed, rows are first all removed, since their replica ids change. The
// rows read are the source's current state, possibly ahead of the stream;
// the changes that follow in the stream re-apply on top and storage
// converges. The whole table goes into one batch: fine for the small and
// medium tables whose shape changes in practice.
func (s *streamer) resnapshot(ctx context.Context, rel *logrepl.Relation, out *[]stages.Change) error {
	name := rel.Namespace + "." + rel.Name
	t := s.byName[name]
	if t == nil {
		return nil
	}
	infos, err := postgres.Discover(ctx, s.side, []string{name})
	if err != nil {
		return fmt.Errorf("re-snapshot %s after a schema change: %w", name, err)
	}
	info := infos[0]
	identity := identityNames(info)
	spec, err := tableSpec(&t.stored.Table, s.g.rules, info)
	if err != nil {
		return err
	}
	if !slices.Equal(identity, t.stored.ReplicaIDColumns) {
		*out = append(*out, stages.Change{Table: &t.stored.Table, Kind: stages.Truncate})
		t.stored.ReplicaIDColumns = identity
	}
	t.info, t.spec = info, spec
	delete(s.byOID, rel.ID)
	b := stages.NewBuilder(spec)
	b.Begin(1024, 1<<20)
	reader := postgres.NewSnapshotReader(s.side, info, postgres.KeyRange{}, postgres.SnapshotOptions{
		ChunkRows: s.r.cfg.Replication.Snapshot.ChunkRows})
	rows := 0
	for {
		chunk, err := reader.Next(ctx)
		if errors.Is(err, pipeline.ErrEndOfInput) {
			break
		}
		if err != nil {
			return fmt.Errorf("re-snapshot %s: %w", name, err)
		}
		for _, row := range chunk.Rows {
			if *out, err = b.Upsert(row, *out); err != nil {
				s.r.log.Warn("sync rules failed on a row", "table", name, "err", err)
			}
		}
		rows += len(chunk.Rows)
		if chunk.Final {
			break
		}
	}
	s.r.log.Info("table re-snapshotted after a schema change", "group", s.g.g.ID, "table", name, "rows", rows)
	return nil
}

// streamURI adds the snapshot's session parameters to the source URI, so
// pgoutput prints values (dates, intervals, floats, bytea) in the same text
// form the snapshot decoded: the same row must give the same data and
// checksum on both paths. Unknown URI parameters become startup settings.
func streamURI(uri string) string {
	u, err := url.Parse(uri)
	if err != nil {
		return uri
	}
	q := u.Query()
	for k, v := range postgres.SessionParams() {
		if !q.Has(k) {
			q.Set(k, v)
		}
	}
	// Spaces as %20: the connection string parser does not read '+'.
	u.RawQuery = strings.ReplaceAll(q.Encode(), "+", "%20")
	return u.String()
}
