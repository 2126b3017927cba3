package logrepl

import (
	"time"

	"github.com/jackc/pglogrepl"
)

// LSN is a PostgreSQL WAL position. It is pglogrepl's type, so values pass
// unchanged between this package, pglogrepl and storage code that uses it.
type LSN = pglogrepl.LSN

// Replica identity settings of a relation (pg_class.relreplident), as sent in
// a pgoutput Relation message; 'n' (nothing) and 'i' (an index) have no
// names here because nothing branches on them.
const (
	IdentityDefault byte = 'd' // primary key columns
	IdentityFull    byte = 'f' // the whole old row
)

// Relation is a table as pgoutput last described it: the relation cache
// entry that every Change points to. A Relation is immutable once published
// (a changed table gets a new *Relation), so callers may keep and compare
// pointers and read it from any goroutine; they must not modify it.
type Relation struct {
	ID              uint32 // pg_class oid; stable across renames
	Namespace       string // schema name
	Name            string // table name
	ReplicaIdentity byte   // IdentityDefault, IdentityFull, 'n' (nothing) or 'i' (index)
	Columns         []Column
}

// Column is one published column of a Relation, in tuple order. Dropped and
// generated columns are not published and do not appear.
type Column struct {
	Name    string
	TypeOID uint32 // pg_type oid; decode the text form by this
	TypeMod int32  // atttypmod, -1 when none
	Key     bool   // part of the replica identity (pgoutput flag bit 1)
}

// Equal reports whether r and o describe the same table shape: id, names,
// replica identity and columns (name, type, modifier, key flag). pgoutput
// resends an unchanged Relation after every cache invalidation; Equal is how
// such resends are told apart from real schema changes.
func (r *Relation) Equal(o *Relation) bool {
	if r == nil || o == nil {
		return r == o
	}
	if r.ID != o.ID || r.Namespace != o.Namespace || r.Name != o.Name ||
		r.ReplicaIdentity != o.ReplicaIdentity || len(r.Columns) != len(o.Columns) {
		return false
	}
	for i := range r.Columns {
		if r.Columns[i] != o.Columns[i] {
			return false
		}
	}
	return true
}

// Column kinds of a tuple value, as pgoutput sends them.
const (
	ColNull      byte = 'n' // SQL NULL
	ColUnchanged byte = 'u' // unchanged TOASTed value: not sent, keep the stored one
	ColText      byte = 't' // Data holds the value's text form
	ColBinary    byte = 'b' // Data holds the binary form (not requested by this package)
)

// Col is one value of a Tuple. Data belongs to the Col (it is never a view
// of the connection's receive buffer) and is nil unless Kind is ColText or
// ColBinary. A ColUnchanged value must never be written as NULL: merge it
// from the stored row.
type Col struct {
	Kind byte
	Data []byte
}

// Tuple is a row image with one Col per Relation column, in the same order.
// The zero Tuple (no columns) means "not sent".
type Tuple struct {
	Columns []Col
}

// ChangeKind says what a Change is.
type ChangeKind uint8

// Change kinds.
const (
	Insert ChangeKind = iota + 1
	Update
	Delete
	Truncate
	// RelationChanged reports that a table's shape (columns, types, replica
	// identity, name or schema) differs from the cached one. It comes in the
	// transaction before the first change that uses the new shape; the
	// caller should re-snapshot the table (SPEC §4).
	RelationChanged
)

// String returns the kind's name.
func (k ChangeKind) String() string {
	switch k {
	case Insert:
		return "insert"
	case Update:
		return "update"
	case Delete:
		return "delete"
	case Truncate:
		return "truncate"
	case RelationChanged:
		return "relation-changed"
	}
	return "unknown"
}

// Old tuple kinds of an Update or Delete.
const (
	OldNone byte = 0   // no old image (Update that kept the key, default identity)
	OldKey  byte = 'K' // key columns only; the other columns are ColNull
	OldFull byte = 'O' // the whole old row (REPLICA IDENTITY FULL)
)

// Change is one decoded row change (or schema event) of a transaction.
type Change struct {
	Kind ChangeKind
	// LSN is the WAL position of the change's record (0 for RelationChanged).
	LSN LSN
	// Relation is the table changed (the new shape for RelationChanged); nil
	// for Truncate, which uses TruncateRelations.
	Relation *Relation
	// Previous is the cached shape before a RelationChanged.
	Previous *Relation
	// New is the row after an Insert or Update. Unchanged TOAST values are
	// ColUnchanged.
	New Tuple
	// Old is the old image of an Update or Delete, see OldKind.
	Old Tuple
	// OldKind is OldNone, OldKey or OldFull.
	OldKind byte
	// TruncateRelations are the tables of a Truncate (one TRUNCATE statement
	// may name several).
	TruncateRelations []*Relation
	// TruncateCascade and TruncateRestartIdentity are the statement's options.
	TruncateCascade, TruncateRestartIdentity bool
}

// Txn is one source transaction, or a piece of one when a batch is Partial.
type Txn struct {
	Xid uint32
	// BeginLSN is where the transaction's first record starts.
	BeginLSN LSN
	// CommitLSN is the start of the commit record (known from BEGIN, so it is
	// set on partial pieces too). Do not acknowledge it: restarting there
	// replays the transaction.
	CommitLSN LSN
	// EndLSN is the end of the commit record (pgoutput TransactionEndLSN):
	// the position to acknowledge once the transaction is durable. It is 0 on
	// a piece that is not the transaction's last.
	EndLSN     LSN
	CommitTime time.Time
	Changes    []Change
	// Continued is true when earlier changes of this transaction were
	// delivered in previous (Partial) batches.
	Continued bool
	// Bytes approximates the transaction's decoded size (pgoutput bytes).
	Bytes int
}

// BatchLimits bounds one Next call. Zero fields take the defaults in
// DefaultBatchLimits.
type BatchLimits struct {
	// MaxTxns, MaxChanges and MaxBytes end a batch when reached. A batch
	// holds whole transactions only, so it may overshoot MaxChanges and
	// MaxBytes by the last transaction; a single transaction larger than
	// MaxChanges or MaxBytes is delivered in Partial batches instead.
	MaxTxns, MaxChanges, MaxBytes int
	// MaxWait is how long Next collects after it was called: when it expires
	// Next returns what it holds (transactions, or an idle position to
	// acknowledge) instead of waiting for a limit. With nothing to return,
	// Next keeps waiting.
	MaxWait time.Duration
	// Eager makes Next return as soon as it holds complete transactions (or
	// an idle position) and nothing more is waiting, instead of collecting
	// until MaxWait: batches then grow only while the caller is busy with
	// the previous one (natural batching), so a quiet stream adds no wait
	// to its latency and a busy one still writes large batches.
	Eager bool
}

// DefaultBatchLimits are used for zero BatchLimits fields.
var DefaultBatchLimits = BatchLimits{
	MaxTxns:    10_000,
	MaxChanges: 10_000,
	MaxBytes:   16 << 20,
	MaxWait:    100 * time.Millisecond,
}

func (l BatchLimits) withDefaults() BatchLimits {
	d := DefaultBatchLimits
	if l.MaxTxns <= 0 {
		l.MaxTxns = d.MaxTxns
	}
	if l.MaxChanges <= 0 {
		l.MaxChanges = d.MaxChanges
	}
	if l.MaxBytes <= 0 {
		l.MaxBytes = d.MaxBytes
	}
	if l.MaxWait <= 0 {
		l.MaxWait = d.MaxWait
	}
	return l
}

// Batch is what Next returns: transactions in commit order plus the position
// that may be acknowledged once all of them are durable.
type Batch struct {
	Txns []Txn
	// EndLSN is the position to pass to Ack after every transaction of this
	// batch (and of all earlier batches) is durable: the EndLSN of the last
	// complete transaction, or a later position when the stream was idle
	// after it (keepalive WAL end, syncpipe heartbeat message). A batch with
	// no transactions and a non-zero EndLSN is an idle advance. EndLSN is 0
	// on a Partial batch: never acknowledge mid-transaction.
	EndLSN LSN
	// Partial means Txns holds a single piece of a transaction too large for
	// one batch (see BatchLimits); the following batches continue it
	// (Txn.Continued) and the last piece comes in a non-partial batch.
	Partial bool
	// Changes and Bytes are totals over Txns.
	Changes, Bytes int
	// Prompt is set when a position in the batch is one something waits
	// to see acknowledged: a syncpipe heartbeat message (a write
	// checkpoint's, or the periodic heartbeat's) or a server keepalive
	// that requests a reply. A consumer that records idle positions only
	// now and then records this one at once.
	Prompt bool
}
