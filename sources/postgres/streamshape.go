package postgres

import (
	"slices"

	"github.com/syncpipe/syncpipe/model"
	"github.com/syncpipe/syncpipe/sources/postgres/logrepl"
	"github.com/syncpipe/syncpipe/stages"
)

// Shape is what the rows a sink holds of a table depend on: its columns
// (name and type, in order) and its replica identity. The stream compares
// every relation it sees with the shape the sink's rows were made from; a
// difference is a schema change (StreamTables.Reshape). Generated columns
// are left out: pgoutput does not send them, so a relation never shows
// them.
type Shape struct {
	Identity string        `json:"identity"` // relreplident: d, i, f or n
	Columns  []ShapeColumn `json:"columns"`
}

// ShapeColumn is one column of a Shape.
type ShapeColumn struct {
	Name string `json:"name"`
	Type uint32 `json:"type"`
	Key  bool   `json:"key,omitempty"` // part of the replica identity
}

// relationShape is the shape a pgoutput relation describes.
func relationShape(rel *logrepl.Relation) Shape {
	s := Shape{Identity: string(rune(rel.ReplicaIdentity)), Columns: make([]ShapeColumn, len(rel.Columns))}
	for i, c := range rel.Columns {
		s.Columns[i] = ShapeColumn{Name: c.Name, Type: c.TypeOID, Key: c.Key}
	}
	return s
}

// CatalogShape is the shape the source catalog describes, as pgoutput
// would describe it (FULL identity flags every column).
func CatalogShape(info TableInfo) Shape {
	s := Shape{Identity: string(rune(info.ReplicaIdentity))}
	for i, c := range info.Columns {
		if c.Generated {
			continue
		}
		s.Columns = append(s.Columns, ShapeColumn{Name: c.Name, Type: c.TypeOID, Key: slices.Contains(info.IdentityColumns, i)})
	}
	return s
}

// equal reports whether s and o are the same shape.
func (s Shape) equal(o Shape) bool {
	return s.Identity == o.Identity && slices.Equal(s.Columns, o.Columns)
}

// IdentityColumns returns the names of the replica identity columns.
func (s Shape) IdentityColumns() []string {
	var names []string
	for _, c := range s.Columns {
		if c.Key {
			names = append(names, c.Name)
		}
	}
	return names
}

// StreamTable is how the changes of one table decode: the rules bound to
// its columns (Spec.Columns: the shape's columns in relation order, then
// any the stream leaves NULL), each tuple column's decoding details
// (array element types, domains), and the catalog the binding was made
// with, for reading a row from the source by key.
type StreamTable struct {
	Spec *stages.TableSpec
	// Columns decode the tuple columns (Columns[i] for relation column i).
	Columns []Column
	// Info is the table in the source catalog.
	Info TableInfo
	// FromCatalog maps a catalog column (Info.Columns index) to its Spec
	// column, -1 when the binding has no such column.
	FromCatalog []int
}

// NewStreamTable binds a table of shape sh: the shape's columns decode
// with the catalog's details (info) where the catalog agrees on a
// column's type, else as plain values of their type rendered with times;
// the catalog's generated columns follow them (pgoutput omits them, so
// the stream leaves them NULL). spec makes the rules' table spec for the
// column names and the replica identity.
func NewStreamTable(sh Shape, info TableInfo, times TimeStyle, spec func(columns, identity []string) (*stages.TableSpec, error)) (*StreamTable, error) {
	t := &StreamTable{Info: info, Columns: make([]Column, 0, len(sh.Columns))}
	names := make([]string, 0, len(sh.Columns))
	var toast []int
	for _, sc := range sh.Columns {
		col := Column{Name: sc.Name, TypeOID: sc.Type, Times: times}
		if i := info.columnIndex(sc.Name); i >= 0 && info.Columns[i].TypeOID == sc.Type {
			col = info.Columns[i]
		}
		if col.Toastable {
			toast = append(toast, len(names))
		}
		t.Columns = append(t.Columns, col)
		names = append(names, sc.Name)
	}
	for _, c := range info.Columns {
		if c.Generated && !slices.Contains(names, c.Name) {
			names = append(names, c.Name)
		}
	}
	t.FromCatalog = make([]int, len(info.Columns))
	for i, c := range info.Columns {
		t.FromCatalog[i] = slices.Index(names, c.Name)
	}
	s, err := spec(names, sh.IdentityColumns())
	if err != nil {
		return nil, err
	}
	s.Toast = toast
	t.Spec = s
	return t, nil
}

// FromCatalogRow maps a row in catalog column order (read from the
// source) onto the table's columns.
func (t *StreamTable) FromCatalogRow(row []model.Value) []model.Value {
	out := make([]model.Value, len(t.Spec.Columns))
	for i, j := range t.FromCatalog {
		if j >= 0 && i < len(row) {
			out[j] = row[i]
		}
	}
	return out
}

func (info TableInfo) columnIndex(name string) int {
	for i, c := range info.Columns {
		if c.Name == name {
			return i
		}
	}
	return -1
}
