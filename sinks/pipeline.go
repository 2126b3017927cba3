package sinks

import (
	"context"
	"errors"
	"fmt"

	"github.com/syncpipe/syncpipe/config"
	"github.com/syncpipe/syncpipe/model"
	"github.com/syncpipe/syncpipe/pipeline"
)

// Stage names used by NewPipeline and FlushAndCommit; they appear in stage
// errors, spans and summaries.
const (
	StageSource = "source"
	StageFlush  = "flush"
	StageCommit = "commit"
)

// NewPipeline wires the shortest useful pipeline, for a source that already
// yields evaluated changes:
//
//	From(src) → Flush(st.FlushWriters writers from sink.Writer) → Commit(sink.Commit)
//
// st.ChannelDepth sizes the channels between the stages; zero fields mean
// one writer and the framework's default depth. Of st only those two fields
// are used, so a resolved pipeline's Stages (config.EffectivePipelines) can
// be passed as is. ctx bounds the creation of the writers; the returned
// pipeline is started with Run, once, and does not close the sink.
func NewPipeline(ctx context.Context, name string, src pipeline.Source[model.Change, Position], sink Sink, st config.Stages) (*pipeline.Pipeline[Position], error) {
	p := pipeline.New[Position](pipeline.Config{Name: name, Depth: st.ChannelDepth})
	in := pipeline.From(p, pipeline.StageConfig{Name: StageSource}, src)
	if err := FlushAndCommit(ctx, in, sink, st.FlushWriters); err != nil {
		return nil, fmt.Errorf("pipeline %s: %w", name, err)
	}
	return p, nil
}

// FlushAndCommit ends a pipeline at sink: it adds a Flush stage with
// writers writers (at least one) taken from sink.Writer, and the ordered
// Commit stage calling sink.Commit. Use it after your own Process stages
// (decode, evaluate) when NewPipeline is too short. It fails, adding no
// stage, when sink is nil or a writer cannot be created.
func FlushAndCommit(ctx context.Context, in *pipeline.Stream[model.Change, Position], sink Sink, writers int) error {
	if sink == nil {
		return errors.New("nil sink")
	}
	ws := make([]Writer, max(writers, 1))
	for i := range ws {
		w, err := sink.Writer(ctx, i)
		if err != nil {
			return fmt.Errorf("sink writer %d: %w", i, err)
		}
		ws[i] = w
	}
	flushed := pipeline.Flush(in, pipeline.StageConfig{Name: StageFlush}, ws)
	pipeline.Commit(flushed, pipeline.StageConfig{Name: StageCommit}, sink.Commit)
	return nil
}
