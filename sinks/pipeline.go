package sinks

import (
	"context"
	"errors"
	"fmt"

	"github.com/syncpipe/syncpipe/model"
	"github.com/syncpipe/syncpipe/pipeline"
)

// Stage names used by FlushAndCommit; they appear in stage errors, spans
// and summaries.
const (
	StageFlush  = "flush"
	StageCommit = "commit"
)

// FlushAndCommit ends a pipeline at sink: it adds a Flush stage with
// writers writers (at least one) taken from sink.Writer, and the ordered
// Commit stage calling sink.Commit. Use it after your source and your own
// Process stages (decode, evaluate). It fails, adding no stage, when sink
// is nil or a writer cannot be created.
func FlushAndCommit(ctx context.Context, in *pipeline.Stream[model.Change, Position], sink Sink, writers int) error {
	if sink == nil {
		return errors.New("nil sink")
	}
	ws, err := Writers(ctx, sink, writers)
	if err != nil {
		return err
	}
	flushed := pipeline.Flush(in, pipeline.StageConfig{Name: StageFlush}, ws)
	pipeline.Commit(flushed, pipeline.StageConfig{Name: StageCommit}, sink.Commit)
	return nil
}

// Writers returns n (at least one) writers of a new run of sink: the
// flush lanes of FlushAndCommit and of stages.Chain.
func Writers(ctx context.Context, sink Sink, n int) ([]Writer, error) {
	ws := make([]Writer, max(n, 1))
	for i := range ws {
		w, err := sink.Writer(ctx, i)
		if err != nil {
			return nil, fmt.Errorf("sink writer %d: %w", i, err)
		}
		ws[i] = w
	}
	return ws, nil
}
