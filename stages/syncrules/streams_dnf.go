package syncrules

// The disjunctive normal form of a stream query's WHERE, built the way
// PowerSync's sync-plan compiler builds it. The order of the factors in a
// term matters: it is part of a variant's request side (variants with the
// same one share a bucket) and of its row side (streams with the same one
// share a bucket), so it must come out as PowerSync's does.

// maxExpansion bounds the terms one AND may expand to when it distributes
// over the ORs among its operands (PowerSync's limit).
const maxExpansion = 100

// dnfShape is what a normalized expression is: one factor, one
// conjunction, or a disjunction of conjunctions.
type dnfShape int

const (
	dnfBase dnfShape = iota
	dnfAnd
	dnfOr
)

// normal is a normalized expression: its shape and its terms (one term
// of one factor for dnfBase, one term for dnfAnd).
type normal struct {
	shape dnfShape
	terms [][]node
}

// dnf turns a WHERE into a disjunction of conjunctions, NOT pushed down
// to the leaves (De Morgan). An AND's own factors follow the factors it
// takes from the ORs among its operands: A AND (B OR C) gives [B, A] and
// [C, A]; (a OR b) AND (c OR d) gives a∧c, a∧d, b∧c, b∧d. nil gives one
// empty term.
func dnf(n node) ([][]node, *sqlError) {
	if n == nil {
		return [][]node{{}}, nil
	}
	nm, err := normalize(n)
	if err != nil {
		return nil, err
	}
	return nm.terms, nil
}

func normalize(n node) (normal, *sqlError) {
	switch n := n.(type) {
	case *binaryNode:
		if n.op != "AND" && n.op != "OR" {
			break
		}
		l, err := normalize(n.l)
		if err != nil {
			return normal{}, err
		}
		r, err := normalize(n.r)
		if err != nil {
			return normal{}, err
		}
		if n.op == "OR" {
			return disjoin(l, r), nil
		}
		return conjoin(n, l, r)
	case *unaryNode:
		if n.op == "NOT" {
			return negate(n)
		}
	}
	return normal{shape: dnfBase, terms: [][]node{{n}}}, nil
}

// negate normalizes NOT x. NOT (x IS NULL) is x IS NOT NULL (and the
// reverse), as PowerSync spells it when it compares two conditions.
func negate(n *unaryNode) (normal, *sqlError) {
	switch x := n.x.(type) {
	case *isNullNode:
		flipped := *x
		flipped.not = !x.not
		return normal{shape: dnfBase, terms: [][]node{{&flipped}}}, nil
	case *unaryNode:
		if x.op == "NOT" {
			return normalize(x.x)
		}
	case *binaryNode:
		if x.op == "AND" || x.op == "OR" {
			l, err := negate(&unaryNode{pos: n.pos, op: "NOT", x: x.l})
			if err != nil {
				return normal{}, err
			}
			r, err := negate(&unaryNode{pos: n.pos, op: "NOT", x: x.r})
			if err != nil {
				return normal{}, err
			}
			if x.op == "AND" {
				return disjoin(l, r), nil
			}
			return conjoin(n, l, r)
		}
	}
	return normal{shape: dnfBase, terms: [][]node{{n}}}, nil
}

// disjoin is l OR r: their terms, in order.
func disjoin(l, r normal) normal {
	terms := make([][]node, 0, len(l.terms)+len(r.terms))
	return normal{shape: dnfOr, terms: append(append(terms, l.terms...), r.terms...)}
}

// conjoin is l AND r: each combination of a term of every OR among them
// (the left one's varying slowest), followed by the factors of the others.
func conjoin(at node, ops ...normal) (normal, *sqlError) {
	var own []node
	var ors []normal
	expansion := 1
	for _, o := range ops {
		if o.shape == dnfOr {
			ors = append(ors, o)
			expansion *= len(o.terms)
			continue
		}
		own = append(own, o.terms[0]...)
	}
	if len(ors) == 0 {
		return normal{shape: dnfAnd, terms: [][]node{own}}, nil
	}
	if expansion > maxExpansion {
		return normal{}, &sqlError{pos: at.position(), msg: "For Sync Streams, inner OR operators need to be moved up to be top-level filters. " +
			"Applying that to this query results in too many inner nodes."}
	}
	terms := [][]node{nil}
	for _, o := range ors {
		next := make([][]node, 0, len(terms)*len(o.terms))
		for _, t := range terms {
			for _, u := range o.terms {
				next = append(next, append(append([]node(nil), t...), u...))
			}
		}
		terms = next
	}
	for i := range terms {
		terms[i] = append(terms[i], own...)
	}
	return normal{shape: dnfOr, terms: terms}, nil
}
