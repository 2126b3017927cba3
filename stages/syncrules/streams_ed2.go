package syncrules

import (
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/syncpipe/syncpipe/model"
)

// Edition 2: PowerSync's alpha of Sync Streams. It compiles a stream with
// the older, per-stream engine, and the bytes differ from edition 3's:
//
//   - Every OR-ed variant of a stream is its own bucket,
//     "<group>#<stream>|<n>[…]", n counting the variants in plain DNF
//     order; no bucket is shared with another stream or variant.
//   - Bucket parameters are in the order the query names them, and a
//     column compared with two request values is two parameters.
//   - A stream's priority is ignored: its buckets have priority 3.
//   - At request time a NULL or missing request value is a NULL
//     parameter, not a missing bucket; an auto-subscribed stream the
//     client subscribes to explicitly keeps its default subscription even
//     when include_defaults is false.
//   - bucket_definitions may sit beside streams: they keep their ids and
//     count as default sources (include_defaults: false drops them).
//
// Not compiled (refused with an error): subqueries, joins and CTEs (the
// last also in PowerSync), and several queries per stream (`queries`).

// alphaWarning is PowerSync's warning for any edition-2 streams: section.
const alphaWarning = "This is using an alpha version of Sync Streams. We recommend upgrading `config.edition` to version 3 to support the latest features."

// autoSubParamWarning is PowerSync's edition-2 warning for an
// auto-subscribed stream reading subscription parameters, which are NULL
// in the default subscription.
const autoSubParamWarning = "Clients subscribe to this stream by default, but it uses subscription parameters. Default subscriptions use " +
	"null for all parameters, which can lead to unintentional results. Try removing the parameter or not " +
	"marking the stream as auto-subscribe."

// loadStreams2 compiles the streams: mapping of an edition-2 file; the
// bucket definitions are loaded already, and a stream may not reuse their
// names.
func (ld *loader) loadStreams2(v *yaml.Node) {
	ld.warnings = append(ld.warnings, &RuleError{File: ld.opts.File, Line: v.Line, Column: v.Column, Msg: alphaWarning, Level: LevelWarning})
	if v.Kind != yaml.MappingNode {
		ld.errAt(v, "", "", "streams", "streams must be a mapping of stream names to streams")
		return
	}
	taken := map[string]bool{}
	for _, d := range ld.rules.defs {
		taken[d.name] = true
	}
	sc := &streamCompiler{ld: ld, ed2: true, buckets: map[string]*definition{}, lookups: map[string]*streamLookup{}}
	for i := 0; i+1 < len(v.Content); i += 2 {
		k := v.Content[i]
		if taken[k.Value] {
			ld.errAt(k, k.Value, "", k.Value, "Duplicate stream or bucket definition.")
			continue
		}
		if s := sc.stream(k, v.Content[i+1], cteScope{}); s != nil {
			ld.rules.streams = append(ld.rules.streams, s)
			for _, r := range s.resolvers {
				ld.rules.streamDefs = append(ld.rules.streamDefs, r.bucket)
			}
		}
	}
}

// refuseEd2 reports the stream keys edition 2 does not compile: queries
// (PowerSync refuses several queries without its new compiler) and with,
// and a missing query, which the alpha reports at the file's start. It
// reports whether the query cannot be compiled; with: can be ignored, as
// the alpha does, going on to the query's own errors.
func (sc *streamCompiler) refuseEd2(s *stream, query, queries, with *yaml.Node) bool {
	if query == nil {
		sc.ld.errs = append(sc.ld.errs, &RuleError{File: sc.ld.opts.File, Line: 1, Column: 1, Bucket: s.name, Msg: "Must be a string."})
	} else if query.Kind != yaml.ScalarNode {
		sc.ld.errAt(query, s.name, "query", "", "Must be a string.")
	}
	if queries != nil {
		sc.ld.errAt(queries, s.name, "queries", "", "Multiple queries not supported without the `sync_config_compiler` option.")
	}
	if with != nil {
		sc.ld.errAt(with, s.name, "with", "", "Common table expressions are not supported without the `sync_config_compiler` option.")
	}
	return query == nil || query.Kind != yaml.ScalarNode || queries != nil
}

// pendings2 compiles the WHERE of an edition-2 stream query: a resolver
// per DNF term, in DNF order, its partitions in the order of the term's
// factors.
func (sc *streamCompiler) pendings2(s *stream, base *queryBase, st *selectStmt, q *qscope, table tableRef) ([]*pending, []*sqlError) {
	if len(st.joins) > 0 {
		return nil, []*sqlError{{pos: st.pos, token: "SELECT", msg: "joins in edition-2 streams are not supported: use edition 3"}}
	}
	if err := q.notOverMixed(st.where); err != nil {
		return nil, []*sqlError{err}
	}
	hidden := map[node]node{}
	terms, err := dnf(q.foldSimple(st.where, hidden))
	if err != nil {
		return nil, []*sqlError{err}
	}
	restore(terms, hidden)
	var out []*pending
	for i, t := range terms {
		v, reqs, err := sc.term(t, q, st.pos)
		if err != nil {
			return nil, []*sqlError{err}
		}
		if len(v.lookups) > 0 {
			return nil, []*sqlError{{pos: st.pos, token: "SELECT", msg: "subqueries in edition-2 streams are not supported yet: use edition 3"}}
		}
		if len(reqs) > 0 {
			flt, errs := requestFilter(base.sql, andOf(reqs), sc.ld.rules.compat.FixedJSONExtract)
			if len(errs) > 0 {
				return nil, errs
			}
			v.filters = []reqFilter{flt}
		}
		out = append(out, sc.pending2(s, base, st, v, i))
	}
	return out, nil
}

// pending2 is one edition-2 variant: its bucket side is its row
// conditions and `col = bucket.pN` per partition, in order.
func (sc *streamCompiler) pending2(s *stream, base *queryBase, st *selectStmt, v variant, n int) *pending {
	conds := append([]node(nil), v.rows...)
	for i, p := range v.parts {
		conds = append(conds, p.rowFilter("p"+strconv.Itoa(i)))
	}
	stmt := *st
	stmt.where = nil
	if len(conds) > 0 {
		stmt.where = andOf(conds)
	}
	return &pending{name: s.name + "|" + strconv.Itoa(n), base: base, stmt: &stmt, parts: v.parts, filters: v.filters}
}

// usesSubParams reports whether a query reads subscription parameters
// (for autoSubParamWarning). It looks at the text: the parser keeps no
// list of the request functions a query calls, and a string literal
// spelling the function is not worth telling apart.
func usesSubParams(sql string) bool {
	return strings.Contains(strings.ToLower(sql), "subscription.parameter")
}

// jsonEachValues2 is an edition-2 `column IN <request value>`: the
// elements of a JSON array, NULL kept and arrays and objects skipped;
// a value that is not a JSON array gives nothing.
func jsonEachValues2(v model.Value) ([]model.Value, error) {
	if v.Kind() != model.KindText {
		return nil, nil
	}
	doc, err := parseJSON(v.Str())
	if err != nil {
		return nil, err
	}
	if doc.k != jArr {
		return nil, nil
	}
	var out []model.Value
	for i := range doc.arr {
		el := &doc.arr[i]
		switch el.k {
		case jArr, jObj, jBool: // not SQLite values: the alpha drops them
		case jNull:
			out = append(out, model.Null())
		case jStr:
			out = append(out, model.Text(el.s))
		case jNum:
			out = append(out, jsNumberValue(el))
		}
	}
	return out, nil
}

// simpleKind is what an edition-2 WHERE subtree reads: the row alone, the
// request alone, or neither alone (a partition, a subquery, a mix).
type simpleKind uint8

const (
	notSimple simpleKind = iota
	rowSimple
	reqSimple
)

// kindOf classifies a subtree as the alpha does before it expands ORs:
// AND, OR and NOT of conditions of one kind are one condition of it.
func (q *qscope) kindOf(n node) simpleKind {
	switch x := n.(type) {
	case *binaryNode:
		if x.op == "AND" || x.op == "OR" {
			if l := q.kindOf(x.l); l != notSimple && l == q.kindOf(x.r) {
				return l
			}
			return notSimple
		}
	case *unaryNode:
		if x.op == "NOT" {
			return q.kindOf(x.x)
		}
	}
	c, err := q.classify(n)
	switch {
	case err == errRequestOnly:
		return reqSimple
	case err == nil && c.kind == fRow:
		return rowSimple
	}
	return notSimple
}

// foldSimple hides each largest AND/OR/NOT subtree of one kind behind a
// leaf, so that dnf keeps it one factor (the alpha never splits it into
// variants); restore puts the subtrees back.
func (q *qscope) foldSimple(n node, hidden map[node]node) node {
	switch x := n.(type) {
	case *binaryNode:
		if x.op != "AND" && x.op != "OR" {
			return n
		}
		if q.kindOf(n) != notSimple {
			return hide(n, hidden)
		}
		c := *x
		c.l, c.r = q.foldSimple(x.l, hidden), q.foldSimple(x.r, hidden)
		return &c
	case *unaryNode:
		if x.op != "NOT" {
			return n
		}
		if q.kindOf(n) != notSimple {
			return hide(n, hidden)
		}
		c := *x
		c.x = q.foldSimple(x.x, hidden)
		return &c
	}
	return n
}

// hide makes the leaf standing for n: a call no query can spell.
func hide(n node, hidden map[node]node) node {
	leaf := &callNode{pos: n.position(), name: "\x00folded", raw: "\x00folded"}
	hidden[leaf] = n
	return leaf
}

// restore replaces the leaves of foldSimple in the DNF terms.
func restore(terms [][]node, hidden map[node]node) {
	for _, t := range terms {
		for i, f := range t {
			if n, ok := hidden[f]; ok {
				t[i] = n
			} else if u, ok := f.(*unaryNode); ok && hidden[u.x] != nil {
				t[i] = &unaryNode{pos: u.pos, op: u.op, x: hidden[u.x]}
			}
		}
	}
}

// notOverMixed refuses NOT above a condition the alpha cannot negate: a
// partition, or an AND or OR with a partition or a mixed AND among its
// operands (the negated AND would be an OR below the top; a negated
// partition is no partition).
func (q *qscope) notOverMixed(n node) *sqlError {
	switch x := n.(type) {
	case *binaryNode:
		if x.op == "AND" || x.op == "OR" {
			if err := q.notOverMixed(x.l); err != nil {
				return err
			}
			return q.notOverMixed(x.r)
		}
	case *unaryNode:
		if x.op != "NOT" || q.kindOf(x.x) != notSimple {
			return nil
		}
		mixed := &sqlError{pos: x.pos, token: "NOT", msg: "Cannot use table values and parameters in the same clauses"}
		b, ok := x.x.(*binaryNode)
		if !ok || (b.op != "AND" && b.op != "OR") {
			return mixed
		}
		for _, o := range []node{b.l, b.r} {
			if q.kindOf(o) != notSimple {
				continue
			}
			if ob, ok := o.(*binaryNode); ok && ob.op == "OR" {
				continue // NOT of an OR is an AND: still one term
			}
			if ob, ok := o.(*binaryNode); ok && ob.op == "AND" {
				return &sqlError{pos: x.pos, token: "NOT", msg: "An OR operator can only appear at the highest level of the filter chain"}
			}
			return mixed
		}
	}
	return nil
}

// arrayValue2 is the request value an edition-2 `column IN <value>`
// expands. The alpha reads claims and subscription parameters as parsed,
// so booleans in their arrays stay booleans (and jsonEachValues2 drops
// them); connection parameters reach it with booleans as 1/0 already.
func (s *reqState) arrayValue2(r streamReq, sub map[string]model.Value) model.Value {
	raw := ""
	switch r.src {
	case srcAuthParam:
		raw = s.rawClaims
	case srcSubParam:
		raw = s.subRaw
	default:
		return s.streamValue(r, sub)
	}
	doc, err := parseJSON(raw)
	if err != nil || doc.k != jObj {
		return s.streamValue(r, sub)
	}
	i := doc.index(r.key)
	if i < 0 || doc.vals[i].k != jArr {
		return s.streamValue(r, sub)
	}
	return model.Text(string(appendJSONBig(nil, &doc.vals[i], true)))
}

// partValues2 is partValues for an edition-2 resolver, which has neither
// lookups nor intersections: the alpha takes the partitions in order, a
// NULL request value a NULL parameter, and stops at the first array
// without elements, before the next is read (or fails).
func (st *reqState) partValues2(parts []partition, sub map[string]model.Value) ([][]model.Value, bool, error) {
	lists := make([][]model.Value, len(parts))
	for i, p := range parts {
		if !p.array {
			lists[i] = []model.Value{st.streamValue(p.req, sub)}
			continue
		}
		elems, err := jsonEachValues2(st.arrayValue2(p.req, sub))
		if err != nil {
			return nil, false, err
		}
		if len(elems) == 0 {
			return nil, false, nil
		}
		lists[i] = elems
	}
	return lists, true, nil
}
