package syncrules

import "strconv"

// OR inside a subquery: PowerSync inlines a subquery's conditions into the
// query's before it expands the WHERE into OR-ed terms, so each OR-ed
// term of the subquery's WHERE becomes a variant of the query with a
// lookup of its own. syncpipe gets the same by splitting the subquery
// first: `x IN (SELECT c FROM t WHERE A OR B)` reads as `x IN (SELECT c
// FROM t WHERE A) OR x IN (SELECT c FROM t WHERE B)`.

// splitSubqueryOr rewrites the subqueries and CTE uses with OR in their
// WHERE (or their CTE's) among the AND-ed and OR-ed conditions of a
// query's WHERE. One under NOT is left alone and refused later
// (andFactors), as its negation is not a lookup.
func splitSubqueryOr(n node, ctes cteScope) (node, *sqlError) {
	b, ok := n.(*binaryNode)
	if !ok {
		return n, nil
	}
	switch b.op {
	case "AND", "OR":
		l, err := splitSubqueryOr(b.l, ctes)
		if err != nil {
			return nil, err
		}
		r, err := splitSubqueryOr(b.r, ctes)
		if err != nil {
			return nil, err
		}
		c := *b
		c.l, c.r = l, r
		return &c, nil
	case "IN":
		switch r := b.r.(type) {
		case *subqueryNode:
			return splitFromCTE(b, r, ctes)
		case *refNode:
			return splitCTEUse(b, r, ctes), nil
		}
	}
	return n, nil
}

// cteVariants returns the variants of the CTE a FROM item or `x IN name`
// names, registered in the query's scope under their own names; nil when
// it names none, or one without ORs.
func cteVariants(ctes cteScope, schema, name string) []*cte {
	if c := ctes[name]; schema != "" || c == nil || c.variants == nil {
		return nil
	}
	c := ctes.use(schema, name)
	for _, v := range c.variants {
		ctes[v.name] = v
	}
	return c.variants
}

// splitCTEUse splits `x IN cte` into `x IN variant` per variant of the CTE.
func splitCTEUse(b *binaryNode, r *refNode, ctes cteScope) node {
	if r.table != "" {
		return b
	}
	vs := cteVariants(ctes, r.schema, r.name)
	if vs == nil {
		return b
	}
	ins := make([]node, len(vs))
	for i, v := range vs {
		ins[i] = &binaryNode{pos: b.pos, op: "IN", l: b.l, r: &refNode{pos: r.pos, name: v.name, raw: r.raw}, start: b.start}
	}
	return orOf(ins)
}

// splitFromCTE splits `x IN (SELECT c FROM cte …)` per variant of the CTE,
// and each, or a subquery of a table, per OR-ed term of its WHERE.
func splitFromCTE(b *binaryNode, sq *subqueryNode, ctes cteScope) (node, *sqlError) {
	f := sq.stmt.from
	var vs []*cte
	if f != nil && f.call == nil {
		vs = cteVariants(ctes, f.schema, f.name)
	}
	if vs == nil {
		return splitIn(b, sq)
	}
	ins := make([]node, len(vs))
	for i, v := range vs {
		st := *sq.stmt
		g := *f
		g.name, g.alias = v.name, itemName(f)
		st.from = &g
		nsq := &subqueryNode{pos: sq.pos, stmt: &st}
		in, err := splitIn(&binaryNode{pos: b.pos, op: "IN", l: b.l, r: nsq, start: b.start}, nsq)
		if err != nil {
			return nil, err
		}
		ins[i] = in
	}
	return orOf(ins), nil
}

// splitIn splits `x IN (sub)` into one subquery per OR-ed term of sub's
// WHERE, in the order PowerSync expands them (dnf).
func splitIn(b *binaryNode, sq *subqueryNode) (node, *sqlError) {
	w := sq.stmt.where
	if w == nil {
		return b, nil
	}
	if !orShape(w) {
		return b, nil
	}
	terms, err := dnf(rewriteNotEqual(w))
	if err != nil {
		return nil, err
	}
	ins := make([]node, len(terms))
	for i, t := range terms {
		st := *sq.stmt
		st.where = andOf(t)
		ins[i] = &binaryNode{pos: b.pos, op: "IN", l: b.l, r: &subqueryNode{pos: sq.pos, stmt: &st}, start: b.start}
	}
	return orOf(ins), nil
}

// orShape reports whether n has an OR, or a NOT over an AND or OR: a
// WHERE whose expansion is not its AND-ed factors.
func orShape(n node) bool {
	switch n := n.(type) {
	case *binaryNode:
		return n.op == "OR" || n.op == "AND" && (orShape(n.l) || orShape(n.r))
	case *unaryNode:
		return n.op == "NOT" && findBoolOp(n.x) != nil
	}
	return false
}

// splitCTE splits a CTE whose WHERE has OR (or NOT over AND or OR) into
// variants, one per OR-ed term, each a CTE of its own under a name
// no query can write; a use of the CTE reads as the OR of uses of them.
func splitCTE(c *cte) *sqlError {
	if c.stmt == nil || c.stmt.where == nil {
		return nil
	}
	if !orShape(c.stmt.where) {
		return nil
	}
	terms, err := dnf(c.stmt.where)
	if err != nil {
		return err
	}
	for i, t := range terms {
		st := *c.stmt
		st.where = andOf(t)
		v := *c
		v.name, v.stmt, v.variants = "\x00"+c.name+"\x00"+strconv.Itoa(i), &st, nil
		c.variants = append(c.variants, &v)
	}
	return nil
}

// validateVariants validates each variant of a CTE split by splitCTE.
func (sc *streamCompiler) validateVariants(c *cte, err *sqlError) *sqlError {
	if err != nil {
		return err
	}
	for _, v := range c.variants {
		if err := sc.validateCTE(v); err != nil {
			return err
		}
	}
	return nil
}
