package config

import (
	"maps"
	"path/filepath"
	"slices"
	"strings"
)

// DefaultPipelineName names the implicit pipeline used when the config
// declares none.
const DefaultPipelineName = "default"

// SinkBucketstore is the sink type that writes to the storage section's
// database; it is the default so a config without pipelines does the
// PowerSync-style replication the product is for.
const SinkBucketstore = "bucketstore"

// defaultChannelDepth is the stage channel depth when a pipeline sets none.
const defaultChannelDepth = 2

// Pipeline declares one replication pipeline. Zero values inherit: an empty
// source uses the source section, a zero stage setting uses the matching
// replication setting. EffectivePipelines resolves all of that.
type Pipeline struct {
	Name   string         `koanf:"name" doc:"Required, unique. Names the pipeline in logs, metrics and status."`
	Source PipelineSource `koanf:"source" doc:"Overrides of the source section for this pipeline."`
	Tables []string       `koanf:"tables" doc:"Source tables (table or schema.table); empty = every table the sync rules use."`
	Stages Stages         `koanf:"stages" doc:"Stage parallelism and batching; 0 = inherit."`
	Sink   Sink           `koanf:"sink" doc:"Where the pipeline writes."`
}

// PipelineSource overrides parts of the source section for one pipeline, so
// a pipeline can read another database or publication.
type PipelineSource struct {
	URI         string `koanf:"uri" default:"source.uri" doc:"Source URI for this pipeline; empty = source.uri."`
	Publication string `koanf:"publication" default:"source.publication" doc:"Publication for this pipeline; empty = source.publication."`
	SlotPrefix  string `koanf:"slot_prefix" default:"source.slot_prefix" doc:"Slot prefix for this pipeline; empty = source.slot_prefix."`
}

// Stages tunes one pipeline's stages; zero fields inherit the replication
// section so most pipelines need no stage settings at all.
type Stages struct {
	ChunkRows     int      `koanf:"chunk_rows" default:"replication.snapshot.chunk_rows" doc:"Snapshot rows per chunk."`
	DecodeWorkers int      `koanf:"decode_workers" default:"1" doc:"Goroutines of the stream's decode stage (sinks other than bucketstore; the bucketstore stream decodes on one: merging unchanged TOAST values needs the row's previous change)."`
	EvalWorkers   int      `koanf:"eval_workers" default:"replication.snapshot.eval_workers" doc:"Goroutines evaluating sync rules per snapshot unit (GOMAXPROCS / workers_per_process when both are 0)."`
	FlushWriters  int      `koanf:"flush_writers" default:"replication.snapshot.flush_writers" doc:"Concurrent sink writers."`
	ChannelDepth  int      `koanf:"channel_depth" default:"2" doc:"Batches buffered between two stages of the stream (a snapshot unit buffers one, so memory stays per unit)."`
	BatchMaxRows  int      `koanf:"batch_max_rows" default:"replication.stream.batch_max_rows" doc:"Rows per streamed batch."`
	BatchMaxBytes ByteSize `koanf:"batch_max_bytes" default:"replication.stream.batch_max_bytes" doc:"Bytes per streamed batch (integer or e.g. 16MiB)."`
}

// Sink names the sink a pipeline writes to and passes it free-form settings,
// so sinks registered by Go programs need no change to this package.
type Sink struct {
	Type     string         `koanf:"type" default:"bucketstore" doc:"bucketstore, jsonl or any sink registered by name."`
	Settings map[string]any `koanf:"settings" doc:"Free-form settings passed to the sink's constructor (e.g. jsonl: {dir: out})."`
}

// EffectivePipelines returns the pipelines to run with every inherited value
// filled in: the declared ones, or a single bucketstore pipeline named
// "default" over all rule tables. The result is a copy; changing it does not
// change the Config.
func (c *Config) EffectivePipelines() []Pipeline {
	declared := c.Pipelines
	if len(declared) == 0 {
		declared = []Pipeline{{Name: DefaultPipelineName}}
	}
	out := make([]Pipeline, len(declared))
	for i, p := range declared {
		out[i] = c.resolvePipeline(p)
	}
	return out
}

// BucketstorePipeline returns the resolved pipeline that writes to bucket
// storage — the one declared with sink bucketstore (validation allows one),
// or the default pipeline when none is declared — and whether there is one.
func (c *Config) BucketstorePipeline() (Pipeline, bool) {
	for _, p := range c.EffectivePipelines() {
		if p.Sink.Type == SinkBucketstore {
			return p, true
		}
	}
	return Pipeline{}, false
}

// UsesStorage reports whether the config has bucket storage: a storage
// section (or storage URI), or a pipeline writing to bucketstore (which
// then requires one). Without storage, `syncpipe run` serves no sync API
// and keeps each pipeline's state in a state file (StateFile).
func (c *Config) UsesStorage() bool {
	_, bucket := c.BucketstorePipeline()
	return bucket || c.Storage.URI != "" || c.declares("storage")
}

// declares reports whether the file or the environment set key or a key
// under it.
func (c *Config) declares(key string) bool {
	if c.meta == nil {
		return false
	}
	for k := range c.meta.idx {
		if k == key || strings.HasPrefix(k, key+".") {
			return true
		}
	}
	return false
}

// StateFile is the path of the state file of the named pipeline in
// state_dir, used when the config has no storage (UsesStorage).
func (c *Config) StateFile(pipeline string) string {
	return filepath.Join(c.StateDir, pipeline+".state.json")
}

// resolvePipeline fills zero fields of p from the sections it inherits from.
func (c *Config) resolvePipeline(p Pipeline) Pipeline {
	p.Tables = slices.Clone(p.Tables)
	p.Sink.Settings = maps.Clone(p.Sink.Settings)
	src := &p.Source
	src.URI = orString(src.URI, c.Source.URI)
	src.Publication = orString(src.Publication, c.Source.Publication)
	src.SlotPrefix = orString(src.SlotPrefix, c.Source.SlotPrefix)

	st := &p.Stages
	snap, stream := c.Replication.Snapshot, c.Replication.Stream
	st.ChunkRows = orInt(st.ChunkRows, snap.ChunkRows)
	st.DecodeWorkers = orInt(st.DecodeWorkers, 1)
	st.EvalWorkers = orInt(st.EvalWorkers, snap.EvalWorkers) // 0: chosen by the runner
	st.FlushWriters = orInt(st.FlushWriters, snap.FlushWriters)
	st.ChannelDepth = orInt(st.ChannelDepth, defaultChannelDepth)
	st.BatchMaxRows = orInt(st.BatchMaxRows, stream.BatchMaxRows)
	if st.BatchMaxBytes == 0 {
		st.BatchMaxBytes = stream.BatchMaxBytes
	}
	p.Sink.Type = orString(p.Sink.Type, SinkBucketstore)
	return p
}

func orString(v, def string) string {
	if v == "" {
		return def
	}
	return v
}

func orInt(v, def int) int {
	if v == 0 {
		return def
	}
	return v
}
