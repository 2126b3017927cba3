package stages

import (
	"context"

	"github.com/syncpipe/syncpipe/model"
	"github.com/syncpipe/syncpipe/pipeline"
	"github.com/syncpipe/syncpipe/stages/checksum"
	"github.com/syncpipe/syncpipe/stages/syncrules"
)

// Stage names of Eval and Build, as they appear in spans and summaries.
const (
	StageEval  = "eval"
	StageBuild = "build"
)

// RowErrorFunc is told about a row whose sync rules evaluation failed for
// some query; the row is still written for the queries that succeeded, as
// the PowerSync service does, so one bad row never stops replication.
type RowErrorFunc func(t *model.Table, err error)

// Eval adds the bucket eval stage: every row change is evaluated against
// its table's sync rules (bucket data queries and parameter queries) on
// cfg.Workers goroutines, each with its own evaluators. onErr may be nil.
func Eval[P any](in *pipeline.Stream[RowChange, P], cfg pipeline.StageConfig, onErr RowErrorFunc) *pipeline.Stream[Evaluated, P] {
	if cfg.Name == "" {
		cfg.Name = StageEval
	}
	return pipeline.ProcessWorkers(in, cfg, func(int) pipeline.ProcessFunc[RowChange, Evaluated, P] {
		w := &evalWorker{evs: map[*TableSpec]*syncrules.Evaluator{}, onErr: onErr}
		return func(_ context.Context, b pipeline.Batch[RowChange, P]) (pipeline.Batch[Evaluated, P], error) {
			return pipeline.Derive(b, w.eval(b.Items, int(b.Bytes))), nil
		}
	})
}

// evalWorker is one eval goroutine's state: an evaluator per table spec
// (specs are replaced, not changed, when a table's columns change).
type evalWorker struct {
	evs   map[*TableSpec]*syncrules.Evaluator
	onErr RowErrorFunc
}

func (w *evalWorker) evaluator(spec *TableSpec) *syncrules.Evaluator {
	ev := w.evs[spec]
	if ev == nil {
		ev = spec.Bound.NewEvaluator()
		w.evs[spec] = ev
	}
	return ev
}

// eval evaluates a batch. The outputs of all rows share one slice and one
// byte buffer, allocated per batch so that batches downstream stay valid.
func (w *evalWorker) eval(in []RowChange, bytes int) []Evaluated {
	out := make([]Evaluated, len(in))
	outs := make([]syncrules.Output, 0, len(in)*2)
	var lookups []syncrules.LookupEntry
	buf := make([]byte, 0, bytes*2+1024)
	for i := range in {
		rc := &in[i]
		e := &out[i]
		e.RowChange = rc
		if rc.Kind != model.Upsert {
			continue
		}
		ev := w.evaluator(rc.Spec)
		var err error
		if rc.Spec.Bound.HasData() {
			start := len(outs)
			outs, buf, err = ev.EvaluateRow(rc.Row, outs, buf)
			e.Outputs = outs[start:len(outs):len(outs)]
		}
		if rc.Spec.Bound.HasParameters() {
			start := len(lookups)
			var perr error
			lookups, buf, perr = ev.EvaluateParameterRow(rc.Row, lookups, buf)
			e.Lookups = lookups[start:len(lookups):len(lookups)]
			err = joinErr(err, perr)
		}
		if err != nil && w.onErr != nil {
			w.onErr(rc.Spec.Table, err)
		}
	}
	return out
}

// Build adds the op build stage: evaluated rows become Changes with their
// replica id, PUT checksums, parameter lookups and, for big rows, the
// TOASTable values storage keeps for merging later updates. An UPDATE that
// changed the row's key first retracts the row under its old key.
func Build[P any](in *pipeline.Stream[Evaluated, P], cfg pipeline.StageConfig) *pipeline.Stream[model.Change, P] {
	if cfg.Name == "" {
		cfg.Name = StageBuild
	}
	return pipeline.ProcessWorkers(in, cfg, func(int) pipeline.ProcessFunc[Evaluated, model.Change, P] {
		var rk checksum.ReplicaKey
		return func(_ context.Context, b pipeline.Batch[Evaluated, P]) (pipeline.Batch[model.Change, P], error) {
			return pipeline.Derive(b, build(&rk, b.Items, int(b.Bytes))), nil
		}
	})
}

// build makes the Changes of one batch; their Puts share one slice and
// their RowData one buffer.
func build(rk *checksum.ReplicaKey, in []Evaluated, bytes int) []model.Change {
	out := make([]model.Change, 0, len(in))
	n := 0
	for i := range in {
		n += len(in[i].Outputs)
	}
	puts := make([]model.Put, 0, n)
	var lks []model.Lookup
	var buf []byte
	for i := range in {
		e := &in[i]
		spec := e.Spec
		t := spec.Table
		if e.Kind == model.Truncate {
			out = append(out, model.Change{Table: t, Kind: model.Truncate})
			continue
		}
		key := e.Key
		if !e.Derived {
			key = ReplicaID(rk, spec, e.Row)
		}
		// A derived key is Row's replica id too: its order key comes from
		// the same values.
		order := KeyOrder(spec, e.Row)
		if e.Kind == model.Delete {
			out = append(out, model.Change{Table: t, Kind: model.Delete, Key: key, KeyOrder: order,
				TracksLookups: spec.Bound.HasParameters(), TxnLSN: e.TxnLSN, TxnIndex: e.TxnIndex})
			continue
		}
		if e.Old != nil {
			if old := ReplicaID(rk, spec, e.Old); old != key {
				out = append(out, model.Change{Table: t, Kind: model.Delete, Key: old, KeyOrder: KeyOrder(spec, e.Old),
					TracksLookups: spec.Bound.HasParameters(), TxnLSN: e.TxnLSN, TxnIndex: e.TxnIndex})
			}
		}
		c := model.Change{Table: t, Kind: model.Upsert, Key: key, KeyOrder: order, TxnLSN: e.TxnLSN, TxnIndex: e.TxnIndex}
		switch {
		case e.Derived:
			c.RowData = e.RowData
		case len(spec.Toast) > 0 && estimateSize(e.Row) >= RowDataMinBytes:
			if buf == nil {
				buf = make([]byte, 0, bytes+1024)
			}
			start := len(buf)
			buf = AppendRowData(buf, spec, e.Row)
			c.RowData = buf[start:len(buf):len(buf)]
		}
		if spec.Bound.HasData() {
			start := len(puts)
			for j := range e.Outputs {
				o := &e.Outputs[j]
				puts = append(puts, model.Put{Bucket: o.Bucket, ObjectType: o.ObjectType, ObjectID: o.ObjectID,
					Data: o.Data, Checksum: checksum.Put(o.ObjectType, o.ObjectID, o.Data)})
			}
			c.Puts = puts[start:len(puts):len(puts)]
		}
		if spec.Bound.HasParameters() {
			c.TracksLookups = true
			start := len(lks)
			for _, l := range e.Lookups {
				lks = append(lks, model.Lookup{Key: l.Key, Params: l.Rows})
			}
			c.Lookups = lks[start:len(lks):len(lks)]
		}
		out = append(out, c)
	}
	return out
}
