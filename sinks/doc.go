// Package sinks defines the Sink interface that a pipeline's flush and commit
// stages write to, and the registry that maps the sink type names used in
// YAML pipelines (pipelines[].sink.type) to constructors.
//
// # Writing a sink
//
// A sink is three things to the pipeline framework: a set of flush writers
// (pipeline.Writer), the ordered commit of progress (pipeline.CommitFunc) and
// the lookup of committed progress on restart (Resume). See the Sink
// interface for who calls what, from which goroutine, and when.
//
// The delivery guarantee a sink gets is at least once: batches written after
// the last committed position are written again after a crash or a hard
// stop, because the source restarts from what Resume returns. A sink either
// tolerates duplicates (an op log, a JSON-lines file) or makes its writes
// idempotent (upserts keyed by row).
//
// # Making a sink usable from YAML
//
// Register a Factory under a name with the Spec of its settings (name,
// type, default, required, doc), usually in an init function so that a
// blank import enables the sink:
//
//	var spec = sinks.Spec{Summary: "posts each batch to an HTTP endpoint", Fields: []sinks.Field{
//		{Name: "endpoint", Type: sinks.FieldString, Required: true, Doc: "URL to POST to."},
//		{Name: "timeout", Type: sinks.FieldDuration, Default: 10 * time.Second, Doc: "Bound of one POST."},
//	}}
//
//	func init() { sinks.MustRegister("mysink", spec, newMySink) }
//
// A config can then name it:
//
//	pipelines:
//	  - name: audit
//	    sink: {type: mysink, settings: {endpoint: "https://…"}}
//
// The program checks the config against the registered names with
// config.CheckSinks(sinks.Names()) and every pipeline's settings against
// its sink's spec with CheckSettings (both offline, with file positions),
// and builds each pipeline's sink with Open, whose factory gets the checked
// Settings.
// NewPipeline wires a source of evaluated changes to a sink in one call;
// FlushAndCommit ends a pipeline that has its own processing stages.
package sinks
