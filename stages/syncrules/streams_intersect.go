package syncrules

import (
	"slices"
	"strings"
)

// A column compared with a request array and with other request values in
// one OR-ed term (`c IN auth.parameter('a') AND c = auth.user_id()`, two
// arrays, or one array twice) is one bucket parameter whose values are the
// intersection of them all, as PowerSync's sync plan computes it: the
// values of the first of them (in the order the query names them), first
// occurrence first and each once, that every other one holds too. Values
// are equal as bucket parameters and as JSON: a boolean equals only a
// boolean, 1 equals 1.0, '1' does not equal 1.

// member is one of the request values of an intersection.
type member struct {
	req   streamReq
	array bool // column IN <value>: the value's JSON elements
}

// intersect merges partition p, of the same column as a, into a when
// either compares the column with an array: a's values become the
// intersection. Its other values stay listed in also, so that the
// dangerous-query check sees them.
func intersect(a, p partition) partition {
	if a.inter == nil {
		a.inter = []member{{req: a.req, array: a.array}}
		for _, r := range a.also {
			a.inter = append(a.inter, member{req: r})
		}
	}
	a.inter = append(a.inter, member{req: p.req, array: p.array})
	a.also = append(a.also, p.req)
	a.array = true // a list of values, expanded with the arrays (partValues)
	return a
}

// interText is the request side of an intersection, for the resolver's
// identity.
func interText(ms []member) string {
	var b strings.Builder
	b.WriteString(" ∩")
	for _, m := range ms {
		b.WriteString(" " + m.req.String())
		if m.array {
			b.WriteString("[]")
		}
	}
	return b.String()
}

// intersection evaluates an intersection partition for a request: its
// values, or stop when one of its arrays is NULL, missing or empty (which
// stops the whole term, as an empty table-valued stage does in
// PowerSync), or an error when one is not an array.
func (st *reqState) intersection(p partition, sub map[string]Value) (vals []Value, stop bool, err error) {
	lists := make([][]Value, len(p.inter))
	keys := make([][]string, len(p.inter))
	for i, m := range p.inter {
		v := st.streamValue(m.req, sub)
		if !m.array {
			if !v.IsNull() && v.kind != KindBlob {
				lists[i] = []Value{v}
				keys[i] = []string{interKey(v, st.isBool(m.req))}
			}
			continue
		}
		elems, err := jsonEachValues(v)
		if err != nil {
			return nil, false, err
		}
		if len(elems) == 0 {
			stop = true
			continue
		}
		bools := jsonEachBools(st.nestedJSON(m.req, v))
		lists[i], keys[i] = elems, make([]string, len(elems))
		for j, e := range elems {
			keys[i][j] = interKey(e, j < len(bools) && bools[j])
		}
	}
	if stop {
		return nil, true, nil
	}
	seen := map[string]bool{}
	for j, k := range keys[0] {
		if !seen[k] && inAll(k, keys[1:]) {
			seen[k] = true
			vals = append(vals, lists[0][j])
		}
	}
	return vals, false, nil
}

// interKey is a value's identity in an intersection.
func interKey(v Value, isBool bool) string {
	b, _ := appendParamValue(nil, v)
	if isBool {
		return "b" + string(b)
	}
	return "v" + string(b)
}

// inAll reports whether every list holds k.
func inAll(k string, lists [][]string) bool {
	for _, l := range lists {
		if !slices.Contains(l, k) {
			return false
		}
	}
	return true
}

// nestedJSON is the JSON text of request value r (v) with its booleans:
// a nested array or object of the claims, connection or subscription
// parameters is v with booleans written as 1/0 (fillParams), but
// PowerSync still tells them from numbers when it intersects.
func (st *reqState) nestedJSON(r streamReq, v Value) string {
	var doc jval
	switch r.src {
	case srcAuthParam:
		doc, _ = parseJSON(st.rawClaims)
	case srcConnParam:
		doc = st.params
	case srcSubParam:
		doc, _ = parseJSON(st.subRaw)
	default:
		return v.s
	}
	if i := doc.index(r.key); i >= 0 && (doc.vals[i].k == jArr || doc.vals[i].k == jObj) {
		return string(appendJSONBig(nil, &doc.vals[i], true))
	}
	return v.s
}

// jsonEachBools marks which of the values jsonEachValues returns for the
// JSON text s were JSON booleans (it gives them as 1 and 0).
func jsonEachBools(s string) []bool {
	doc, err := parseJSON(s)
	if err != nil {
		return nil
	}
	var items []jval
	switch doc.k {
	case jArr:
		items = doc.arr
	case jObj:
		items = doc.vals
	case jNull:
	default:
		items = []jval{doc}
	}
	var out []bool
	for i := range items {
		if items[i].k != jNull {
			out = append(out, items[i].k == jBool)
		}
	}
	return out
}
