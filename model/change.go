package model

import "fmt"

// Table identifies a replicated source table within a replication group.
// ID is storage's stable id for the table; it is part of every REMOVE op's
// subkey, so it must not change while the group lives.
type Table struct {
	ID      string
	GroupID int
	Schema  string
	Name    string
}

// String returns schema.name.
func (t *Table) String() string { return t.Schema + "." + t.Name }

// ChangeKind says what happened to a source row.
type ChangeKind uint8

// Change kinds. Upsert covers snapshot rows, INSERTs and UPDATEs: the row's
// new state replaces whatever storage had. Delete removes the row. Truncate
// removes every row of Change.Table (Key and the rest are unused).
const (
	Upsert ChangeKind = iota + 1
	Delete
	Truncate
)

func (k ChangeKind) String() string {
	switch k {
	case Upsert:
		return "upsert"
	case Delete:
		return "delete"
	case Truncate:
		return "truncate"
	}
	return fmt.Sprintf("ChangeKind(%d)", k)
}

// Put is one bucket a row is in after the change, with the op's fields
// already built: the output row as JSON and its PUT checksum.
type Put struct {
	Bucket     string
	ObjectType string
	ObjectID   string
	Data       []byte
	Checksum   uint32
}

// Lookup is one parameter lookup entry a row produces: the lookup key and
// the parameter rows (a JSON array) it contributes under that key.
type Lookup struct {
	Key    []byte
	Params []byte
}

// Change is one evaluated source row change, the unit a sink persists. The
// byte slices may point into a buffer shared by the whole batch; a sink must
// not keep them after its Write returns.
type Change struct {
	Table *Table
	Kind  ChangeKind
	// Key is the row's replica id (UUIDv5 of its replica identity columns).
	Key [16]byte
	// KeyOrder orders the row's stored state before Key, which is a hash:
	// an order-preserving 32-bit prefix of its first replica identity
	// column (stages.KeyOrderOf), so that rows written in the source's key
	// order, as a snapshot reads them, get ascending storage keys. It only
	// orders; Key alone identifies the row.
	KeyOrder int32
	// Puts are the buckets the row is in now (empty for a Delete).
	Puts []Put
	// Lookups are the parameter entries the row produces now. TracksLookups
	// is set when the row's table feeds parameter queries, so that entries
	// the row no longer produces are retracted even when Lookups is empty.
	Lookups       []Lookup
	TracksLookups bool
	// RowData is the row as stored for merging unchanged TOAST values of a
	// later UPDATE; nil when the row cannot be TOASTed.
	RowData []byte
	// TxnLSN and TxnIndex place a streamed change in its source: the
	// commit LSN of its transaction and the change's index in it. A sink
	// can store them to recognise a change written again after a crash.
	// Both are zero for snapshot rows.
	TxnLSN   uint64
	TxnIndex int64
}
