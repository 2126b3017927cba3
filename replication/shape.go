package replication

import (
	"encoding/json"
	"fmt"

	"github.com/syncpipe/syncpipe/model"
	"github.com/syncpipe/syncpipe/sources/postgres"
	"github.com/syncpipe/syncpipe/stages"
)

// Storage records, per table, the shape its rows were made from
// (source_tables.shape): postgres.Shape as JSON. The stream compares every
// relation it sees, and the source catalog now and then, with it, and a
// difference re-reads the table (resnapshot.go).

func marshalShape(s postgres.Shape) []byte {
	b, _ := json.Marshal(s) // plain strings and numbers: cannot fail
	return b
}

func parseShape(b []byte) (postgres.Shape, error) {
	var s postgres.Shape
	if err := json.Unmarshal(b, &s); err != nil {
		return s, fmt.Errorf("stored table shape %q: %w", b, err)
	}
	return s, nil
}

// newLayout binds rules to table t with shape sh, taking decoding details
// (array element types, domains, TOAST) from the catalog's info where the
// catalog agrees on a column's type.
func newLayout(t *model.Table, r rulesBinder, sh postgres.Shape, info postgres.TableInfo) (*postgres.StreamTable, error) {
	return postgres.NewStreamTable(sh, info, r.timeStyle(), func(columns, identity []string) (*stages.TableSpec, error) {
		return r.spec(t, columns, identity)
	})
}

// rulesBinder makes table specs; the group's rules implement it.
type rulesBinder interface {
	spec(t *model.Table, columns, identity []string) (*stages.TableSpec, error)
	// timeStyle is how the rules render temporal values.
	timeStyle() postgres.TimeStyle
}
