package replication

import (
	"encoding/json"
	"fmt"
	"slices"

	"github.com/syncpipe/syncpipe/model"
	"github.com/syncpipe/syncpipe/sources/postgres"
	"github.com/syncpipe/syncpipe/sources/postgres/logrepl"
	"github.com/syncpipe/syncpipe/stages"
)

// shape is what the stored rows of a table depend on: its columns (name
// and type, in order) and its replica identity. Storage records the shape
// the rows were made from (source_tables.shape); every relation the stream
// sees, and the source catalog now and then, is compared with it, and a
// difference re-reads the table. Generated columns are left out: pgoutput
// does not send them, so a relation never shows them.
type shape struct {
	Identity string        `json:"identity"` // relreplident: d, i, f or n
	Columns  []shapeColumn `json:"columns"`
}

type shapeColumn struct {
	Name string `json:"name"`
	Type uint32 `json:"type"`
	Key  bool   `json:"key,omitempty"` // part of the replica identity
}

// relationShape is the shape a pgoutput relation describes.
func relationShape(rel *logrepl.Relation) shape {
	s := shape{Identity: string(rune(rel.ReplicaIdentity)), Columns: make([]shapeColumn, len(rel.Columns))}
	for i, c := range rel.Columns {
		s.Columns[i] = shapeColumn{Name: c.Name, Type: c.TypeOID, Key: c.Key}
	}
	return s
}

// catalogShape is the shape the source catalog describes, as pgoutput
// would describe it (FULL identity flags every column).
func catalogShape(info postgres.TableInfo) shape {
	s := shape{Identity: string(rune(info.ReplicaIdentity))}
	for i, c := range info.Columns {
		if c.Generated {
			continue
		}
		s.Columns = append(s.Columns, shapeColumn{Name: c.Name, Type: c.TypeOID, Key: slices.Contains(info.IdentityColumns, i)})
	}
	return s
}

func (s shape) equal(o shape) bool {
	return s.Identity == o.Identity && slices.Equal(s.Columns, o.Columns)
}

// identity returns the names of the replica identity columns.
func (s shape) identity() []string {
	var names []string
	for _, c := range s.Columns {
		if c.Key {
			names = append(names, c.Name)
		}
	}
	return names
}

func (s shape) marshal() []byte {
	b, _ := json.Marshal(s) // plain strings and numbers: cannot fail
	return b
}

func parseShape(b []byte) (shape, error) {
	var s shape
	if err := json.Unmarshal(b, &s); err != nil {
		return s, fmt.Errorf("stored table shape %q: %w", b, err)
	}
	return s, nil
}

// layout binds a table's rules to a shape: the columns of the rows the
// stream decodes (the shape's, in relation order, then the catalog's
// generated columns, which the stream leaves NULL as pgoutput omits them),
// how to decode each, and how catalog-ordered rows of a re-read map onto
// them.
type layout struct {
	spec *stages.TableSpec
	// cols decode the tuple columns (cols[i] for relation column i).
	cols []postgres.Column
	// fromCatalog maps a catalog column (TableInfo.Columns index) to its
	// spec column, -1 when the shape has no such column.
	fromCatalog []int
	// info is the catalog the layout was made with (for re-reading a row).
	info postgres.TableInfo
	// st is spec and cols as the decode stage takes them.
	st postgres.StreamTable
}

// newLayout binds rules to table t with shape sh, taking decoding details
// (array element types, domains, TOAST) from the catalog's info where the
// catalog agrees on a column's type.
func newLayout(t *model.Table, r rulesBinder, sh shape, info postgres.TableInfo) (*layout, error) {
	l := &layout{}
	var names []string
	var toast []int
	for _, sc := range sh.Columns {
		col := postgres.Column{Name: sc.Name, TypeOID: sc.Type, Times: r.timeStyle()}
		if i := columnIndex(info, sc.Name); i >= 0 && info.Columns[i].TypeOID == sc.Type {
			col = info.Columns[i]
		}
		if col.Toastable {
			toast = append(toast, len(names))
		}
		l.cols = append(l.cols, col)
		names = append(names, sc.Name)
	}
	for _, c := range info.Columns {
		if c.Generated && !slices.Contains(names, c.Name) {
			names = append(names, c.Name)
		}
	}
	l.fromCatalog = make([]int, len(info.Columns))
	for i, c := range info.Columns {
		l.fromCatalog[i] = slices.Index(names, c.Name)
	}
	spec, err := r.spec(t, names, sh.identity())
	if err != nil {
		return nil, err
	}
	spec.Toast = toast
	l.spec, l.info = spec, info
	l.st = postgres.StreamTable{Spec: spec, Columns: l.cols}
	return l, nil
}

// rulesBinder makes table specs; the group's rules implement it.
type rulesBinder interface {
	spec(t *model.Table, columns, identity []string) (*stages.TableSpec, error)
	// timeStyle is how the rules render temporal values.
	timeStyle() postgres.TimeStyle
}

func columnIndex(info postgres.TableInfo, name string) int {
	for i, c := range info.Columns {
		if c.Name == name {
			return i
		}
	}
	return -1
}
