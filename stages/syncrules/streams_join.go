package syncrules

import (
	"slices"
	"strconv"
	"strings"
)

// Joins, subqueries and CTEs of a stream query, as PowerSync's sync-plan
// compiler reads them: `x IN (SELECT col FROM t WHERE …)`, `x IN cte`,
// `FROM p JOIN t ON p.x = t.y` and `FROM p, t WHERE p.x = t.y` all add a
// table t to the query, and in each OR-ed term the conditions on t — its
// columns equal to request values (the lookup's key), conditions on t
// alone (its filter) and columns of the synced table equal to its columns
// (its outputs) — make a parameter lookup (streamLookup) whose stored rows
// give bucket parameters.
//
// syncpipe supports inner joins of any number of tables (chains too,
// streams_graph.go), and subqueries (nested ones too,
// streams_graph.go), their outputs plain columns each giving one bucket
// parameter or another lookup's key; CTEs and subqueries of one table
// whose WHERE is AND-ed conditions (ORs split first, streams_subor.go).
// Other shapes are refused.

// qsource is a table a lookup reads: the joined table, or a subquery's or
// a CTE's table.
type qsource struct {
	table tableRef
	// name is the table name its column references carry once qualified
	// (qualify): the joined table's name in the query, or a name no query
	// can write for a subquery's.
	name string
	cols map[string]string // a CTE's output names: its table's columns (nil: a table)
}

// lookupUse is the lookup an OR-ed term makes of a qsource.
type lookupUse struct {
	src     *qsource
	keys    []lookupKey // column = request value
	outs    []string    // columns the synced table's are equal to, in order of use
	filters []node      // conditions on the table alone
	lk      *streamLookup
	depth   int  // its stage: 1 for a table joined to the synced one (streams_graph.go)
	root    bool // its outputs are bucket parameters (not another lookup's keys)
}

// lookupKey is a key column of a lookup and the request value it equals,
// or (from) the output of another lookup.
type lookupKey struct {
	col  string
	req  streamReq
	pos  int        // of the request value, for the dangerous-query warning
	from *lookupUse // a nested lookup's: its output out
	out  int
}

// streamLookup is a parameter lookup, evaluated at replication time into
// entries keyed by its key columns' values and holding its outputs' values.
type streamLookup struct {
	index  int
	table  tableRef
	keys   []string // key columns, in key order (streamHash)
	outs   []string
	filter expr // nil: none; a row condition, unbound
}

// qscope is what a stream query's names resolve to.
type qscope struct {
	outName string     // the synced table's name in the query
	joins   []*qsource // the joined tables
	ctes    cteScope
	subs    map[node]*expansion // subqueries expanded so far
	srcs    map[string]*qsource // lookup tables by qualified name
}

// expansion is a subquery (or CTE name) after `x IN`: the factors it adds
// to an OR-ed term in its place.
type expansion struct {
	factors []node
	err     *sqlError
}

// fromJoins resolves a query's FROM: the synced table and the joined
// tables, whose ON conditions (and a joined CTE's WHERE) are AND-ed
// before the WHERE, in PowerSync's order.
func (sc *streamCompiler) fromJoins(st *selectStmt, ctes cteScope) (*qscope, *sqlError) {
	joins := slices.Clone(st.joins)
	if name := syncedName(st); name != "" {
		for i := range joins {
			if itemName(joins[i].item) == name {
				// The synced table is the one the columns are selected
				// from, wherever it is in FROM.
				st.from, joins[i].item = joins[i].item, st.from
				break
			}
		}
	}
	f := st.from
	if ctes.use(f.schema, f.name) != nil {
		return nil, &sqlError{pos: f.pos, token: f.name, msg: "a stream query must select from a table, not a common table expression (not supported)"}
	}
	q := &qscope{outName: itemName(f), ctes: ctes, subs: map[node]*expansion{}, srcs: map[string]*qsource{}}
	if len(joins) == 0 {
		return q, nil
	}
	var conds, ons []node
	for _, j := range joins {
		cs, err := sc.joinTable(q, j.item)
		if err != nil {
			return nil, err
		}
		conds, ons = append(conds, cs...), append(ons, j.on)
	}
	// The CTE's conditions are qualified already; the query's are not.
	for _, n := range append(ons, st.where) {
		if n == nil {
			continue
		}
		qn, err := q.qualify(n)
		if err != nil {
			return nil, err
		}
		conds = append(conds, qn)
	}
	st.where = nil
	if len(conds) > 0 {
		st.where = andOf(conds)
	}
	if err := q.checkColumns(st); err != nil {
		return nil, err
	}
	return q, nil
}

// joinTable adds a joined table (or CTE) to q and returns a joined CTE's
// conditions.
func (sc *streamCompiler) joinTable(q *qscope, item *fromItem) ([]node, *sqlError) {
	if item.call != nil {
		return nil, &sqlError{pos: item.pos, token: item.name, msg: "joining a table-valued function is not supported"}
	}
	src, conds, err := sc.source(item, q.ctes)
	if err != nil {
		return nil, err
	}
	if src.name == q.outName || q.srcs[src.name] != nil {
		return nil, &sqlError{pos: item.pos, token: item.name, msg: "the joined table needs a name of its own (an alias)"}
	}
	q.joins = append(q.joins, src)
	q.srcs[src.name] = src
	return conds, nil
}

// checkColumns checks that a join query selects the synced table's
// columns only.
func (q *qscope) checkColumns(st *selectStmt) *sqlError {
	for _, c := range st.cols {
		if c.star {
			if c.starTbl != q.outName {
				return &sqlError{pos: c.pos, token: "*", msg: "with a joined table, select the synced table's columns as " + q.outName + ".*"}
			}
			continue
		}
		if _, err := q.qualify(c.expr); err != nil {
			return err
		}
		if slices.ContainsFunc(q.joins, func(src *qsource) bool { return hasRefTo(c.expr, src.name) }) {
			return &sqlError{pos: c.pos, msg: "Sync streams can only select from a single table: the joined table's columns cannot be synced"}
		}
	}
	return nil
}

// itemName is the name a FROM item has in the query.
func itemName(f *fromItem) string {
	if f.alias != "" {
		return f.alias
	}
	return f.name
}

// syncedName is the table the first selected column names (table.* or
// table.column), "" for none.
func syncedName(st *selectStmt) string {
	if len(st.cols) == 0 {
		return ""
	}
	if c := st.cols[0]; c.star {
		return c.starTbl
	}
	name := ""
	_, _ = mapRefs(st.cols[0].expr, func(r *refNode) (node, *sqlError) {
		if name == "" {
			name = r.table
		}
		return r, nil
	})
	return name
}

// source resolves a joined or subquery table: a table, or a CTE whose
// WHERE factors (qualified with the source's name) it returns.
func (sc *streamCompiler) source(f *fromItem, ctes cteScope) (*qsource, []node, *sqlError) {
	name := f.name
	if f.alias != "" {
		name = f.alias
	}
	c := ctes.use(f.schema, f.name)
	if c == nil {
		t := tableRef{schema: f.schema, name: f.name}
		if t.schema == "" {
			t.schema = sc.ld.opts.defaultSchema()
		}
		return &qsource{table: t, name: name}, nil, nil
	}
	shape := c
	if c.variants != nil {
		// Its variants have its table and columns; its WHERE, ORs and
		// all, is the query's to expand (streams_subor.go).
		shape = c.variants[0]
	}
	cs, err := sc.checkCTE(shape)
	if err != nil {
		return nil, nil, err
	}
	src := &qsource{table: cs.table, name: name, cols: cs.cols}
	where := cs.where
	if c.variants != nil {
		where = []node{c.stmt.where}
	}
	var conds []node
	for _, w := range where {
		n, err := mapRefs(w, func(r *refNode) (node, *sqlError) {
			if r.schema == "" && (r.table == "" || r.table == cs.inner) {
				return &refNode{pos: r.pos, table: name, name: r.name, raw: r.raw}, nil
			}
			return r, nil
		})
		if err != nil {
			return nil, nil, err
		}
		conds = append(conds, n)
	}
	return src, conds, nil
}

// qualify gives every column reference of a join query the name of its
// table; unqualified ones are ambiguous there, and a joined CTE's output
// names become its table's columns.
func (q *qscope) qualify(n node) (node, *sqlError) {
	if n == nil || len(q.joins) == 0 {
		return n, nil
	}
	return mapRefs(n, func(r *refNode) (node, *sqlError) {
		switch {
		case r.schema != "":
			return r, nil
		case r.table == "" && q.ctes[r.name] != nil:
			return r, nil // `x IN cte`: a bare name there is the CTE's (expand)
		case r.table == "":
			return nil, &sqlError{pos: r.pos, token: r.raw, msg: "Invalid unqualified reference since multiple tables are in scope"}
		case q.srcs[r.table] != nil && q.srcs[r.table].cols != nil:
			col, ok := q.srcs[r.table].cols[r.name]
			if !ok {
				return nil, &sqlError{pos: r.pos, token: r.raw, msg: "the common table expression has no column " + strconv.Quote(r.name)}
			}
			return &refNode{pos: r.pos, table: r.table, name: col, raw: r.raw}, nil
		}
		return r, nil
	})
}

// expand returns the factors `x IN (SELECT col FROM t WHERE w)` or `x IN
// cte` stands for: x = col, and w's AND-ed factors, col and w's columns
// carrying a name of their own (the subquery's table is another table
// than the synced one, even if it has the same name). ok is false for
// other factors.
func (q *qscope) expand(sc *streamCompiler, f node) ([]node, bool, *sqlError) {
	b, isBin := f.(*binaryNode)
	if !isBin || b.op != "IN" {
		return nil, false, nil
	}
	var sub *selectStmt
	switch r := b.r.(type) {
	case *subqueryNode:
		sub = r.stmt
	case *refNode:
		if r.table != "" || q.ctes[r.name] == nil {
			return nil, false, nil
		}
	default:
		return nil, false, nil
	}
	if e, ok := q.subs[b]; ok {
		return e.factors, true, e.err
	}
	e := &expansion{}
	e.factors, e.err = q.expandIn(sc, b, sub)
	q.subs[b] = e
	return e.factors, true, e.err
}

// expandIn expands b, `x IN (sub)` or (sub nil) `x IN cte`.
func (q *qscope) expandIn(sc *streamCompiler, b *binaryNode, sub *selectStmt) ([]node, *sqlError) {
	name := "\x00" + strconv.Itoa(len(q.subs))
	var src *qsource
	var factors []node
	var out string
	var err *sqlError
	if sub == nil { // x IN cte: its only column
		r := b.r.(*refNode)
		c := q.ctes.use("", r.name)
		cs, cerr := sc.checkCTE(c)
		if cerr != nil {
			return nil, cerr
		}
		if len(cs.order) != 1 {
			return nil, &sqlError{pos: r.pos, token: r.raw, msg: "Common-table expression must return a single column"}
		}
		if src, factors, err = sc.source(&fromItem{pos: r.pos, name: r.name, alias: name}, q.ctes); err != nil {
			return nil, err
		}
		out = src.cols[cs.order[0]]
	} else {
		if sub.from == nil || sub.from.call != nil || len(sub.joins) > 0 {
			return nil, &sqlError{pos: sub.pos, msg: "a stream subquery must select from one table (other forms are not supported yet)"}
		}
		if len(sub.cols) != 1 || sub.cols[0].star {
			return nil, &sqlError{pos: sub.pos, msg: "Must return a single expression column"}
		}
		inner := sub.from.name
		if sub.from.alias != "" {
			inner = sub.from.alias
		}
		if src, factors, err = sc.source(&fromItem{pos: sub.from.pos, schema: sub.from.schema, name: sub.from.name, alias: name}, q.ctes); err != nil {
			return nil, err
		}
		own := func(r *refNode) (node, *sqlError) {
			if r.schema != "" || r.table != "" && r.table != inner {
				return r, nil
			}
			col := r.name
			if src.cols != nil {
				c, ok := src.cols[r.name]
				if !ok {
					return nil, &sqlError{pos: r.pos, token: r.raw, msg: "the common table expression has no column " + strconv.Quote(r.name)}
				}
				col = c
			}
			return &refNode{pos: r.pos, table: name, name: col, raw: r.raw}, nil
		}
		c, err := mapRefs(sub.cols[0].expr, own)
		if err != nil {
			return nil, err
		}
		cr, ok := c.(*refNode)
		if !ok || cr.table != name {
			return nil, &sqlError{pos: sub.cols[0].pos, msg: "a stream subquery must select a column of its table (expressions are not supported yet)"}
		}
		out = cr.name
		if sub.where != nil {
			w, err := mapRefs(rewriteNotEqual(sub.where), own)
			if err != nil {
				return nil, err
			}
			if factors, err = andFactors(append(factors, w)); err != nil {
				return nil, err
			}
		}
	}
	q.srcs[name] = src
	eq := &binaryNode{pos: b.pos, op: "=", l: b.l, r: &refNode{pos: b.r.position(), table: name, name: out, raw: out}, start: b.start}
	return append([]node{eq}, factors...), nil
}

// andFactors splits AND-ed conditions (of a subquery or CTE): an OR there
// would make OR-ed terms of the query, not supported yet.
func andFactors(ns []node) ([]node, *sqlError) {
	var out []node
	for _, n := range ns {
		if b, ok := n.(*binaryNode); ok && b.op == "AND" {
			l, err := andFactors([]node{b.l, b.r})
			if err != nil {
				return nil, err
			}
			out = append(out, l...)
			continue
		}
		if at := findBoolOp(n); at != nil {
			return nil, &sqlError{pos: at.position(), msg: "OR (or NOT over AND) in a subquery or common table expression is not supported yet"}
		}
		out = append(out, n)
	}
	return out, nil
}

// findBoolOp finds an AND or OR in n.
func findBoolOp(n node) node {
	switch n := n.(type) {
	case *binaryNode:
		if n.op == "AND" || n.op == "OR" {
			return n
		}
		if f := findBoolOp(n.l); f != nil {
			return f
		}
		return findBoolOp(n.r)
	case *unaryNode:
		return findBoolOp(n.x)
	}
	return nil
}

// mapRefs copies n with each column reference replaced by f's result.
func mapRefs(n node, f func(*refNode) (node, *sqlError)) (node, *sqlError) {
	var err *sqlError
	var walk func(n node) node
	walk = func(n node) node {
		if err != nil {
			return n
		}
		if r, ok := n.(*refNode); ok && r.name != "*" {
			var out node
			out, err = f(r)
			return out
		}
		return mapChildren(n, walk)
	}
	out := walk(n)
	return out, err
}

// hasRefTo reports whether n reads a column of table name.
func hasRefTo(n node, name string) bool {
	found := false
	_, _ = mapRefs(n, func(r *refNode) (node, *sqlError) {
		found = found || r.schema == "" && r.table == name
		return r, nil
	})
	return found
}

// registerLookup makes (or finds, for an identical one elsewhere in the
// file) the lookup a term uses, in PowerSync's order: keys by the hash of
// their column, lookups numbered as first made.
func (sc *streamCompiler) registerLookup(lu *lookupUse) *sqlError {
	slices.SortStableFunc(lu.keys, func(a, b lookupKey) int { return int(streamHash("?", a.col)) - int(streamHash("?", b.col)) })
	keys := make([]string, len(lu.keys))
	for i, k := range lu.keys {
		if slices.Contains(keys[:i], k.col) {
			return &sqlError{pos: k.pos, msg: "a lookup column compared with two request values is not supported yet"}
		}
		keys[i] = k.col
	}
	filter, texts, err := lookupFilter(lu.src.name, lu.filters, sc.ld.rules.compat.FixedJSONExtract)
	if err != nil {
		return err
	}
	id := lu.src.table.String() + "\x00" + strings.Join(keys, ",") + "\x00" + strings.Join(lu.outs, ",") + "\x00" + strings.Join(texts, "\x01")
	lk, ok := sc.lookups[id]
	if !ok {
		// A provisional number, unique in the file: request sides compare
		// lookups by it until loadStreams numbers them in file order.
		lk = &streamLookup{index: len(sc.lookups), table: lu.src.table, keys: keys, outs: lu.outs, filter: filter}
		sc.lookups[id] = lk
	}
	lu.lk = lk
	sc.used = append(sc.used, lk)
	return nil
}

// lookupFilter compiles the conditions of a lookup on its table alone
// (nil: none) and returns their canonical texts, sorted, for its identity.
// fixedJSON is the rules' fixed_json_extract.
func lookupFilter(table string, filters []node, fixedJSON bool) (expr, []string, *sqlError) {
	if len(filters) == 0 {
		return nil, nil, nil
	}
	c := newCompiler(modeData, table)
	c.streams, c.fixedJSON = true, fixedJSON
	cl := c.compile(andOf(filters))
	if len(c.errs) > 0 {
		return nil, nil, c.errs[0]
	}
	if !cl.rowCap() {
		return nil, nil, &sqlError{pos: filters[0].position(), msg: "a condition on the joined table (or subquery) must read its columns alone"}
	}
	texts := make([]string, len(filters))
	for i, f := range filters {
		texts[i] = nodeText("", f)
	}
	slices.Sort(texts)
	return cl.e, texts, nil
}
