package syncrules

import (
	"fmt"
	"strconv"

	"github.com/syncpipe/syncpipe/model"
)

// StagedLookup is a stream resolver whose buckets come from several
// parameter lookups (streams_graph.go): some keyed by request values, some
// by the outputs of others, queried in stages. Its buckets are the product
// of the stored rows of the lookups that give bucket parameters, with the
// resolver's other parameter values; a lookup with no rows leaves the
// resolver without buckets, as in PowerSync. RequestPlan.ResolveStaged
// runs them.
type StagedLookup struct {
	use    streamUse // the bucket, why and priority
	parts  []partition
	equals [][]string // per partition: keys (reqKey) of the request values a lookup output must equal
	// allowed are, per partition, the values (interKey) an intersection
	// with arrays leaves its lookup outputs; nil: any.
	allowed []map[string]bool
	valsets [][]model.Value // the partition values; a lookup's to fill (none: queried for no bucket)
	lookups []stagedLU      // deepest stage first
	stages  int
}

// stagedLU is one lookup of a StagedLookup.
type stagedLU struct {
	lu    *lookupUse
	stage int
	vals  []model.Value // the request values of its keys (from keys: unused)
}

// newStaged plans the lookups of a resolver with several (or nested)
// lookups for one request; valsets are its partition values (partValues).
func (st *reqState) newStaged(rv *resolver, u streamUse, valsets [][]model.Value, sub map[string]model.Value) *StagedLookup {
	s := &StagedLookup{use: u, parts: rv.parts, valsets: valsets}
	seen := map[*lookupUse]bool{}
	var all []*lookupUse
	var walk func(lu *lookupUse)
	walk = func(lu *lookupUse) {
		if seen[lu] {
			return
		}
		seen[lu] = true
		for _, k := range lu.keys {
			if k.from != nil {
				walk(k.from)
			}
		}
		all = append(all, lu)
	}
	for _, p := range rv.parts {
		e, allowed := st.outputChecks(p, sub)
		s.equals, s.allowed = append(s.equals, e), append(s.allowed, allowed)
		if p.lookup != nil {
			walk(p.lookup)
		}
		for _, r := range p.ands {
			walk(r.lu)
		}
	}
	for _, lu := range all {
		s.stages = max(s.stages, lu.depth)
	}
	for _, lu := range all {
		l := stagedLU{lu: lu, stage: s.stages - lu.depth}
		for _, k := range lu.keys {
			v := model.Null()
			if k.from == nil {
				v = st.streamValue(k.req, sub)
			}
			l.vals = append(l.vals, v)
		}
		s.lookups = append(s.lookups, l)
	}
	return s
}

// outputChecks are what a lookup output filling partition p must match:
// the keys of the request values it must equal, or the values an
// intersection with arrays (which covers those) allows.
func (st *reqState) outputChecks(p partition, sub map[string]model.Value) (equals []string, allowed map[string]bool) {
	if p.inter == nil {
		for _, r := range p.also {
			equals = append(equals, st.reqKey(r, sub))
		}
		return equals, nil
	}
	allowed = map[string]bool{}
	_, keys, _, _ := st.intersection(p, sub) // its error is partValues'
	for _, k := range keys {
		allowed[k] = true
	}
	return nil, allowed
}

// isStaged reports whether a resolver's partitions need a StagedLookup:
// two lookups, or one keyed by another.
func isStaged(parts []partition) bool {
	var first *lookupUse
	for _, p := range parts {
		switch {
		case len(p.ands) > 0, p.lookup != nil && p.inter != nil:
			return true
		case p.lookup == nil:
		case first == nil:
			first = p.lookup
		case p.lookup != first:
			return true
		}
	}
	if first == nil {
		return false
	}
	for _, k := range first.keys {
		if k.from != nil {
			return true
		}
	}
	return false
}

// stagedRun is the state of one StagedLookup while it resolves: the
// stored rows of each of its lookups.
type stagedRun struct {
	s    *StagedLookup
	rows map[*lookupUse][]*jval
}

// ResolveStaged queries the plan's staged lookups stage by stage: query
// returns, for each key it is given, the stored row sets under it (as
// Lookup.Buckets takes them). It appends their buckets to dst; bad is a
// stored row set that is not valid (skipped), err the query's error.
func (p *RequestPlan) ResolveStaged(query func(keys [][]byte) ([][][]byte, error), dst []BucketRef) (out []BucketRef, bad, err error) {
	runs := make([]*stagedRun, len(p.Staged))
	stages := 0
	for i, s := range p.Staged {
		runs[i] = &stagedRun{s: s, rows: map[*lookupUse][]*jval{}}
		stages = max(stages, s.stages)
	}
	for stage := 0; stage < stages; stage++ {
		var keys [][]byte
		var owners []*stagedRun
		var lus []*lookupUse
		for _, r := range runs {
			for _, l := range r.s.lookups {
				if l.stage != stage {
					continue
				}
				for _, k := range r.keysOf(&l) {
					keys, owners, lus = append(keys, k), append(owners, r), append(lus, l.lu)
				}
			}
		}
		if len(keys) == 0 {
			continue
		}
		sets, err := query(keys)
		if err != nil {
			return dst, bad, err
		}
		for i, rs := range sets {
			for _, set := range rs {
				if err := owners[i].add(lus[i], set); err != nil {
					bad = err
				}
			}
		}
	}
	for _, r := range runs {
		dst = r.buckets(dst)
	}
	return dst, bad, nil
}

// keysOf is the keys a lookup is queried by: every combination of its
// key values, each once; none when a request value is NULL (or a BLOB) or
// an inner lookup gave no value.
func (r *stagedRun) keysOf(l *stagedLU) [][]byte {
	lists := make([][]model.Value, len(l.lu.keys))
	for i, k := range l.lu.keys {
		if k.from == nil {
			lists[i] = []model.Value{l.vals[i]}
			continue
		}
		for _, obj := range r.rows[k.from] {
			if j := obj.index(strconv.Itoa(k.out)); j >= 0 {
				lists[i] = append(lists[i], obj.vals[j].storedValue())
			}
		}
	}
	head := model.AppendJSONString(append(model.AppendJSONString([]byte{'['}, "lookup"), ','), strconv.Itoa(l.lu.lk.index))
	seen := map[string]bool{}
	var out [][]byte
	for vals := range product(lists) {
		key, ok := append([]byte(nil), head...), true
		for _, v := range vals {
			if key, ok = appendLookupValue(append(key, ','), v); !ok || v.IsNull() {
				ok = false
				break
			}
		}
		key = append(key, ']')
		if ok && !seen[string(key)] {
			seen[string(key)] = true
			out = append(out, key)
		}
	}
	return out
}

// add records a row set stored under a key of lookup lu.
func (r *stagedRun) add(lu *lookupUse, set []byte) error {
	doc, err := parseJSON(string(set))
	if err != nil {
		return fmt.Errorf("parameter rows: %w", err)
	}
	if doc.k != jArr {
		return fmt.Errorf("parameter rows: %w", errNotArray)
	}
	for i := range doc.arr {
		if doc.arr[i].k != jObj {
			return fmt.Errorf("parameter row %d is not an object", i)
		}
		r.rows[lu] = append(r.rows[lu], &doc.arr[i])
	}
	return nil
}

// buckets appends the run's buckets: none when a lookup has no rows, else
// for each set of partition values, each combination of one row of each
// lookup giving bucket parameters.
func (r *stagedRun) buckets(dst []BucketRef) []BucketRef {
	s := r.s
	var roots []*lookupUse
	for _, l := range s.lookups {
		if len(r.rows[l.lu]) == 0 {
			return dst
		}
		if l.lu.root {
			roots = append(roots, l.lu)
		}
	}
	cur := map[*lookupUse]*jval{} // the row of each root lookup
	for _, vs := range s.valsets {
		vals := append([]model.Value(nil), vs...)
		var walk func(i int)
		walk = func(i int) {
			if i == len(roots) {
				if s.agree(vals, cur) {
					dst = s.appendBucket(dst, vals)
				}
				return
			}
			for _, obj := range r.rows[roots[i]] {
				if s.fill(vals, roots[i], obj) {
					cur[roots[i]] = obj
					walk(i + 1)
				}
			}
		}
		walk(0)
	}
	return dst
}

// agree reports whether the rows picked of the lookups a partition is
// also compared with (partition.ands) give its value.
func (s *StagedLookup) agree(vals []model.Value, cur map[*lookupUse]*jval) bool {
	for i, p := range s.parts {
		want := storedKey(vals[i])
		for _, a := range p.ands {
			obj := cur[a.lu]
			if obj == nil {
				return false
			}
			j := obj.index(strconv.Itoa(a.out))
			if j < 0 {
				return false
			}
			if storedKey(obj.vals[j].storedValue()) != want {
				return false
			}
		}
	}
	return true
}

// fill puts a stored row of lookup lu into the partitions it gives;
// false when an output is missing or differs from a value it must equal.
func (s *StagedLookup) fill(vals []model.Value, lu *lookupUse, obj *jval) bool {
	for i, p := range s.parts {
		if p.lookup != lu {
			continue
		}
		j := obj.index(strconv.Itoa(p.out))
		if j < 0 {
			return false
		}
		v := obj.vals[j].storedValue()
		if !keysEqual(storedKey(v), s.equals[i]) || s.allowed[i] != nil && !s.allowed[i][storedKey(v)] {
			return false
		}
		vals[i] = v
	}
	return true
}

// appendBucket appends the bucket of one set of parameter values (none
// when one is NULL).
func (s *StagedLookup) appendBucket(dst []BucketRef, vals []model.Value) []BucketRef {
	u := &s.use
	b := append([]byte(u.def.prefix), '[')
	for k, v := range vals {
		if k > 0 {
			b = append(b, ',')
		}
		var ok bool
		if b, ok = appendParamValue(b, v); !ok || v.IsNull() {
			return dst
		}
	}
	return append(dst, BucketRef{ID: string(append(b, ']')), Definition: u.why.Stream, Priority: u.priority,
		Reasons: []StreamReason{u.why}, overridden: u.overridden})
}

// valueSets lists the combinations of partition values (product), each
// its own slice.
func valueSets(lists [][]model.Value) [][]model.Value {
	var out [][]model.Value
	for vals := range product(lists) {
		out = append(out, append([]model.Value(nil), vals...))
	}
	return out
}
