package replication

import (
	"context"
	"errors"

	"github.com/syncpipe/syncpipe/pipeline"
	"github.com/syncpipe/syncpipe/sinks"
	"github.com/syncpipe/syncpipe/sources/postgres"
	"github.com/syncpipe/syncpipe/stages"
)

// rangeSource is the read stage of one snapshot range, for both the
// bucketstore and the sink pipelines: the reader's chunks as row changes
// of spec, each carrying the range's progress, then a progress-only batch
// that records the range as done.
type rangeSource struct {
	reader   *postgres.SnapshotReader
	spec     *stages.TableSpec
	table    string // schema.name, as the sink keys progress
	rangeNo  int
	rows     int64 // read so far, including before a resume
	finished bool
	// yield, when set, runs before each chunk is read: a lower-priority
	// snapshot waits there while more urgent work is behind.
	yield func(context.Context) error
}

// Next implements pipeline.Source.
func (s *rangeSource) Next(ctx context.Context) (pipeline.Batch[stages.RowChange, sinks.Position], error) {
	var b pipeline.Batch[stages.RowChange, sinks.Position]
	if s.finished {
		return b, pipeline.ErrEndOfInput
	}
	if s.yield != nil {
		if err := s.yield(ctx); err != nil {
			return b, err
		}
	}
	chunk, err := s.reader.Next(ctx)
	if errors.Is(err, pipeline.ErrEndOfInput) {
		s.finished = true
		b.Progress = sinks.Position{Table: s.table, Range: s.rangeNo, LastKey: s.reader.Position(), RowsDone: s.rows, Done: true}
		return b, nil
	}
	if err != nil {
		return b, err
	}
	s.rows += int64(len(chunk.Rows))
	s.finished = chunk.Final
	b.Items, b.Rows, b.Bytes = stages.Upserts(s.spec, chunk.Rows), len(chunk.Rows), chunk.Bytes
	b.Progress = sinks.Position{Table: s.table, Range: s.rangeNo, LastKey: chunk.LastKey, RowsDone: s.rows, Done: chunk.Final}
	return b, nil
}
