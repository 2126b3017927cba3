package syncrules

import (
	"fmt"
	"sort"
	"strings"
)

// Options configure Parse.
type Options struct {
	// File is the rules file name used in error messages.
	File string
	// GroupID is the replication group (sync rules version) id. Bucket ids
	// are "<GroupID>#<definition>[params]" as with PowerSync's versioned
	// bucket ids; an empty GroupID gives unversioned ids.
	GroupID string
	// DefaultSchema qualifies unqualified table names ("public" if empty).
	DefaultSchema string
}

func (o Options) defaultSchema() string {
	if o.DefaultSchema == "" {
		return "public"
	}
	return o.DefaultSchema
}

// Rules are compiled sync rules for one replication group. They are
// immutable and safe for concurrent use.
type Rules struct {
	opts     Options
	defs     []*definition
	warnings RuleErrors
	// streams and lookups are the Sync Streams (streams.go), in the order
	// PowerSync considers them.
	streams    []*stream
	streamDefs []*definition // their buckets, each once
	lookups    []*streamLookup
	streamsAt  int // line of the streams: key, 0 if none
	compat     Compatibility
}

// StreamNames lists the Sync Streams of the file, in the order PowerSync
// considers them.
func (r *Rules) StreamNames() []string {
	names := make([]string, len(r.streams))
	for i, s := range r.streams {
		names[i] = s.name
	}
	return names
}

// StreamsLine returns the line of the file's streams: section (Sync
// Streams), or 0 if it has none.
func (r *Rules) StreamsLine() int { return r.streamsAt }

// Parse compiles PowerSync edition-1 sync rules (YAML with
// bucket_definitions). Every query is parsed and compiled once here, so
// unsupported syntax is reported now and never at row time. On failure the
// error is a RuleErrors listing every problem with its position.
func Parse(src []byte, opts Options) (*Rules, error) {
	ld := &loader{opts: opts, src: strings.Split(string(src), "\n"), rules: &Rules{opts: opts}}
	ld.load(src)
	sortErrors(ld.errs)
	if len(ld.errs) > 0 {
		return nil, ld.errs
	}
	sortErrors(ld.warnings)
	ld.rules.warnings = ld.warnings
	return ld.rules, nil
}

// sortErrors orders problems by position.
func sortErrors(es RuleErrors) {
	sort.SliceStable(es, func(i, j int) bool {
		a, b := es[i], es[j]
		return a.Line < b.Line || (a.Line == b.Line && a.Column < b.Column)
	})
}

// Warnings returns the problems PowerSync reports without rejecting the
// rules (e.g. a query reading unauthenticated client parameters), in
// document order.
func (r *Rules) Warnings() RuleErrors { return r.warnings }

// Definition describes one bucket definition, for status output and for
// callers that need to list buckets.
type Definition struct {
	Name             string
	Priority         int
	BucketParameters []string // in bucket id order
	DataQueries      int
	ParameterQueries int
}

// Definitions lists the bucket definitions in file order.
func (r *Rules) Definitions() []Definition {
	out := make([]Definition, len(r.defs))
	for i, d := range r.defs {
		out[i] = Definition{Name: d.name, Priority: d.priority, BucketParameters: append([]string(nil), d.bucketParams...),
			DataQueries: len(d.data), ParameterQueries: len(d.static) + len(d.funcs) + len(d.tables)}
	}
	return out
}

// TableName is a schema-qualified source table.
type TableName struct {
	Schema string
	Name   string
}

// String returns schema.name.
func (t TableName) String() string { return t.Schema + "." + t.Name }

// Tables returns the source tables the rules read, sorted, so the source
// knows what to snapshot and stream. Data tables and parameter tables are
// both included.
func (r *Rules) Tables() []TableName {
	seen := map[tableRef]bool{}
	var out []TableName
	add := func(t tableRef) {
		if !seen[t] {
			seen[t] = true
			out = append(out, TableName{Schema: t.schema, Name: t.name})
		}
	}
	for _, d := range r.defs {
		for _, q := range d.data {
			add(q.table)
		}
		for _, q := range d.tables {
			add(q.table)
		}
	}
	for _, d := range r.streamDefs {
		for _, q := range d.data {
			add(q.table)
		}
	}
	for _, lk := range r.lookups {
		add(lk.table)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].String() < out[j].String() })
	return out
}

// Schema is a known source schema: table → ordered column names. Keys are
// "schema.table", or "table" for the default schema. A table with a nil
// column list is known to exist with columns unknown (they are not checked).
type Schema map[string][]string

func (s Schema) columns(t tableRef, defaultSchema string) ([]string, bool) {
	if cols, ok := s[t.String()]; ok {
		return cols, true
	}
	if t.schema == defaultSchema {
		cols, ok := s[t.name]
		return cols, ok
	}
	return nil, false
}

// CheckSchema checks the rules against a known source schema: every table
// a query reads and every column it references should exist, and a data
// query selecting * from a table without an id column should select one.
// As with PowerSync, these are warnings (the rules still run: a missing
// column reads as NULL and is left out of the row data), returned together
// in document order, each naming bucket, query, table, column and position.
func (r *Rules) CheckSchema(s Schema) RuleErrors {
	var out RuleErrors
	file, ds := r.opts.File, r.opts.defaultSchema()
	warn := func(q *queryBase, pos int, token, format string, args ...any) {
		e := q.errorAt(file, pos, token, fmt.Sprintf(format, args...))
		e.Level = LevelWarning
		out = append(out, e)
	}
	check := func(q *queryBase, t tableRef, tablePos int, refs []colUse) []string {
		cols, ok := s.columns(t, ds)
		if !ok {
			warn(q, tablePos, t.name, "table %s does not exist in the source", describeTable(t))
			return nil
		}
		if cols == nil {
			return nil
		}
		for _, ref := range refs {
			if !contains(cols, ref.name) {
				warn(q, ref.pos, ref.name, "column %q does not exist in table %s", ref.name, describeTable(t))
			}
		}
		return cols
	}
	for _, d := range r.defs {
		for _, q := range d.tables {
			check(&q.queryBase, q.table, q.tablePos, q.refs)
		}
		for _, q := range d.data {
			cols := check(&q.queryBase, q.table, q.tablePos, q.refs)
			if cols != nil && q.hasStar && !contains(cols, "id") && !q.selectsID() {
				warn(&q.queryBase, q.starPos, "*", `table %s has no "id" column; select one with an alias, e.g. "SELECT pk AS id, *"`, describeTable(q.table))
			}
		}
	}
	sortErrors(out)
	return out
}

func (q *dataQuery) selectsID() bool {
	for _, c := range q.cols {
		if !c.star && c.name == "id" {
			return true
		}
	}
	return false
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}
