package stages

import (
	"fmt"

	"github.com/google/uuid"

	"github.com/syncpipe/syncpipe/stages/checksum"
	"github.com/syncpipe/syncpipe/stages/syncrules"
)

// TableSpec is what the bucket eval and op build stages need to know about
// one source table. Build it once per table (and again when its columns
// change); it is immutable and shared by all goroutines.
type TableSpec struct {
	Table *Table
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
func NewTableSpec(t *Table, rules *syncrules.Rules, columns, identity []string) (*TableSpec, error) {
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

// Builder runs bucket evaluation and op building for rows of one table: a
// decoded row becomes a Change with its bucket PUTs (data JSON and
// checksum) and parameter lookups. A Builder belongs to one goroutine.
//
// The Changes of a batch point into memory the Builder allocates per
// batch: call Begin before each batch, and the previous batch's Changes
// stay valid (they are handed to a sink while the next batch is built).
type Builder struct {
	spec *TableSpec
	ev   *syncrules.Evaluator
	rk   checksum.ReplicaKey

	outs    []syncrules.Output
	lookups []syncrules.LookupEntry
	buf     []byte
	puts    []Put
	lks     []Lookup
}

// NewBuilder returns a builder for spec's table.
func NewBuilder(spec *TableSpec) *Builder {
	return &Builder{spec: spec, ev: spec.Bound.NewEvaluator()}
}

// Begin starts a new batch of about rows rows and bytes of output data:
// fresh arenas, so Changes of earlier batches are left untouched.
func (b *Builder) Begin(rows, bytes int) {
	b.buf = make([]byte, 0, bytes)
	b.puts = make([]Put, 0, rows*2)
	b.lks = nil
}

// ReplicaID returns the replica id of a row from its identity columns.
func (b *Builder) ReplicaID(row []syncrules.Value) uuid.UUID { return replicaID(&b.rk, b.spec, row) }

// replicaID computes a row's replica id (UUIDv5 of its identity columns)
// with rk's scratch state.
func replicaID(rk *checksum.ReplicaKey, spec *TableSpec, row []syncrules.Value) uuid.UUID {
	rk.Reset()
	for _, i := range spec.Identity {
		name := spec.Columns[i]
		v := row[i]
		switch v.Kind() {
		case syncrules.KindText:
			rk.String(name, v.Str())
		case syncrules.KindInteger:
			rk.Int64(name, v.Int64())
		case syncrules.KindReal:
			rk.Double(name, v.Float64())
		case syncrules.KindBlob:
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
func (b *Builder) Upsert(row []syncrules.Value, dst []Change) ([]Change, error) {
	c := Change{Table: b.spec.Table, Kind: Upsert, Key: b.ReplicaID(row), RowData: b.rowData(row)}
	var errs error
	if b.spec.Bound.HasData() {
		var err error
		b.outs, b.buf, err = b.ev.EvaluateRow(row, b.outs[:0], b.buf)
		errs = err
		start := len(b.puts)
		for i := range b.outs {
			o := &b.outs[i]
			b.puts = append(b.puts, Put{Bucket: o.Bucket, ObjectType: o.ObjectType, ObjectID: o.ObjectID,
				Data: o.Data, Checksum: checksum.Put(o.ObjectType, o.ObjectID, o.Data)})
		}
		c.Puts = b.puts[start:len(b.puts):len(b.puts)]
	}
	if b.spec.Bound.HasParameters() {
		c.TracksLookups = true
		var err error
		b.lookups, b.buf, err = b.ev.EvaluateParameterRow(row, b.lookups[:0], b.buf)
		if err != nil {
			errs = joinErr(errs, err)
		}
		start := len(b.lks)
		for _, l := range b.lookups {
			b.lks = append(b.lks, Lookup{Key: l.Key, Params: l.Rows})
		}
		c.Lookups = b.lks[start:len(b.lks):len(b.lks)]
	}
	return append(dst, c), errs
}

// Delete appends the Change deleting the row whose identity columns are in
// row (other columns may be NULL) to dst.
func (b *Builder) Delete(row []syncrules.Value, dst []Change) []Change {
	return append(dst, Change{Table: b.spec.Table, Kind: Delete, Key: b.ReplicaID(row),
		TracksLookups: b.spec.Bound.HasParameters()})
}

func joinErr(a, b error) error {
	if a == nil {
		return b
	}
	return fmt.Errorf("%w; %w", a, b)
}
