package replication

import (
	"context"
	"fmt"
	"time"

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
	tables, err := r.readTables()
	if err != nil {
		return err
	}
	st, closeStream, err := startSlot(ctx, r.o.Config, r.pl, r.state.SlotName, logrepl.LSN(pos.LSN), r.log)
	if err != nil {
		return err
	}
	defer closeStream()
	r.log.Info("streaming from the replication slot", "slot", r.state.SlotName, "lsn", logrepl.LSN(pos.LSN).String())
	lim := streamLimits(r.pl.Stages.BatchMaxRows, int(r.pl.Stages.BatchMaxBytes), r.o.Config.Replication.Stream.BatchMaxWait)
	// The same reader as bucket storage's stream, without what needs
	// storage: a table's shape change re-binds it (no re-read, no stored
	// shape: a sink has no way to record one yet), there is no catalog
	// check, and every idle position is recorded at once.
	reader := postgres.NewStreamReader(st, postgres.StreamReaderConfig[sinks.Position]{
		Limits: lim,
		From: postgres.StreamPosition{LSN: logrepl.LSN(pos.LSN),
			TxnLSN: logrepl.LSN(pos.TxnLSN), TxnChanges: pos.TxnChanges},
		Position: setSinkPos,
		Tables:   tables, Reshape: sinkReshape{r},
	})
	return r.runStream(ctx, st, reader)
}

// setSinkPos records where a batch leaves the stream
// (postgres.StreamReaderConfig.Position).
func setSinkPos(p *sinks.Position, at postgres.StreamPosition) {
	p.LSN, p.TxnLSN, p.TxnChanges = uint64(at.LSN), uint64(at.TxnLSN), at.TxnChanges
}

// runStream wires and runs the stream pipeline: read → decode → the
// shared chain (eval → build → flush → commit), whose commits confirm the
// position to the slot.
func (r *SinkRunner) runStream(ctx context.Context, st *logrepl.Stream, reader *postgres.StreamReader[sinks.Position]) error {
	p := pipeline.New[sinks.Position](pipeline.Config{Name: "stream " + r.pl.Name, Tracer: r.o.Tracer, Depth: r.pl.Stages.ChannelDepth,
		Labels: []pipeline.Label{{Key: "pipeline", Value: r.pl.Name}}, MaxInFlight: maxInFlight(reader.Limits())})
	read := pipeline.From(p, pipeline.StageConfig{Name: "read"}, pipeline.Source[postgres.StreamItem, sinks.Position](reader))
	dec := postgres.NewStreamDecoder(postgres.DecodeConfig{Connect: r.connect})
	defer dec.Close()
	decoded := postgres.Decode(read, pipeline.StageConfig{Workers: max(r.pl.Stages.DecodeWorkers, 1)}, dec)
	var lastStatus time.Time
	onCommit := func(ctx context.Context, b sinks.Batch, _ bool) error {
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
	}
	err := stages.Chain(ctx, decoded, r.o.Sink, stages.ChainConfig{EvalWorkers: r.evalWorkers(), FlushWriters: r.pl.Stages.FlushWriters,
		Stream: true, OnRowError: r.rowError, OnCommit: onCommit})
	if err != nil {
		return err
	}
	err = p.Run(ctx)
	if ctx.Err() != nil {
		return nil
	}
	return err
}

// readTables are the pipeline's tables as the stream reader starts with
// them: each bound in the catalog's shape, followed by the OID it had
// when the pipeline started (doc.go, "Renamed, moved and re-created
// tables").
func (r *SinkRunner) readTables() ([]*postgres.ReadTable, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]*postgres.ReadTable, 0, len(r.tables))
	for _, t := range r.tables {
		sh := postgres.CatalogShape(t.info)
		st, err := r.bind(t, sh)
		if err != nil {
			return nil, err
		}
		out = append(out, &postgres.ReadTable{Name: t.info.Schema + "." + t.info.Name, OID: t.info.OID, Shape: sh, Table: st})
	}
	return out, nil
}

// bind binds the rules to t in shape sh, with decoding details from the
// catalog where it agrees on a column's type.
func (r *SinkRunner) bind(t *sinkTable, sh postgres.Shape) (*postgres.StreamTable, error) {
	return postgres.NewStreamTable(sh, t.info, timeStyle(r.rules), func(columns, identity []string) (*stages.TableSpec, error) {
		if len(identity) == 0 {
			identity = identityNames(t.info)
		}
		return stages.NewTableSpec(&t.t, r.rules, columns, identity)
	})
}

// sinkReshape re-binds a table whose relation shows another shape, with
// its first change in the new shape (postgres.StreamTables). A sink
// cannot record a table's shape nor be re-read into yet, so nothing is
// cleared or re-read.
type sinkReshape struct{ r *SinkRunner }

// Reshape binds rt's table in shape sh.
func (s sinkReshape) Reshape(_ context.Context, rt *postgres.ReadTable, sh postgres.Shape, _ uint32) (postgres.Reshape[sinks.Position], error) {
	t := s.r.table(rt.Table.Spec.Table.ID)
	if t == nil {
		return postgres.Reshape[sinks.Position]{}, fmt.Errorf("stream: table %s is not the pipeline's", rt.Name)
	}
	st, err := s.r.bind(t, sh)
	return postgres.Reshape[sinks.Position]{Table: st}, err
}
