package stages

import (
	"fmt"

	"github.com/google/uuid"

	"github.com/syncpipe/syncpipe/model"
	"github.com/syncpipe/syncpipe/stages/checksum"
	"github.com/syncpipe/syncpipe/stages/syncrules"
)

// TableSpec is what the bucket eval and op build stages need to know about
// one source table. Build it once per table (and again when its columns
// change); it is immutable and shared by all goroutines.
type TableSpec struct {
	Table *model.Table
	// Bound is the sync rules bound to the table's columns.
	Bound *syncrules.BoundTable
	// Columns are the table's column names in row order.
	Columns []string
	// Identity are the indexes (into Columns) of the replica identity
	// columns, in identity order; they make the row's replica id.
	Identity []int
	// Toast are the indexes (into Columns) of columns whose large values
	// the source may omit from an update that leaves them unchanged. Big
	// rows carry their values as RowData so a later update can be merged.
	Toast []int
}

// NewTableSpec binds rules to a table's columns and resolves its replica
// identity columns by name.
func NewTableSpec(t *model.Table, rules *syncrules.Rules, columns, identity []string) (*TableSpec, error) {
	bound, err := rules.Bind(t.String(), columns)
	if err != nil {
		return nil, fmt.Errorf("bind sync rules to %s: %w", t, err)
	}
	spec := &TableSpec{Table: t, Bound: bound, Columns: columns}
	for _, name := range identity {
		idx := -1
		for i, c := range columns {
			if c == name {
				idx = i
				break
			}
		}
		if idx < 0 {
			return nil, fmt.Errorf("table %s: replica identity column %q is not among its columns", t, name)
		}
		spec.Identity = append(spec.Identity, idx)
	}
	if len(spec.Identity) == 0 {
		return nil, fmt.Errorf("table %s has no replica identity columns: give it a primary key or REPLICA IDENTITY", t)
	}
	return spec, nil
}

// Builder runs bucket eval and op build for single rows of one table, with
// the same code as the Eval and Build stages: for tools, tests and custom
// stages that handle a row at a time. Pipelines use the stages, which work
// per batch. A Builder belongs to one goroutine; the Changes it returns
// stay valid.
type Builder struct {
	spec *TableSpec
	w    evalWorker
	rk   checksum.ReplicaKey
	err  error // of the row being evaluated
}

// NewBuilder returns a builder for spec's table.
func NewBuilder(spec *TableSpec) *Builder {
	b := &Builder{spec: spec}
	b.w = evalWorker{evs: map[*TableSpec]*syncrules.Evaluator{}, onErr: func(_ *model.Table, err error) { b.err = err }}
	return b
}

// ReplicaID computes the replica id of a row of spec's table (UUIDv5 of
// its identity columns) with rk's scratch state.
func ReplicaID(rk *checksum.ReplicaKey, spec *TableSpec, row []model.Value) uuid.UUID {
	rk.Reset()
	for _, i := range spec.Identity {
		name := spec.Columns[i]
		v := row[i]
		switch v.Kind() {
		case model.KindText:
			rk.String(name, v.Str())
		case model.KindInteger:
			rk.Int64(name, v.Int64())
		case model.KindReal:
			rk.Double(name, v.Float64())
		case model.KindBlob:
			rk.Binary(name, v.Bytes())
		default:
			rk.Null(name)
		}
	}
	return rk.UUID()
}

// Upsert appends the Change for the new state of row (values in column
// order) to dst. Rows that fail a query's evaluation are still written for
// the queries that succeed; the error says which failed.
func (b *Builder) Upsert(row []model.Value, dst []model.Change) ([]model.Change, error) {
	b.err = nil
	ev := b.w.eval([]RowChange{{Spec: b.spec, Kind: model.Upsert, Row: row}}, estimateSize(row))
	return append(dst, build(&b.rk, ev, 0)...), b.err
}

func joinErr(a, b error) error {
	if a == nil {
		return b
	}
	return fmt.Errorf("%w; %w", a, b)
}
