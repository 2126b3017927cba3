package syncrules

import (
	"strings"

	"go.yaml.in/yaml/v3"
)

// Common table expressions of Sync Streams: `with:` at the top level (seen
// by every stream) and in a stream (seen by its queries, shadowing
// top-level names). PowerSync inlines a CTE where a query names it; a
// query here may name one as `x IN name`, in a subquery `x IN (SELECT col
// FROM name …)` or as the joined table, and each use is a parameter lookup
// on the CTE's table (streams_join.go). Inside a CTE the other CTEs are
// not in scope, so a name there is a table or a column, as in PowerSync.

// cte is one common table expression.
type cte struct {
	name string
	key  *yaml.Node // where the unused warning points
	base *queryBase // its SQL and where it is in the YAML
	// off is added to the byte offsets of its SQL's tokens, so that an
	// error or warning in it can be told from one in the query using it
	// (cteScope.report).
	off  int
	stmt *selectStmt // nil: its SQL does not parse (reported)
	used bool
	// variants are the CTE split at the ORs of its WHERE, one per OR-ed
	// term (nil: none; streams_subor.go).
	variants []*cte
}

// cteOffset spaces the offsets of CTE texts apart from queries' (a query
// is far shorter than 16 MiB).
const cteOffset = 1 << 24

// cteScope is the CTEs a stream's queries see, by name.
type cteScope map[string]*cte

// loadCTEs reads a `with:` mapping (name → SQL), parsing each query once
// as PowerSync does, so errors in an unused one are reported too.
func (sc *streamCompiler) loadCTEs(v *yaml.Node, owner string, parent cteScope) cteScope {
	ld := sc.ld
	scope := cteScope{}
	for k, c := range parent {
		scope[k] = c
	}
	if v.Kind != yaml.MappingNode {
		ld.errAt(v, owner, "with", "", "must be object")
		return scope
	}
	for i := 0; i+1 < len(v.Content); i += 2 {
		k, q := v.Content[i], v.Content[i+1]
		if q.Kind != yaml.ScalarNode || q.Tag == "!!null" || strings.TrimSpace(q.Value) == "" {
			ld.errAt(q, owner, "with."+k.Value, "", "Expected a scalar value here.")
			continue
		}
		sc.ctes = append(sc.ctes, nil)
		c := &cte{name: k.Value, key: k, off: len(sc.ctes) * cteOffset,
			base: &queryBase{def: &definition{name: owner}, label: "with." + k.Value, sql: q.Value, loc: locOf(q, ld.src)}}
		sc.ctes[len(sc.ctes)-1] = c
		st, err := parseStreamSelectAt(q.Value, c.off)
		if err == nil {
			c.stmt = st
			notEqualAsNot(st)
			if err = sc.validateCTE(c); err != nil {
				c.stmt = nil // its uses are refused, at its text
			}
		}
		if err != nil {
			sc.report(nil, []*sqlError{err})
		}
		scope[k.Value] = c
	}
	return scope
}

// use marks the CTE name refers to, if any, as used and returns it.
func (s cteScope) use(schema, name string) *cte {
	if schema != "" {
		return nil
	}
	c := s[name]
	if c != nil {
		c.used = true
	}
	return c
}

// report records errors of a stream query or of the CTEs it uses: each at
// the text its offset falls in.
func (sc *streamCompiler) report(q *queryBase, errs []*sqlError) {
	for _, e := range errs {
		base, pos := sc.baseOf(q, e.pos)
		sc.ld.errs = append(sc.ld.errs, base.errorAt(sc.ld.opts.File, pos, e.token, e.msg))
	}
}

// warn records warnings likewise.
func (sc *streamCompiler) warn(q *queryBase, ws []*sqlError) {
	for _, w := range ws {
		base, pos := sc.baseOf(q, w.pos)
		e := base.errorAt(sc.ld.opts.File, pos, w.token, w.msg)
		e.Level = LevelWarning
		sc.ld.warnings = append(sc.ld.warnings, e)
	}
}

// baseOf is the text an offset is in: q's, or a CTE's.
func (sc *streamCompiler) baseOf(q *queryBase, pos int) (*queryBase, int) {
	if i := pos/cteOffset - 1; i >= 0 && i < len(sc.ctes) {
		c := sc.ctes[i]
		return c.base, pos - c.off
	}
	return q, pos
}

// unusedCTEs warns about the CTEs no query names, as PowerSync does after
// the streams.
func (sc *streamCompiler) unusedCTEs() {
	for _, c := range sc.ctes {
		if !c.used {
			sc.ld.warnings = append(sc.ld.warnings, &RuleError{File: sc.ld.opts.File, Line: c.key.Line, Column: c.key.Column,
				Bucket: c.base.def.name, Query: c.base.label, Token: c.name, Msg: "This common table expression isn't referenced.", Level: LevelWarning})
		}
	}
}

// cteShape is a CTE checked as a lookup: its table, output names and
// AND-ed conditions.
type cteShape struct {
	table tableRef
	inner string            // its table's name in its SQL
	cols  map[string]string // output name → column
	order []string          // output names
	where []node
}

// checkCTE checks that a CTE is one table's plain columns under AND-ed
// conditions, the CTEs syncpipe reads as lookups.
func (sc *streamCompiler) checkCTE(c *cte) (*cteShape, *sqlError) {
	if c.stmt == nil {
		return nil, &sqlError{pos: c.off, msg: "the common table expression does not compile"}
	}
	st := c.stmt
	if st.from == nil || st.from.call != nil || len(st.joins) > 0 {
		return nil, &sqlError{pos: st.pos, token: "SELECT", msg: "a common table expression must select from one table (other forms are not supported yet)"}
	}
	cs := &cteShape{table: tableRef{schema: st.from.schema, name: st.from.name}, inner: st.from.name, cols: map[string]string{}}
	if cs.table.schema == "" {
		cs.table.schema = sc.ld.opts.defaultSchema()
	}
	if st.from.alias != "" {
		cs.inner = st.from.alias
	}
	for _, col := range st.cols {
		if col.star {
			return nil, &sqlError{pos: col.pos, token: "*", msg: "* columns are not allowed in subqueries or common table expressions"}
		}
		name, ok := rowColumn(col.expr, cs.inner)
		if !ok {
			return nil, &sqlError{pos: col.pos, msg: "a common table expression must select columns of its table (expressions are not supported yet)"}
		}
		out := name
		if col.hasAlias {
			out = col.alias
		}
		if _, dup := cs.cols[out]; dup {
			return nil, &sqlError{pos: col.pos, token: out, msg: "There is a column named '" + out + "' already."}
		}
		cs.cols[out] = name
		cs.order = append(cs.order, out)
	}
	if st.where != nil {
		w, err := andFactors([]node{st.where})
		if err != nil {
			return nil, err
		}
		for _, f := range w {
			if n, _ := findStreamOnly(f); n != nil {
				if _, isSub := n.(*subqueryNode); isSub {
					return nil, &sqlError{pos: n.position(), msg: "a subquery in a common table expression is not supported yet"}
				}
			}
		}
		cs.where = w
	}
	return cs, nil
}

// validateCTE checks a CTE when it is read, as PowerSync compiles each
// once: the shape checkCTE wants, and conditions that are key conditions
// (column = <request value>), conditions on its table alone or on request
// values alone, each of which compiles.
func (sc *streamCompiler) validateCTE(c *cte) *sqlError {
	if err := splitCTE(c); err != nil || c.variants != nil {
		return sc.validateVariants(c, err)
	}
	cs, err := sc.checkCTE(c)
	if err != nil {
		return err
	}
	const self = "\x00cte"
	src := &qsource{table: cs.table, name: self}
	q := &qscope{srcs: map[string]*qsource{self: src}}
	var filters []node
	for _, w := range cs.where {
		f, err := mapRefs(w, func(r *refNode) (node, *sqlError) {
			if r.schema == "" && (r.table == "" || r.table == cs.inner) {
				return &refNode{pos: r.pos, table: self, name: r.name, raw: r.raw}, nil
			}
			return r, nil
		})
		if err != nil {
			return err
		}
		k, err := q.classify(f)
		switch {
		case err == errRequestOnly:
			if _, errs := requestFilter("", f, false); len(errs) > 0 { // checked only, likewise
				return errs[0]
			}
		case err != nil:
			return err
		case k.kind == fFilter:
			filters = append(filters, f)
		case k.kind != fKey && hasColumn(f):
			return &sqlError{pos: f.position(), msg: "a common table expression's condition must read its table (other forms are not supported yet)"}
		}
	}
	_, _, err = lookupFilter(self, filters, false) // checked only: uses compile it again
	return err
}
