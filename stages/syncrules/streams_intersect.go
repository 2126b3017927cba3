package syncrules

import (
	"slices"
	"strings"

	"github.com/syncpipe/syncpipe/model"
)

// A column compared with a request array and with other request values in
// one OR-ed term (`c IN auth.parameter('a') AND c = auth.user_id()`, two
// arrays, or one array twice) is one bucket parameter whose values are the
// intersection of them all, as PowerSync's sync plan computes it: the
// values of the first of them (in the order the query names them), first
// occurrence first and each once, that every other one holds too. Values
// are equal as bucket parameters and as JSON: a boolean equals only a
// boolean (or a stored INTEGER), 1 equals 1.0, '1' does not equal 1.

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
func (st *reqState) intersection(p partition, sub map[string]model.Value) (vals []model.Value, vkeys []string, stop bool, err error) {
	lists := make([][]model.Value, len(p.inter))
	keys := make([][]string, len(p.inter))
	for i, m := range p.inter {
		v := st.streamValue(m.req, sub)
		if !m.array {
			if !v.IsNull() && v.Kind() != model.KindBlob {
				lists[i] = []model.Value{v}
				keys[i] = []string{interKey(v, st.isBool(m.req))}
			}
			continue
		}
		elems, err := jsonEachValues(v)
		if err != nil {
			return nil, nil, false, err
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
		return nil, nil, true, nil
	}
	seen := map[string]bool{}
	for j, k := range keys[0] {
		if !seen[k] && inAll(k, keys[1:]) {
			seen[k] = true
			vals, vkeys = append(vals, lists[0][j]), append(vkeys, k)
		}
	}
	return vals, vkeys, false, nil
}

// lookupInter merges a partition from a lookup and one of the same column
// compared with an array (and values): the lookup's outputs must be among
// the values they all hold, and every one of them is a member of the
// intersection (also lists them for the dangerous-query check). Only a
// lookup of one output: PowerSync does not tie the rows of one with
// several to such a value.
func lookupInter(a, p partition) (partition, *sqlError) {
	lk, other := a, p
	if p.lookup != nil {
		lk, other = p, a
	}
	if len(lk.lookup.outs) > 1 {
		return a, &sqlError{pos: p.pos, msg: "a column compared with an array and with a joined table (or subquery) that gives several columns is not supported yet"}
	}
	var ms []member
	if lk.inter == nil { // the values merged so far join the intersection
		for _, r := range lk.also {
			ms = append(ms, member{req: r})
		}
	}
	if other.inter != nil {
		ms = append(ms, other.inter...)
	} else {
		ms = append(ms, member{req: other.req, array: other.array})
		for _, r := range other.also {
			ms = append(ms, member{req: r})
		}
	}
	lk.inter = append(lk.inter, ms...)
	lk.also = append(append(lk.also, other.req), other.also...)
	return lk, nil
}

// interKey is a value's identity in an intersection, as a JavaScript
// Map tells PowerSync's values apart: a boolean is a BigInt (1n, 0n),
// every other number of a request a Number, so true equals no number.
func interKey(v model.Value, isBool bool) string {
	b, _ := appendParamValue(nil, v)
	if isBool {
		return "n" + string(b)
	}
	return "v" + string(b)
}

// storedKey is the identity of a lookup's stored output in an
// intersection: PowerSync reads a stored INTEGER as a BigInt, which
// equals a request boolean but no request number and no stored REAL,
// however equal in value.
func storedKey(v model.Value) string {
	return interKey(v, v.Kind() == model.KindInteger)
}

// reqKey is the key of request value r in an intersection; "" (equal to
// nothing) when it is NULL or a BLOB.
func (st *reqState) reqKey(r streamReq, sub map[string]model.Value) string {
	v := st.streamValue(r, sub)
	if v.IsNull() || v.Kind() == model.KindBlob {
		return ""
	}
	return interKey(v, st.isBool(r))
}

// keysEqual reports whether every key of ks is k.
func keysEqual(k string, ks []string) bool {
	for _, o := range ks {
		if o != k {
			return false
		}
	}
	return true
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
func (st *reqState) nestedJSON(r streamReq, v model.Value) string {
	var doc jval
	switch r.src {
	case srcAuthParam:
		doc, _ = parseJSON(st.rawClaims)
	case srcConnParam:
		doc = st.params
	case srcSubParam:
		doc, _ = parseJSON(st.subRaw)
	default:
		return v.Str()
	}
	if i := doc.index(r.key); i >= 0 && (doc.vals[i].k == jArr || doc.vals[i].k == jObj) {
		return string(appendJSONBig(nil, &doc.vals[i], true))
	}
	return v.Str()
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
