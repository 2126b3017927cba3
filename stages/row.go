package stages

import (
	"github.com/syncpipe/syncpipe/model"
	"github.com/syncpipe/syncpipe/stages/syncrules"
)

// RowChange is a decoded source row change: what the decode stage (or a
// snapshot read) hands to bucket eval. Row values are in Spec.Columns
// order.
type RowChange struct {
	Spec *TableSpec
	// Kind is Upsert (a snapshot row, an INSERT or an UPDATE), Delete or
	// Truncate (Row unused).
	Kind model.ChangeKind
	// Row is the row's new state for an Upsert; for a Delete, its replica
	// identity columns (the other columns may be NULL).
	Row []model.Value
	// Old is, for an Upsert from an UPDATE that sent an old key image, the
	// row's previous identity: when it gives another replica id than Row,
	// op build retracts the row under the old one first.
	Old []model.Value
	// Key and RowData, when Derived is set, are Row's replica id and its
	// RowData (see Change), which the decode stage computed already: it
	// tracks TOAST state by them. Op build then uses them rather than
	// hashing the identity columns and encoding the row a second time.
	Key     [16]byte
	RowData []byte
	Derived bool
	// TxnLSN and TxnIndex place a streamed change in its source: the
	// commit LSN of its transaction and the change's index in it (from 0).
	// Both are zero for snapshot rows.
	TxnLSN   uint64
	TxnIndex int64
}

// Evaluated is a row change after bucket eval, before op build: the rows
// the sync rules produce for each bucket and the parameter lookups. The
// byte slices point into a buffer of the batch, and RowChange into the
// eval stage's input batch (not copied: this is per row, and a snapshot
// batch holds ten thousand rows).
type Evaluated struct {
	*RowChange
	Outputs []syncrules.Output
	Lookups []syncrules.LookupEntry
}

// Upserts wraps snapshot rows of one table as row changes, the input of
// the eval stage; the rows are not copied.
func Upserts(spec *TableSpec, rows [][]model.Value) []RowChange {
	out := make([]RowChange, len(rows))
	for i, r := range rows {
		out[i] = RowChange{Spec: spec, Kind: model.Upsert, Row: r}
	}
	return out
}
