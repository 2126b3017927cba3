package postgres

import (
	"context"
	"time"

	"github.com/syncpipe/syncpipe/model"
	"github.com/syncpipe/syncpipe/sources/postgres/logrepl"
	"github.com/syncpipe/syncpipe/stages"
)

// The stream reader's tables: which relation is which of the pipeline's
// tables (by name, or by the OID the sink's rows come from), and when one
// changes shape — in a relation the slot sends, or in the source catalog.

// ReadTable is the reader's state of one table the pipeline reads.
type ReadTable struct {
	// Name is the table's schema.name, as the pipeline names it.
	Name string
	// OID is the relation the sink's rows of the table come from; the
	// reader follows it through renames and schema moves (0: none).
	OID uint32
	// Shape is the shape the sink's rows were made from.
	Shape Shape
	// Table is how the table's changes decode now.
	Table *StreamTable

	rel *logrepl.Relation // the relation Table was last checked against
	// check is set when the catalog showed a shape or relation other
	// than the stored one: once the stream passes check.lsn (the DDL is
	// behind it) and no relation re-shaped the table since, it is
	// re-shaped to the catalog's.
	check *catalogCheck
}

type catalogCheck struct {
	lsn  logrepl.LSN
	info TableInfo
}

// Reshape is what a pipeline does when a table's shape changes.
type Reshape[P any] struct {
	// Table decodes the table's changes from now on.
	Table *StreamTable
	// Clear empties the sink's rows of the table first (a TRUNCATE in the
	// old binding): their replica ids change, or they came from another
	// relation.
	Clear bool
	// Record, if set, adds what records the new shape with the sink to
	// the progress of a batch of the change's own.
	Record func(*P)
}

// StreamTables is what the reader asks of the pipeline when a table
// changes shape (see ReadTable): a relation or the catalog shows columns,
// types or a replica identity other than the table's Shape, or another
// relation under its name (dropped and re-created, or renamed into place;
// oid is the new one).
type StreamTables[P any] interface {
	Reshape(ctx context.Context, t *ReadTable, sh Shape, oid uint32) (Reshape[P], error)
}

// StreamCatalog checks the source catalog for schema changes the stream
// does not show (a DDL shows in the stream only once a row changes).
type StreamCatalog interface {
	// Catalog reads the tables from the source catalog and then the
	// source's WAL position: any DDL the catalog shows is behind it.
	Catalog(ctx context.Context, tables []*ReadTable) ([]TableInfo, logrepl.LSN, error)
	// Nudge makes the stream pass the source's current WAL position soon,
	// also when the source is idle (a heartbeat).
	Nudge(ctx context.Context) error
}

// follow records that t's rows in the sink come from relation oid from
// now on. A table that followed oid before loses it: oid is t's now, and
// that table is re-shaped once its name shows another relation.
func (r *StreamReader[P]) follow(t *ReadTable, oid uint32) {
	if r.byOID[t.OID] == t {
		delete(r.byOID, t.OID)
	}
	if other := r.byOID[oid]; other != nil && other != t {
		other.OID = 0
	}
	t.OID = oid
	if oid != 0 {
		r.byOID[oid] = t
	}
}

// bind returns rel's table, checked against rel: re-shaped first when
// rel's shape is not the table's, or rel is another relation than the one
// the table's rows come from. It returns nil for a relation the pipeline
// does not read.
//
// A relation is the pipeline's table by its name, or — under any other
// name — by its OID: the table renamed or moved to another schema. Its
// changes there apply as under its own name, so once it is back nothing
// was lost (replication/doc.go, "Renamed, moved and re-created tables").
// Another relation under the table's name (the table was dropped and
// re-created, or another renamed into its place) is a re-shape to oid.
func (r *StreamReader[P]) bind(ctx context.Context, rel *logrepl.Relation, txn *logrepl.Txn) (*ReadTable, error) {
	t := r.byName[rel.Namespace+"."+rel.Name]
	if t == nil {
		if t = r.byOID[rel.ID]; t == nil {
			return nil, nil // published but not read by the pipeline
		}
	}
	if t.rel == rel {
		return t, nil
	}
	if sh := relationShape(rel); rel.ID != t.OID || !sh.equal(t.Shape) {
		if err := r.reshape(ctx, t, sh, rel.ID, txn); err != nil {
			return nil, err
		}
	}
	t.rel = rel
	t.check = nil
	return t, nil
}

// reshape makes sh t's shape, and oid the relation its rows come from, at
// the current position (inside txn when it is set). When the pipeline
// records it or clears the table, the changes so far are cut into a batch
// and that is done in a batch of its own.
func (r *StreamReader[P]) reshape(ctx context.Context, t *ReadTable, sh Shape, oid uint32, txn *logrepl.Txn) error {
	rs, err := r.cfg.Reshape.Reshape(ctx, t, sh, oid)
	if err != nil {
		return err
	}
	if rs.Clear || rs.Record != nil {
		r.cutIfAny(txn)
		b := r.open()
		if rs.Clear {
			b.Items = append(b.Items, StreamItem{Table: t.Table, Row: stages.RowChange{Spec: t.Table.Spec, Kind: model.Truncate}})
		}
		if rs.Record != nil {
			rs.Record(&b.Progress)
		}
		r.cut(txn)
	}
	r.follow(t, oid)
	t.Shape, t.Table = sh, rs.Table
	t.rel = nil
	t.check = nil
	return nil
}

// checkCatalogEvery checks the catalog at the start and then every
// CatalogInterval (never when it is 0).
func (r *StreamReader[P]) checkCatalogEvery(ctx context.Context) error {
	every := r.cfg.CatalogInterval
	if r.cfg.Catalog == nil || every <= 0 || time.Since(r.lastCheck) < every {
		return nil
	}
	r.lastCheck = time.Now()
	tables := make([]*ReadTable, 0, len(r.byName))
	for _, t := range r.byName {
		tables = append(tables, t)
	}
	infos, lsn, err := r.cfg.Catalog.Catalog(ctx, tables)
	if err != nil {
		return err
	}
	due := false
	for _, info := range infos {
		t := r.byName[info.Schema+"."+info.Name]
		if t == nil {
			continue
		}
		if info.OID == t.OID && CatalogShape(info).equal(t.Shape) {
			t.check = nil
		} else if t.check == nil || t.check.info.OID != info.OID {
			t.check = &catalogCheck{lsn: lsn, info: info}
			due = true
		}
	}
	if due {
		if err := r.cfg.Catalog.Nudge(ctx); err != nil {
			return err
		}
	}
	return r.checkCatalogDue(ctx)
}

// checkCatalogDue re-shapes the tables whose catalog check is due: the
// stream has passed its position, outside a transaction.
func (r *StreamReader[P]) checkCatalogDue(ctx context.Context) error {
	if r.pos.TxnLSN != 0 {
		return nil
	}
	for _, t := range r.byName {
		if t.check == nil || r.pos.LSN < t.check.lsn {
			continue
		}
		info := t.check.info
		sh := CatalogShape(info)
		t.check = nil
		if info.OID == t.OID && sh.equal(t.Shape) {
			continue
		}
		if err := r.reshape(ctx, t, sh, info.OID, nil); err != nil {
			return err
		}
	}
	return nil
}
