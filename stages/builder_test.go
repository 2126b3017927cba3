package stages

import (
	"github.com/google/uuid"

	"github.com/syncpipe/syncpipe/model"
)

// The tests' counterparts of Builder.Upsert: what a row's replica id is,
// and the Change that deletes a row. The pipelines get both from the
// stages; only the tests build expectations a row at a time.

// ReplicaID returns the replica id of a row from its identity columns.
func (b *Builder) ReplicaID(row []model.Value) uuid.UUID { return ReplicaID(&b.rk, b.spec, row) }

// Delete appends the Change deleting the row whose identity columns are in
// row (other columns may be NULL) to dst.
func (b *Builder) Delete(row []model.Value, dst []model.Change) []model.Change {
	return append(dst, build(&b.rk, []Evaluated{{RowChange: &RowChange{Spec: b.spec, Kind: model.Delete, Row: row}}}, 0)...)
}
