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
func (sc *streamCompiler) pendings(s *stream, base *queryBase, n int) ([]*pending, []*sqlError) {
	st, perr := parseStreamSelect(base.sql)
	if perr != nil {
		return nil, []*sqlError{perr}
	}
	if st.from == nil || st.from.call != nil {
		return nil, []*sqlError{{pos: st.pos, token: "SELECT", msg: "a stream query must select FROM one table"}}
	}
	table := tableRef{schema: st.from.schema, name: st.from.name}
	if table.schema == "" {
		table.schema = sc.ld.opts.defaultSchema()
	}
	outName := st.from.name
	if st.from.alias != "" {
		outName = st.from.alias
	}
	notEqualAsNot(st)
	terms, err := dnf(st.where)
	if err != nil {
		return nil, []*sqlError{err}
	}
	vs, errs := sc.variants(base.sql, terms, outName)
	if len(errs) > 0 {
		return nil, errs
	}
	var out []*pending
	for i, v := range vs {
		p, errs := sc.pending(s, base, st, table, outName, v, n+i)
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
	switch n := n.(type) {
	case *binaryNode:
		l, r := rewriteNotEqual(n.l), rewriteNotEqual(n.r)
		if n.op == "!=" {
			return &unaryNode{pos: n.start, op: "NOT", x: &binaryNode{pos: n.pos, op: "=", l: l, r: r, start: n.start}}
		}
		c := *n
		c.l, c.r = l, r
		return &c
	case *unaryNode:
		c := *n
		c.x = rewriteNotEqual(n.x)
		return &c
	case *isNullNode:
		c := *n
		c.x = rewriteNotEqual(n.x)
		return &c
	case *castNode:
		c := *n
		c.x = rewriteNotEqual(n.x)
		return &c
	case *callNode:
		c := *n
		c.args = make([]node, len(n.args))
		for i, a := range n.args {
			c.args[i] = rewriteNotEqual(a)
		}
		return &c
	}
	return n
}

// variant is one OR-ed way a query's WHERE holds: row conditions,
// partitions and request conditions, all AND-ed.
type variant struct {
	rows    []node
	parts   []partition
	filters []reqFilter
}

// variants classifies the factors of each DNF term and orders the
// variants as PowerSync numbers them: terms of two or more kinds of
// factor (or two or more partitions, or a subquery) first, in DNF order; then the terms
// of one partition, in order; then every term of request conditions
// alone, merged into one variant (OR); then every term of row conditions
// alone, merged likewise.
func (sc *streamCompiler) variants(sql string, terms [][]node, outName string) ([]variant, []*sqlError) {
	var multi, single []variant
	var reqOnly, rowOnly []node
	var errs []*sqlError
	for _, t := range terms {
		var v variant
		var reqs []node
		failed := false
		for _, f := range t {
			p, isPart, err := sc.factor(f, outName)
			switch {
			case err == errRequestOnly:
				reqs = append(reqs, f)
			case err != nil:
				errs, failed = append(errs, err), true
			case isPart:
				v.parts = append(v.parts, p)
			default:
				v.rows = append(v.rows, f)
			}
		}
		kinds := len(v.parts)
		if len(v.rows) > 0 {
			kinds++
		}
		if len(reqs) > 0 {
			kinds++
		}
		// A subquery alone is two factors to PowerSync, which adds the
		// subquery's condition to the term: it is numbered as such.
		loneLookup := kinds == 1 && len(v.parts) == 1 && v.parts[0].lookup != nil
		switch {
		case failed:
			continue
		case kinds >= 2 || kinds == 0 || len(terms) == 1 || loneLookup:
			if len(reqs) > 0 {
				flt, ferrs := requestFilter(sql, andOf(reqs))
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
		flt, ferrs := requestFilter(sql, orOf(reqOnly))
		errs = append(errs, ferrs...)
		out = append(out, variant{filters: []reqFilter{flt}})
	}
	if len(rowOnly) > 0 {
		out = append(out, variant{rows: []node{orOf(rowOnly)}})
	}
	return out, errs
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
// number n.
func (sc *streamCompiler) pending(s *stream, base *queryBase, st *selectStmt, table tableRef, outName string, v variant, n int) (*pending, []*sqlError) {
	rowFactors, parts, filters := v.rows, v.parts, v.filters
	if lookups := slices.DeleteFunc(slices.Clone(parts), func(p partition) bool { return p.lookup == nil }); len(lookups) > 1 {
		return nil, []*sqlError{{pos: lookups[1].pos, msg: "a stream query with more than one subquery is not supported yet"}}
	}
	warn := dangerous(s, parts, filters) // before merging: an authenticated value may end up in also
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
		add(&binaryNode{pos: p.pos, op: "=", start: p.pos, l: &refNode{pos: p.pos, name: p.col, raw: p.col},
			r: &refNode{pos: p.pos, table: "bucket", name: names[i], raw: "bucket." + names[i]}})
	}
	stmt := *st
	stmt.where = where
	return &pending{name: s.name + "|" + strconv.Itoa(n), base: base, stmt: &stmt, parts: parts, filters: filters, warn: warn,
		inst: instantiation(parts, filters), rowID: rowIdentity(base.sql, st, table, outName, rowFactors, parts)}, nil
}

// errRequestOnly marks a WHERE factor that reads request values and no
// column: a request filter.
var errRequestOnly = &sqlError{msg: "request-only condition"}

// requestFilter compiles a factor on request values alone.
func requestFilter(sql string, f node) (reqFilter, []*sqlError) {
	c := newCompiler(modeStatic, "")
	c.streams = true
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
		if p.lookup != nil {
			fmt.Fprintf(&b, "lookup %d", p.lookup.index)
		}
		if p.array {
			b.WriteString("[]")
		}
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
		case p.array || out[i].array || p.lookup != nil && out[i].lookup != nil:
			return nil, &sqlError{pos: p.pos, msg: "a column compared with an array, or with two subqueries, and with another value is not supported yet"}
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

// factor classifies one AND-ed factor of a stream's WHERE: a partition
// (isPart), a row-only predicate (neither), or an unsupported form (err).
func (sc *streamCompiler) factor(f node, outName string) (partition, bool, *sqlError) {
	if b, ok := f.(*binaryNode); ok {
		switch b.op {
		case "=":
			col, req, ok := colEqualsReq(b.l, b.r, outName)
			if !ok {
				col, req, ok = colEqualsReq(b.r, b.l, outName)
			}
			if ok {
				return partition{req: req, col: col, hash: streamHash("?", col), pos: b.start}, true, nil
			}
		case "IN":
			if col, ok := rowColumn(b.l, outName); ok {
				if req, ok := requestValue(b.r); ok { // column IN <request array>
					return partition{req: req, col: col, array: true, hash: streamHash("?", col), pos: b.start}, true, nil
				}
			}
			if sub, ok := b.r.(*subqueryNode); ok {
				col, ok := rowColumn(b.l, outName)
				if !ok {
					return partition{}, false, &sqlError{pos: b.l.position(), msg: "only a column of the table may be compared with a subquery (not supported yet)"}
				}
				lk, req, err := sc.lookup(sub)
				if err != nil {
					return partition{}, false, err
				}
				return partition{lookup: lk, req: req, col: col, hash: streamHash("?", col), pos: b.start}, true, nil
			}
		}
	}
	if n, what := findStreamOnly(f); n != nil {
		if _, isSub := n.(*subqueryNode); !isSub && !hasColumn(f) {
			return partition{}, false, errRequestOnly
		}
		return partition{}, false, &sqlError{pos: n.position(), msg: what + " is not supported here yet: compare a column of the table with it (column = value)"}
	}
	return partition{}, false, nil
}

// colEqualsReq matches `column = <request value>`.
func colEqualsReq(l, r node, outName string) (string, streamReq, bool) {
	col, ok := rowColumn(l, outName)
	if !ok {
		return "", streamReq{}, false
	}
	req, ok := requestValue(r)
	return col, req, ok
}

// rowColumn matches a plain column of the query's table.
func rowColumn(n node, outName string) (string, bool) {
	r, ok := n.(*refNode)
	if !ok || r.schema != "" || (r.table != "" && r.table != outName) || r.name == "*" {
		return "", false
	}
	return r.name, true
}

// requestValue matches the request values a partition can be keyed by.
func requestValue(n node) (streamReq, bool) {
	c, ok := n.(*callNode)
	if !ok {
		return streamReq{}, false
	}
	key := ""
	if len(c.args) == 1 {
		lit, ok := c.args[0].(*litNode)
		if !ok || lit.v.kind != KindText {
			return streamReq{}, false
		}
		key = lit.v.s
	}
	switch {
	case c.schema == "auth" && c.name == "user_id" && len(c.args) == 0:
		return streamReq{src: srcAuthUserID}, true
	case c.schema == "auth" && c.name == "parameter" && len(c.args) == 1:
		return streamReq{src: srcAuthParam, key: key}, true
	case c.schema == "connection" && c.name == "parameter" && len(c.args) == 1:
		return streamReq{src: srcConnParam, key: key}, true
	case c.schema == "subscription" && c.name == "parameter" && len(c.args) == 1:
		return streamReq{src: srcSubParam, key: key}, true
	case c.name == "parameters" && len(c.args) == 0:
		switch c.schema {
		case "auth":
			return streamReq{src: srcAuthParams}, true
		case "connection":
			return streamReq{src: srcConnParams}, true
		case "subscription":
			return streamReq{src: srcSubParams}, true
		}
	}
	return streamReq{}, false
}

// findStreamOnly finds a request function or subquery in n outside the
// forms streams support so far.
func findStreamOnly(n node) (node, string) {
	switch n := n.(type) {
	case *subqueryNode:
		return n, "a subquery"
	case *callNode:
		switch n.schema {
		case "auth", "connection", "subscription":
			return n, n.schema + "." + n.name + "()"
		}
		for _, a := range n.args {
			if f, w := findStreamOnly(a); f != nil {
				return f, w
			}
		}
	case *binaryNode:
		if f, w := findStreamOnly(n.l); f != nil {
			return f, w
		}
		return findStreamOnly(n.r)
	case *unaryNode:
		return findStreamOnly(n.x)
	case *isNullNode:
		return findStreamOnly(n.x)
	case *castNode:
		return findStreamOnly(n.x)
	}
	return nil, ""
}

// hasColumn reports whether n reads a column.
func hasColumn(n node) bool {
	switch n := n.(type) {
	case *refNode:
		return true
	case *callNode:
		return slices.ContainsFunc(n.args, hasColumn)
	case *binaryNode:
		return hasColumn(n.l) || hasColumn(n.r)
	case *unaryNode:
		return hasColumn(n.x)
	case *isNullNode:
		return hasColumn(n.x)
	case *castNode:
		return hasColumn(n.x)
	case *subqueryNode:
		return true
	}
	return false
}

// lookup compiles `(SELECT out FROM table WHERE key = <request value>)`.
func (sc *streamCompiler) lookup(sub *subqueryNode) (*streamLookup, streamReq, *sqlError) {
	s := sub.stmt
	if s.from == nil || s.from.call != nil || len(s.cols) != 1 || s.cols[0].star {
		return nil, streamReq{}, &sqlError{pos: s.pos, msg: "a stream subquery must select one column FROM one table (other forms are not supported yet)"}
	}
	inner := s.from.name
	if s.from.alias != "" {
		inner = s.from.alias
	}
	out, ok := rowColumn(s.cols[0].expr, inner)
	if !ok {
		return nil, streamReq{}, &sqlError{pos: s.cols[0].pos, msg: "a stream subquery must select a column (expressions are not supported yet)"}
	}
	b, ok := s.where.(*binaryNode)
	var keyCol string
	var req streamReq
	if ok && b.op == "=" {
		keyCol, req, ok = colEqualsReq(b.l, b.r, inner)
		if !ok {
			keyCol, req, ok = colEqualsReq(b.r, b.l, inner)
		}
	}
	if !ok {
		return nil, streamReq{}, &sqlError{pos: s.pos, msg: "a stream subquery must filter with one `column = <request value>` (other forms are not supported yet)"}
	}
	table := tableRef{schema: s.from.schema, name: s.from.name}
	if table.schema == "" {
		table.schema = sc.ld.opts.defaultSchema()
	}
	id := fmt.Sprintf("%s\x00%s\x00%s", table, out, keyCol)
	lk, ok := sc.lookups[id]
	if !ok {
		// A provisional number, unique in the file: request sides compare
		// lookups by it until loadStreams numbers them in file order.
		lk = &streamLookup{index: len(sc.lookups), table: table, out: out, keyCol: keyCol, id: id}
		sc.lookups[id] = lk
	}
	sc.used = append(sc.used, lk)
	return lk, req, nil
}

// dangerous is PowerSync's warning for a stream whose buckets depend only
// on values the client chooses.
func dangerous(s *stream, parts []partition, filters []reqFilter) *sqlError {
	if s.acceptDangerous {
		return nil
	}
	pos := -1
	for _, p := range parts {
		if !p.req.unauth() {
			return nil // an authenticated partition constrains the buckets
		}
		if pos < 0 {
			pos = p.pos
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
		return fmt.Sprintf("%d:%s", n.v.kind, n.v.String())
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
