package postgres

import (
	"context"
	"fmt"

	"github.com/syncpipe/syncpipe/model"
	"github.com/syncpipe/syncpipe/pipeline"
	"github.com/syncpipe/syncpipe/sources/postgres/logrepl"
	"github.com/syncpipe/syncpipe/stages"
)

// StageDecode is the decode stage's name in spans and summaries.
const StageDecode = "decode"

// StreamTable is what decoding needs about one relation: the rules bound
// to its columns (Spec.Columns in tuple order) and the columns' decoding
// details (array element types, domains).
type StreamTable struct {
	Spec    *stages.TableSpec
	Columns []Column
}

// DecodeConfig configures the decode stage.
type DecodeConfig struct {
	// Bind returns the table a relation decodes into, or nil for a
	// relation the pipeline does not replicate. It is called once per
	// relation and worker (a changed table gets a new *logrepl.Relation)
	// and must be safe for concurrent use.
	Bind func(ctx context.Context, rel *logrepl.Relation) (*StreamTable, error)
	// Fill, if set, completes a row whose tuple left out unchanged TOAST
	// values (the indexes in missing), for instance by reading the row
	// from the source. Without it such a change fails the batch: writing
	// the values as NULL would corrupt the row. Each worker gets its own
	// Fill from NewFill, so a Fill may own a connection.
	NewFill func(worker int) FillFunc
}

// FillFunc completes row, decoded from tup, whose columns missing were
// left out of tup as unchanged TOAST values.
type FillFunc func(ctx context.Context, t *StreamTable, tup logrepl.Tuple, row []model.Value, missing []int) ([]model.Value, error)

// Decode adds the stream decode stage: the text values of every change's
// tuples become typed rows bound to their table's rules, on cfg.Workers
// goroutines (decode_workers). Changes carry their relation, so workers
// decode any batch independently.
func Decode[P any](in *pipeline.Stream[StreamChange, P], cfg pipeline.StageConfig, dc DecodeConfig) *pipeline.Stream[stages.RowChange, P] {
	if cfg.Name == "" {
		cfg.Name = StageDecode
	}
	return pipeline.ProcessWorkers(in, cfg, func(i int) pipeline.ProcessFunc[StreamChange, stages.RowChange, P] {
		d := &streamDecoder{cfg: dc, tables: map[*logrepl.Relation]*StreamTable{}}
		if dc.NewFill != nil {
			d.fill = dc.NewFill(i)
		}
		return func(ctx context.Context, b pipeline.Batch[StreamChange, P]) (pipeline.Batch[stages.RowChange, P], error) {
			out, err := d.decode(ctx, b.Items)
			return pipeline.Derive(b, out), err
		}
	})
}

// streamDecoder is one decode worker.
type streamDecoder struct {
	cfg    DecodeConfig
	fill   FillFunc
	tables map[*logrepl.Relation]*StreamTable
}

func (d *streamDecoder) table(ctx context.Context, rel *logrepl.Relation) (*StreamTable, error) {
	if t, ok := d.tables[rel]; ok {
		return t, nil
	}
	t, err := d.cfg.Bind(ctx, rel)
	if err != nil {
		return nil, err
	}
	d.tables[rel] = t
	return t, nil
}

func (d *streamDecoder) decode(ctx context.Context, in []StreamChange) ([]stages.RowChange, error) {
	out := make([]stages.RowChange, 0, len(in))
	for i := range in {
		c := &in[i]
		rc := stages.RowChange{TxnLSN: uint64(c.TxnLSN), TxnIndex: c.Index}
		if c.Kind == logrepl.Truncate {
			for _, rel := range c.TruncateRelations {
				t, err := d.table(ctx, rel)
				if err != nil {
					return nil, err
				}
				if t != nil {
					rc.Spec, rc.Kind = t.Spec, model.Truncate
					out = append(out, rc)
				}
			}
			continue
		}
		t, err := d.table(ctx, c.Relation)
		if err != nil || t == nil {
			if err != nil {
				return nil, err
			}
			continue
		}
		rc.Spec = t.Spec
		switch c.Kind {
		case logrepl.Insert, logrepl.Update:
			rc.Kind = model.Upsert
			var missing []int
			if rc.Row, missing, err = DecodeTuple(t, c.New); err != nil {
				return nil, err
			}
			if c.Kind == logrepl.Update && c.OldKind != logrepl.OldNone {
				if rc.Old, _, err = DecodeTuple(t, c.Old); err != nil {
					return nil, err
				}
			}
			if len(missing) > 0 {
				if d.fill == nil {
					return nil, fmt.Errorf("decode %s: an UPDATE left out unchanged TOAST values and the pipeline has no way to fill them", t.Spec.Table)
				}
				if rc.Row, err = d.fill(ctx, t, c.New, rc.Row, missing); err != nil {
					return nil, err
				}
			}
		case logrepl.Delete:
			rc.Kind = model.Delete
			if rc.Row, _, err = DecodeTuple(t, c.Old); err != nil {
				return nil, err
			}
		default:
			continue
		}
		out = append(out, rc)
	}
	return out, nil
}

// DecodeTuple turns a tuple into a row in the table's column order and
// returns the indexes of the columns left out as unchanged TOAST values
// (NULL in the row until filled).
func DecodeTuple(t *StreamTable, tup logrepl.Tuple) ([]model.Value, []int, error) {
	row := make([]model.Value, len(t.Spec.Columns))
	var missing []int
	for i, col := range tup.Columns {
		if i >= len(t.Columns) {
			break
		}
		switch col.Kind {
		case logrepl.ColText:
			v, err := DecodeText(t.Columns[i], col.Data)
			if err != nil {
				return nil, nil, fmt.Errorf("decode %s.%s: %w", t.Spec.Table, t.Columns[i].Name, err)
			}
			row[i] = v
		case logrepl.ColUnchanged:
			missing = append(missing, i)
		}
	}
	return row, missing, nil
}
