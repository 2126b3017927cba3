package syncrules

import (
	"fmt"
	"slices"
)

// Several lookups in one OR-ed term: two subqueries, a subquery in a join
// query, a subquery nested in a subquery (whose lookup is keyed by the
// outer one's outputs). PowerSync's sync-plan compiler walks the term's
// conditions from the synced table: each condition joining it to a
// lookup table resolves that table first — its keys, its filters, and the
// tables its own conditions join it to, one level deeper — and a table
// resolved at depth d is a lookup of stage d. Stages are queried deepest
// first; lookups are numbered stage by stage, in the order they were
// resolved, so for nested subqueries the innermost comes first. syncpipe
// walks the same way (lookupGraph).
//
// Not supported: a table joined both to the synced table and to another
// lookup table, or to two lookup tables (its rows would have to agree
// with both), and a lookup not joined to the synced table.

// lookupGraph is the walk over one OR-ed term's lookup conditions.
type lookupGraph struct {
	facs   []graphFactor
	uses   map[*qsource]*lookupUse
	stack  []*qsource
	stages [][]*lookupUse // by depth - 1, each in the order resolved
}

// graphFactor is a classified condition of the term, done once used.
type graphFactor struct {
	c    fclass
	f    node
	done bool
}

// linkLookups turns a term's partitions and lookup conditions (in the
// term's order) into its partitions, each lookup's keys, filters and
// outputs, and its lookups in PowerSync's order (deepest stage first).
func linkLookups(facs []graphFactor, at int) ([]partition, []*lookupUse, *sqlError) {
	g := &lookupGraph{facs: facs, uses: map[*qsource]*lookupUse{}}
	var parts []partition
	for i := range g.facs {
		gf := &g.facs[i]
		switch gf.c.kind {
		case fPart:
			gf.done = true
			parts = append(parts, gf.c.part)
		case fJoin:
			gf.done = true
			if lu := g.uses[gf.c.src]; lu != nil && !lu.root {
				return nil, nil, &sqlError{pos: gf.f.position(), msg: "a table joined both to the synced table and to another joined table (or subquery) is not supported yet"}
			}
			lu, err := g.resolve(gf.c.src, 1)
			if err != nil {
				return nil, nil, err
			}
			if slices.Contains(lu.outs, gf.c.mcol) {
				return nil, nil, &sqlError{pos: gf.f.position(), msg: "a column of the joined table equal to two columns of the synced table is not supported yet"}
			}
			lu.root = true
			p := gf.c.part
			p.lookup, p.out = lu, len(lu.outs)
			lu.outs = append(lu.outs, gf.c.mcol)
			parts = append(parts, p)
		}
	}
	for _, gf := range g.facs {
		if !gf.done {
			return nil, nil, &sqlError{pos: at, msg: "the joined table (or subquery) must be joined with `=` on a column of the synced table"}
		}
	}
	var lookups []*lookupUse
	for d := len(g.stages) - 1; d >= 0; d-- {
		lookups = append(lookups, g.stages[d]...)
	}
	return parts, lookups, nil
}

// resolve makes the lookup of src, found at depth: its keys and filters,
// and the lookups its conditions on other tables key it by, one deeper.
func (g *lookupGraph) resolve(src *qsource, depth int) (*lookupUse, *sqlError) {
	if lu := g.uses[src]; lu != nil {
		return lu, nil
	}
	lu := &lookupUse{src: src, depth: depth}
	g.stack = append(g.stack, src)
	for i := range g.facs {
		gf := &g.facs[i]
		if gf.done {
			continue
		}
		switch {
		case gf.c.kind == fKey && gf.c.src == src:
			gf.done = true
			lu.keys = append(lu.keys, gf.c.key)
		case gf.c.kind == fFilter && gf.c.src == src:
			gf.done = true
			lu.filters = append(lu.filters, gf.f)
		case gf.c.kind == fLink:
			if err := g.link(lu, gf, depth); err != nil {
				return nil, err
			}
		}
	}
	g.stack = g.stack[:len(g.stack)-1]
	g.uses[src] = lu
	for len(g.stages) < depth {
		g.stages = append(g.stages, nil)
	}
	g.stages[depth-1] = append(g.stages[depth-1], lu)
	return lu, nil
}

// link keys lu by the other table of a condition `a.x = b.y` on lu's
// table, unless that table is being resolved (it is the one lu was
// reached from, which takes the condition instead).
func (g *lookupGraph) link(lu *lookupUse, gf *graphFactor, depth int) *sqlError {
	mine, other, ocol := gf.c.mcol, gf.c.src2, gf.c.mcol2
	switch lu.src {
	case gf.c.src:
	case gf.c.src2:
		mine, other, ocol = gf.c.mcol2, gf.c.src, gf.c.mcol
	default:
		return nil
	}
	if slices.Contains(g.stack, other) {
		return nil
	}
	gf.done = true
	if g.uses[other] != nil {
		return &sqlError{pos: gf.f.position(), msg: "a table joined to two other tables (or subqueries) is not supported yet"}
	}
	in, err := g.resolve(other, depth+1)
	if err != nil {
		return err
	}
	out := slices.Index(in.outs, ocol)
	if out < 0 {
		out = len(in.outs)
		in.outs = append(in.outs, ocol)
	}
	lu.keys = append(lu.keys, lookupKey{col: mine, from: in, out: out, pos: gf.f.position()})
	return nil
}

// reqKeys are the request values a lookup is keyed by, its inner lookups'
// included, for the dangerous-query check.
func reqKeys(lu *lookupUse) []lookupKey {
	var out []lookupKey
	for _, k := range lu.keys {
		if k.from != nil {
			out = append(out, reqKeys(k.from)...)
			continue
		}
		out = append(out, k)
	}
	return out
}

// keyText is a lookup key's request side, for the resolver's identity.
func keyText(k lookupKey) string {
	if k.from == nil {
		return fmt.Sprintf(" %d:%s", k.req.src, k.req.key)
	}
	var b []byte
	for _, ik := range k.from.keys {
		b = append(b, keyText(ik)...)
	}
	return fmt.Sprintf(" <%d.%d%s>", k.from.lk.index, k.out, b)
}

// expandAll expands the subqueries (and CTE uses) of a term's factors,
// and those nested in theirs.
func (q *qscope) expandAll(sc *streamCompiler, t []node) ([]node, *sqlError) {
	var fs []node
	for _, f := range t {
		ex, ok, err := q.expand(sc, f)
		if err != nil {
			return nil, err
		}
		if !ok {
			fs = append(fs, f)
			continue
		}
		inner, err := q.expandAll(sc, ex)
		if err != nil {
			return nil, err
		}
		fs = append(fs, inner...)
	}
	return fs, nil
}

// lookupRef is a lookup output a partition's column is also compared with.
type lookupRef struct {
	lu  *lookupUse
	out int
}

// mergeLookups merges partition p into a, both of the same column and
// each from a lookup: the column's values are those both lookups give
// (PowerSync's intersection), so a bucket needs one row of each with the
// same value. Only lookups of one output are merged: PowerSync ties the
// rows of one with several outputs in a way syncpipe does not follow.
func mergeLookups(a, p partition) (partition, *sqlError) {
	if len(a.lookup.outs) > 1 || len(p.lookup.outs) > 1 {
		return a, &sqlError{pos: p.pos, msg: "a column compared with two joined tables (or subqueries), one of which gives several columns, is not supported yet"}
	}
	a.ands = append(a.ands, lookupRef{lu: p.lookup, out: p.out})
	a.also = append(a.also, p.also...)
	return a, nil
}

// partKeys are the request values the lookups of a partition are keyed by.
func partKeys(p partition) []lookupKey {
	ks := reqKeys(p.lookup)
	for _, r := range p.ands {
		ks = append(ks, reqKeys(r.lu)...)
	}
	return ks
}

// alsoText is the lookups a partition is also compared with, for the
// resolver's identity.
func alsoText(p partition) string {
	var b []byte
	for _, r := range p.ands {
		b = fmt.Appendf(b, " ∩ lookup %d.%d", r.lu.lk.index, r.out)
		for _, k := range r.lu.keys {
			b = append(b, keyText(k)...)
		}
	}
	return string(b)
}
