package syncrules

import (
	"slices"

	"github.com/syncpipe/syncpipe/model"
)

// The factors of a stream query's WHERE: what each AND-ed condition of an
// OR-ed term is — a row condition, a partition (column = request value),
// a join of the synced table to a lookup table, a lookup key or a lookup
// filter — as PowerSync's sync-plan compiler tells them apart.

// fkind is what a WHERE factor is to its OR-ed term.
type fkind uint8

const (
	fRow    fkind = iota // a condition on the synced table alone
	fPart                // column = <request value>, column IN <request value>
	fJoin                // column = a lookup table's column
	fKey                 // a lookup table's column = <request value>
	fFilter              // a condition on a lookup table alone
	fLink                // a lookup table's column = another's (streams_graph.go)
)

// fclass is a classified factor.
type fclass struct {
	kind fkind
	part partition // fPart, fJoin
	src  *qsource  // fJoin, fKey, fFilter: the lookup table
	mcol string    // fJoin: the lookup table's column
	key  lookupKey // fKey
	// fLink: the other table and its column
	src2  *qsource
	mcol2 string
}

// classify classifies one AND-ed factor of a stream's WHERE (subqueries
// expanded); errRequestOnly marks a condition on request values alone.
func (q *qscope) classify(f node) (fclass, *sqlError) {
	if c, ok, err := q.rowExprPart(f); ok || err != nil {
		return c, err
	}
	if b, ok := f.(*binaryNode); ok {
		switch b.op {
		case "=":
			for _, lr := range [2][2]node{{b.l, b.r}, {b.r, b.l}} {
				l, r := lr[0], lr[1]
				if col, ok := rowColumn(l, q.outName); ok {
					if req, ok := requestValue(r); ok {
						return fclass{kind: fPart, part: partition{req: req, col: col, hash: streamHash("?", col), pos: b.start}}, nil
					}
					if src, mcol, ok := q.lookupColumn(r); ok {
						return fclass{kind: fJoin, src: src, mcol: mcol, part: partition{col: col, hash: streamHash("?", col), pos: b.start}}, nil
					}
				}
				if src, mcol, ok := q.lookupColumn(l); ok {
					if req, ok := requestValue(r); ok {
						return fclass{kind: fKey, src: src, key: lookupKey{col: mcol, req: req, pos: r.position()}}, nil
					}
					if src2, mcol2, ok := q.lookupColumn(r); ok && src2 != src {
						return fclass{kind: fLink, src: src, mcol: mcol, src2: src2, mcol2: mcol2}, nil
					}
				}
			}
		case "IN":
			if col, ok := rowColumn(b.l, q.outName); ok {
				if req, ok := requestValue(b.r); ok { // column IN <request array>
					return fclass{kind: fPart, part: partition{req: req, col: col, array: true, hash: streamHash("?", col), pos: b.start}}, nil
				}
			}
			if _, ok := b.r.(*subqueryNode); ok {
				return fclass{}, &sqlError{pos: b.l.position(), msg: "only a column of the table may be compared with a subquery (not supported yet)"}
			}
		}
	}
	if n := q.cteInside(f); n != nil {
		return fclass{}, &sqlError{pos: n.position(), msg: "a common table expression can be used as `column IN cte` (not under NOT or in an expression)"}
	}
	if n, what := findStreamOnly(f); n != nil {
		if _, isSub := n.(*subqueryNode); !isSub && !hasColumn(f) {
			return fclass{}, errRequestOnly
		}
		return fclass{}, &sqlError{pos: n.position(), msg: what + " is not supported here yet: compare a column of the table with it (column = value)"}
	}
	var src *qsource
	synced := false
	_, _ = mapRefs(f, func(r *refNode) (node, *sqlError) {
		if s, ok := q.srcs[r.table]; ok && r.schema == "" {
			if src != nil && src != s {
				synced = true // two lookup tables: refused below like a mix
			}
			src = s
		} else {
			synced = true
		}
		return r, nil
	})
	switch {
	case src == nil:
		return fclass{kind: fRow}, nil
	case synced:
		return fclass{}, &sqlError{pos: f.position(), msg: "a condition on two tables must compare a column of each with `=` (other forms are not supported)"}
	}
	if hasInOrSubquery(f) {
		return fclass{}, &sqlError{pos: f.position(), msg: "IN in a condition on a joined table (or subquery) is not supported yet"}
	}
	return fclass{kind: fFilter, src: src}, nil
}

// cteInside finds `x IN name` in f naming a CTE: the form a CTE may take
// only as a factor of its own (qscope.expand), never inside another.
func (q *qscope) cteInside(f node) node {
	var found node
	var walk func(n node)
	walk = func(n node) {
		switch n := n.(type) {
		case *binaryNode:
			if r, ok := n.r.(*refNode); ok && n.op == "IN" && r.table == "" && r.schema == "" && q.ctes[r.name] != nil && found == nil {
				found = r
			}
			walk(n.l)
			walk(n.r)
		case *unaryNode:
			walk(n.x)
		case *isNullNode:
			walk(n.x)
		case *castNode:
			walk(n.x)
		case *callNode:
			for _, a := range n.args {
				walk(a)
			}
		}
	}
	walk(f)
	return found
}

// lookupColumn matches a plain column of a lookup table.
func (q *qscope) lookupColumn(n node) (*qsource, string, bool) {
	r, ok := n.(*refNode)
	if !ok || r.schema != "" || r.name == "*" {
		return nil, "", false
	}
	src, ok := q.srcs[r.table]
	return src, r.name, ok
}

// hasInOrSubquery reports an IN operator or a subquery in n.
func hasInOrSubquery(n node) bool {
	switch n := n.(type) {
	case *binaryNode:
		return n.op == "IN" || hasInOrSubquery(n.l) || hasInOrSubquery(n.r)
	case *unaryNode:
		return hasInOrSubquery(n.x)
	case *subqueryNode:
		return true
	case *callNode:
		return slices.ContainsFunc(n.args, hasInOrSubquery)
	}
	return false
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
		if !ok || lit.v.Kind() != model.KindText {
			return streamReq{}, false
		}
		key = lit.v.Str()
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
