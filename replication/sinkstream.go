package replication

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/syncpipe/syncpipe/model"
	"github.com/syncpipe/syncpipe/pipeline"
	"github.com/syncpipe/syncpipe/sinks"
	"github.com/syncpipe/syncpipe/sources/postgres"
	"github.com/syncpipe/syncpipe/sources/postgres/logrepl"
	"github.com/syncpipe/syncpipe/stages"
)

// stream applies the pipeline's slot to the sink until ctx ends:
// read → decode → eval → build → flush → commit, where commit stores the
// position in the sink and then confirms it to the slot.
func (r *SinkRunner) stream(ctx context.Context) error {
	pos, _, err := r.o.Sink.Resume(ctx, "", 0)
	if err != nil {
		return err
	}
	st, closeStream, err := startSlot(ctx, r.o.Config, r.pl, r.state.SlotName, logrepl.LSN(pos.LSN), r.log)
	if err != nil {
		return err
	}
	defer closeStream()
	rs := r.o.Config.Replication.Stream
	r.log.Info("streaming from the replication slot", "slot", r.state.SlotName, "lsn", logrepl.LSN(pos.LSN).String())
	lim := streamLimits(r.pl.Stages.BatchMaxRows, int(r.pl.Stages.BatchMaxBytes), rs.BatchMaxWait)
	reader := postgres.NewStreamReader(st, lim, postgres.StreamPosition{LSN: logrepl.LSN(pos.LSN),
		TxnLSN: logrepl.LSN(pos.TxnLSN), TxnChanges: pos.TxnChanges})
	fills := &fillConns{r: r}
	defer fills.close()
	return r.runStream(ctx, st, reader, fills)
}

// runStream wires and runs the stream pipeline.
func (r *SinkRunner) runStream(ctx context.Context, st *logrepl.Stream, reader *postgres.StreamReader, fills *fillConns) error {
	p := pipeline.New[sinks.Position](pipeline.Config{Name: "stream " + r.pl.Name, Tracer: r.o.Tracer, Depth: r.pl.Stages.ChannelDepth,
		Labels: []pipeline.Label{{Key: "pipeline", Value: r.pl.Name}}, MaxInFlight: maxInFlight(reader.Limits())})
	read := pipeline.From(p, pipeline.StageConfig{Name: "read"}, pipeline.SourceFunc[postgres.StreamChange, sinks.Position](
		func(ctx context.Context) (pipeline.Batch[postgres.StreamChange, sinks.Position], error) {
			changes, sp, bytes, err := reader.Next(ctx)
			b := pipeline.Batch[postgres.StreamChange, sinks.Position]{Items: changes, Rows: len(changes), Bytes: int64(bytes),
				Progress: sinks.Position{LSN: uint64(sp.LSN), TxnLSN: uint64(sp.TxnLSN), TxnChanges: sp.TxnChanges}}
			return b, err
		}))
	decoded := postgres.Decode(read, pipeline.StageConfig{Workers: max(r.pl.Stages.DecodeWorkers, 1)},
		postgres.DecodeConfig{Bind: r.bind, NewFill: fills.fill})
	workers := r.evalWorkers()
	built := stages.Build(stages.Eval(decoded, pipeline.StageConfig{Workers: workers}, r.rowError), pipeline.StageConfig{Workers: workers})
	ws := make([]sinks.Writer, max(r.pl.Stages.FlushWriters, 1))
	for i := range ws {
		w, err := r.o.Sink.Writer(ctx, i)
		if err != nil {
			return fmt.Errorf("sink writer %d: %w", i, err)
		}
		ws[i] = w
	}
	flushed := pipeline.Flush(built, pipeline.StageConfig{Name: sinks.StageFlush}, ws)
	var lastStatus time.Time
	pipeline.Commit(flushed, pipeline.StageConfig{Name: sinks.StageCommit}, func(ctx context.Context, b sinks.Batch) error {
		if err := r.o.Sink.Commit(ctx, b); err != nil {
			return err
		}
		if b.Progress.TxnLSN != 0 {
			return nil // inside a source transaction: restarting replays it
		}
		// The sink holds everything up to here durably: the slot may let go.
		st.Ack(logrepl.LSN(b.Progress.LSN))
		if time.Since(lastStatus) >= time.Second {
			lastStatus = time.Now()
			if err := r.o.Store.SetSinkPipelineStream(ctx, r.pl.Name, logrepl.LSN(b.Progress.LSN)); err != nil {
				r.log.Warn("could not store the stream position for status", "err", err)
			}
			if r.state.LastError != "" {
				r.state.LastError = ""
				if err := r.o.Store.ClearSinkPipelineError(ctx, r.pl.Name); err != nil {
					r.log.Warn("could not clear the stored error", "err", err)
				}
			}
		}
		return nil
	})
	err := p.Run(ctx)
	if ctx.Err() != nil {
		return nil
	}
	return err
}

// bind returns the table a relation decodes into: the rules bound to the
// relation's columns (a table whose columns changed gets a new binding
// with its first change in the new shape), with decoding details from the
// catalog where the catalog agrees on a column's type. A relation is the
// pipeline's table by its name or, under any other name (renamed away,
// moved to another schema), by the table's OID, so its changes there are
// not lost (doc.go, "Renamed, moved and re-created tables"). Relations
// the pipeline does not replicate give nil.
func (r *SinkRunner) bind(_ context.Context, rel *logrepl.Relation) (*postgres.StreamTable, error) {
	t := r.table(rel.Namespace + "." + rel.Name)
	if t == nil {
		if t = r.tableByOID(rel.ID); t == nil {
			return nil, nil
		}
	}
	cols := make([]postgres.Column, len(rel.Columns))
	names := make([]string, len(rel.Columns))
	var identity []string
	for i, c := range rel.Columns {
		cols[i] = postgres.Column{Name: c.Name, TypeOID: c.TypeOID, Times: timeStyle(r.rules)}
		if j := columnIndex(t.info, c.Name); j >= 0 && t.info.Columns[j].TypeOID == c.TypeOID {
			cols[i] = t.info.Columns[j]
		}
		names[i] = c.Name
		if c.Key {
			identity = append(identity, c.Name)
		}
	}
	if len(identity) == 0 {
		identity = identityNames(t.info)
	}
	spec, err := stages.NewTableSpec(&t.t, r.rules, names, identity)
	if err != nil {
		return nil, err
	}
	return &postgres.StreamTable{Spec: spec, Columns: cols}, nil
}

// fillConns gives each decode worker its own source connection, opened on
// first use, for filling unchanged TOAST values from the source.
type fillConns struct {
	r     *SinkRunner
	mu    sync.Mutex
	conns []*pgx.Conn
}

// fill returns decode worker i's FillFunc: the row's current state is read
// from the source by key, and the values the UPDATE left out are taken
// from it. A row deleted since keeps NULLs: its DELETE follows.
func (f *fillConns) fill(int) postgres.FillFunc {
	var conn *pgx.Conn
	return func(ctx context.Context, t *postgres.StreamTable, tup logrepl.Tuple, row []model.Value, missing []int) ([]model.Value, error) {
		st := f.r.table(t.Spec.Table.ID)
		if st == nil {
			return row, nil
		}
		key := make([]string, 0, len(st.info.KeyColumns))
		for _, k := range st.info.KeyColumns {
			j := slices.Index(t.Spec.Columns, st.info.Columns[k].Name)
			if j < 0 || j >= len(tup.Columns) {
				return nil, fmt.Errorf("fill unchanged TOAST values of %s: key column %s is not in the stream", st.t.ID, st.info.Columns[k].Name)
			}
			key = append(key, string(tup.Columns[j].Data))
		}
		if conn == nil {
			c, err := f.r.connect(ctx)
			if err != nil {
				return nil, err
			}
			f.mu.Lock()
			f.conns = append(f.conns, c)
			f.mu.Unlock()
			conn = c
		}
		cur, ok, err := postgres.ReadRow(ctx, conn, st.info, key)
		if err != nil || !ok {
			return row, err
		}
		for _, i := range missing {
			if j := columnIndex(st.info, t.Spec.Columns[i]); j >= 0 {
				row[i] = cur[j]
			}
		}
		return row, nil
	}
}

func (f *fillConns) close() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, c := range f.conns {
		closeConn(c)
	}
	f.conns = nil
}
