package syncrules

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"unicode/utf16"
)

// The WHERE of a stream query: its OR-ed variants, and each variant's
// factors — row conditions, partitions (request values, arrays, lookups)
// and request conditions — as PowerSync's sync-plan compiler derives
// them (see streams.go).

// pendings compiles one query of stream s into its resolvers (one per
// variant of its WHERE), numbered from n.
func (sc *streamCompiler) pendings(s *stream, base *queryBase, ctes cteScope, n int) ([]*pending, []*sqlError) {
	st, perr := parseStreamSelect(base.sql)
	if perr != nil {
		return nil, []*sqlError{perr}
	}
	if st.from == nil || st.from.call != nil {
		return nil, []*sqlError{{pos: st.pos, token: "SELECT", msg: "a stream query must select FROM one table"}}
	}
	if !sc.ed2 {
		// The alpha compiles != as SQL does (NULL when an operand is).
		notEqualAsNot(st)
	}
	q, err := sc.fromJoins(st, ctes)
	if err != nil {
		return nil, []*sqlError{err}
	}
	table := tableRef{schema: st.from.schema, name: st.from.name}
	if table.schema == "" {
		table.schema = sc.ld.opts.defaultSchema()
	}
	if sc.ed2 {
		return sc.pendings2(s, base, st, q, table)
	}
	if st.where, err = splitSubqueryOr(st.where, ctes); err != nil {
		return nil, []*sqlError{err}
	}
	terms, err := dnf(st.where)
	if err != nil {
		return nil, []*sqlError{err}
	}
	vs, errs := sc.variants(base.sql, terms, q, st.pos)
	if len(errs) > 0 {
		return nil, errs
	}
	var out []*pending
	for i, v := range vs {
		p, errs := sc.pending(s, base, st, table, q.outName, v, n+i)
		if len(errs) > 0 {
			return nil, errs
		}
		out = append(out, p)
	}
	return out, nil
}

// notEqualAsNot rewrites a != b as NOT (a = b) throughout a stream query,
// as PowerSync's sync-plan compiler reads it: true, not NULL, when an
// operand is NULL (NOT treats NULL as false).
func notEqualAsNot(st *selectStmt) {
	st.where = rewriteNotEqual(st.where)
	for i := range st.cols {
		if st.cols[i].expr != nil {
			st.cols[i].expr = rewriteNotEqual(st.cols[i].expr)
		}
	}
}

func rewriteNotEqual(n node) node {
	n = mapChildren(n, rewriteNotEqual)
	if b, ok := n.(*binaryNode); ok && b.op == "!=" {
		return &unaryNode{pos: b.start, op: "NOT", x: &binaryNode{pos: b.pos, op: "=", l: b.l, r: b.r, start: b.start}}
	}
	return n
}

// variant is one OR-ed way a query's WHERE holds: row conditions,
// partitions, request conditions and the lookup its partitions may come
// from, all AND-ed.
type variant struct {
	rows    []node
	parts   []partition
	filters []reqFilter
	lookups []*lookupUse // in PowerSync's order (streams_graph.go)
}

// variants classifies the factors of each DNF term and orders the
// variants as PowerSync numbers them: terms of two or more factors (a
// lookup's key conditions, and its conditions on its table, count; row
// conditions count once, request conditions once) first, in DNF order;
// then the terms of one partition, in order; then every term of request
// conditions alone, merged into one variant (OR); then every term of row
// conditions alone, merged likewise.
func (sc *streamCompiler) variants(sql string, terms [][]node, q *qscope, at int) ([]variant, []*sqlError) {
	var multi, single []variant
	var reqOnly, rowOnly []node
	var errs []*sqlError
	for _, t := range terms {
		v, reqs, err := sc.term(t, q, at)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		n := len(v.parts)
		if len(v.rows) > 0 {
			n++
		}
		if len(reqs) > 0 {
			n++
		}
		for _, lu := range v.lookups {
			n += len(lu.keys)
			if len(lu.filters) > 0 {
				n++
			}
		}
		switch {
		case n >= 2 || n == 0 || len(terms) == 1:
			if len(reqs) > 0 {
				flt, ferrs := requestFilter(sql, andOf(reqs), sc.ld.rules.compat.FixedJSONExtract)
				errs = append(errs, ferrs...)
				v.filters = []reqFilter{flt}
			}
			multi = append(multi, v)
		case len(v.parts) == 1:
			single = append(single, v)
		case len(reqs) > 0:
			reqOnly = append(reqOnly, andOf(reqs))
		default:
			rowOnly = append(rowOnly, andOf(v.rows))
		}
	}
	out := append(multi, single...)
	if len(reqOnly) > 0 {
		flt, ferrs := requestFilter(sql, orOf(reqOnly), sc.ld.rules.compat.FixedJSONExtract)
		errs = append(errs, ferrs...)
		out = append(out, variant{filters: []reqFilter{flt}})
	}
	if len(rowOnly) > 0 {
		out = append(out, variant{rows: []node{orOf(rowOnly)}})
	}
	return out, errs
}

// term classifies the factors of one DNF term, subqueries expanded into
// theirs; reqs are its conditions on request values alone. at is the
// query's position, for errors about the term as a whole.
func (sc *streamCompiler) term(t []node, q *qscope, at int) (v variant, reqs []node, err *sqlError) {
	fs, err := q.expandAll(sc, t)
	if err != nil {
		return v, nil, err
	}
	var facs []graphFactor
	for _, f := range fs {
		c, err := q.classify(f)
		switch {
		case err == errRequestOnly:
			reqs = append(reqs, f)
		case err != nil:
			return v, nil, err
		case c.kind == fRow:
			v.rows = append(v.rows, f)
		default:
			facs = append(facs, graphFactor{c: c, f: f})
		}
	}
	if v.parts, v.lookups, err = linkLookups(facs, at); err != nil {
		return v, nil, err
	}
	for _, j := range q.joins {
		if !slices.ContainsFunc(v.lookups, func(lu *lookupUse) bool { return lu.src == j }) {
			return v, nil, &sqlError{pos: at, msg: "every OR-ed term of a query with a joined table must join it (not supported yet)"}
		}
	}
	return v, reqs, nil
}

// andOf and orOf join nodes with AND and OR.
func andOf(ns []node) node { return joinNodes(ns, "AND") }
func orOf(ns []node) node  { return joinNodes(ns, "OR") }

func joinNodes(ns []node, op string) node {
	n := ns[0]
	for _, m := range ns[1:] {
		n = &binaryNode{pos: m.position(), op: op, l: n, r: m, start: n.position()}
	}
	return n
}

// pending compiles one variant of a query of stream s, its resolver
// number n; its lookup is made (or found) now, in PowerSync's order.
func (sc *streamCompiler) pending(s *stream, base *queryBase, st *selectStmt, table tableRef, outName string, v variant, n int) (*pending, []*sqlError) {
	rowFactors, parts, filters := v.rows, v.parts, v.filters
	for _, lu := range v.lookups {
		if err := sc.registerLookup(lu); err != nil {
			return nil, []*sqlError{err}
		}
	}
	parts, err := mergeSameColumn(parts)
	if err != nil {
		return nil, []*sqlError{err}
	}
	slices.SortStableFunc(parts, func(a, b partition) int { return int(a.hash) - int(b.hash) })
	// The bucket side: the row filters and `col = bucket.pN` per
	// partition, compiled as a bucket definition's data query.
	where := node(nil)
	add := func(n node) {
		if where == nil {
			where = n
			return
		}
		where = &binaryNode{pos: n.position(), op: "AND", l: where, r: n, start: where.position()}
	}
	for _, f := range rowFactors {
		add(f)
	}
	names := make([]string, len(parts))
	for i, p := range parts {
		names[i] = "p" + strconv.Itoa(i)
		add(p.rowFilter(names[i]))
	}
	stmt := *st
	stmt.where, stmt.joins = where, nil
	return &pending{name: s.name + "|" + strconv.Itoa(n), base: base, stmt: &stmt, parts: parts, filters: filters, warn: dangerous(s, parts, filters),
		inst: instantiation(parts, filters), rowID: rowIdentity(base.sql, st, table, outName, rowFactors, parts)}, nil
}

// errRequestOnly marks a WHERE factor that reads request values and no
// column: a request filter.
var errRequestOnly = &sqlError{msg: "request-only condition"}

// requestFilter compiles a factor on request values alone; fixedJSON is
// the rules' fixed_json_extract.
func requestFilter(sql string, f node, fixedJSON bool) (reqFilter, []*sqlError) {
	c := newCompiler(modeStatic, "")
	c.streams, c.fixedJSON = true, fixedJSON
	cl := c.compile(f)
	if len(c.errs) > 0 || cl.kind == ckErr {
		return reqFilter{}, c.errs
	}
	// A condition that also reads an authenticated value is not flagged
	// (PowerSync's rule), though it does not vouch for the partitions.
	return reqFilter{e: cl.e, unauth: cl.use&useUnauth != 0 && cl.use&useAuth == 0, pos: f.position(), text: nodeText(sql, f)}, nil
}

// instantiation is the request side of a query's partitions, in order,
// and its request filters.
func instantiation(parts []partition, filters []reqFilter) string {
	var b strings.Builder
	fs := make([]string, len(filters))
	for i, f := range filters {
		fs[i] = f.text
	}
	slices.Sort(fs)
	b.WriteString(strings.Join(fs, "\x01"))
	b.WriteByte(0)
	for _, p := range parts {
		fmt.Fprintf(&b, "%d:%s|", p.req.src, p.req.key)
		for _, a := range p.also {
			fmt.Fprintf(&b, "%d:%s,", a.src, a.key)
		}
		if lu := p.lookup; lu != nil {
			fmt.Fprintf(&b, "lookup %d.%d", lu.lk.index, p.out)
			for _, k := range lu.keys {
				b.WriteString(keyText(k))
			}
		}
		if p.array {
			b.WriteString("[]")
		}
		if p.inter != nil {
			b.WriteString(interText(p.inter))
		}
		b.WriteString(alsoText(p))
		b.WriteByte(0)
	}
	return b.String()
}

// mergeSameColumn makes one partition of a column compared with several
// request values, as PowerSync does: the bucket needs them all equal —
// and, with a subquery, equal to the subquery's result.
func mergeSameColumn(parts []partition) ([]partition, *sqlError) {
	var out []partition
	for _, p := range parts {
		i := slices.IndexFunc(out, func(o partition) bool { return o.col == p.col })
		if i < 0 {
			out = append(out, p)
			continue
		}
		switch {
		case (p.array || out[i].array) && p.lookup == nil && out[i].lookup == nil:
			out[i] = intersect(out[i], p)
		case (p.array || out[i].array) && (p.lookup == nil) != (out[i].lookup == nil),
			p.lookup == nil && out[i].lookup != nil && out[i].inter != nil:
			var err *sqlError
			if out[i], err = lookupInter(out[i], p); err != nil {
				return nil, err
			}
		case p.lookup != nil && out[i].lookup != nil: // neither is an array here
			var err *sqlError
			if out[i], err = mergeLookups(out[i], p); err != nil {
				return nil, err
			}
		case p.lookup != nil: // the subquery's partition, which must also equal the value
			p.also = append(p.also, out[i].req)
			p.also = append(p.also, out[i].also...)
			out[i] = p
		default:
			out[i].also = append(out[i].also, p.req)
		}
	}
	return out, nil
}

// dangerous is PowerSync's warning for a stream whose buckets depend only
// on values the client chooses: an authenticated value among a
// partition's (its request values, or its lookup's keys) silences it; a
// lookup without keys counts as neither; with none of either, the request
// filters decide. It points at the first unauthenticated value in bucket
// parameter order, which may be in a CTE.
func dangerous(s *stream, parts []partition, filters []reqFilter) *sqlError {
	if s.acceptDangerous {
		return nil
	}
	pos := -1
	for _, p := range parts {
		// Within a partition the warning points at the value written
		// first: a query's own before a CTE's (cteOffset).
		at := -1
		note := func(r streamReq, rpos int) bool {
			if !r.unauth() {
				return true
			}
			if at < 0 || rpos < at {
				at = rpos
			}
			return false
		}
		if p.lookup == nil && note(p.req, p.pos) {
			return nil
		}
		if p.lookup != nil {
			for _, k := range partKeys(p) {
				if note(k.req, k.pos) {
					return nil
				}
			}
		}
		for _, r := range p.also {
			if note(r, p.pos) {
				return nil
			}
		}
		if pos < 0 {
			pos = at
		}
	}
	for _, f := range filters {
		if f.unauth && pos < 0 {
			pos = f.pos
		}
	}
	if pos < 0 {
		return nil
	}
	return &sqlError{pos: pos, msg: "Clients can send any value for this unauthenticated parameter, so this is unsuitable for authorization. " +
		"Consider further constraining this with an authenticated parameter."}
}

// rowIdentity is what makes two resolvers' buckets the same: table,
// output name and columns, row filters (in their order: PowerSync shares
// a bucket only between the same conditions in the same order) and
// partition columns.
func rowIdentity(sql string, st *selectStmt, table tableRef, outName string, filters []node, parts []partition) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s\x00%s\x00", table, outName)
	for _, c := range st.cols {
		fmt.Fprintf(&b, "%s|%v|%s\x01", nodeText(sql, c.expr), c.star, c.alias)
	}
	for _, f := range filters {
		b.WriteString(nodeText(sql, f) + "\x01")
	}
	for _, p := range parts {
		b.WriteString("\x00" + p.col)
	}
	return b.String()
}

// nodeText is a canonical text of an expression, for identities.
func nodeText(sql string, n node) string {
	switch n := n.(type) {
	case nil:
		return ""
	case *litNode:
		return fmt.Sprintf("%d:%s", n.v.Kind(), n.v.String())
	case *refNode:
		return n.name
	case *callNode:
		args := make([]string, len(n.args))
		for i, a := range n.args {
			args[i] = nodeText(sql, a)
		}
		return n.schema + "." + n.name + "(" + strings.Join(args, ",") + ")"
	case *binaryNode:
		return "(" + nodeText(sql, n.l) + " " + n.op + " " + nodeText(sql, n.r) + ")"
	case *unaryNode:
		return n.op + " " + nodeText(sql, n.x)
	case *isNullNode:
		return fmt.Sprintf("%s IS NULL %v", nodeText(sql, n.x), n.not)
	case *castNode:
		return "CAST(" + nodeText(sql, n.x) + " AS " + n.to + ")"
	}
	return fmt.Sprintf("%T@%d", n, n.position())
}

// streamHash is the 29-bit hash PowerSync orders a bucket's partitions by
// (Jenkins' one-at-a-time, as Dart hashes): over the UTF-16 code units of
// each part — the expression's SQL with its columns as ?, then the names
// of the columns.
func streamHash(parts ...string) uint32 {
	h := uint32(614160925)
	for _, p := range parts {
		for _, v := range utf16.Encode([]rune(p)) {
			h = 0x1fffffff & (h + uint32(v))
			h = 0x1fffffff & (h + ((0x7ffff & h) << 10))
			h ^= h >> 6
		}
	}
	h = 0x1fffffff & (h + ((0x3ffffff & h) << 3))
	h ^= h >> 11
	return 0x1fffffff & (h + ((0x3fff & h) << 15))
}
