package syncrules

import (
	"fmt"
	"slices"
	"strconv"
)

// boundLookup is a stream lookup bound to its table.
type boundLookup struct {
	lk       *streamLookup
	keyIdx   int    // source column of the lookup key (-1: missing)
	outIdx   int    // source column of the output (-1: missing)
	keyHead  []byte // `["lookup","<n>"`
	rowsHead []byte // `[{"0":`
}

// bindStreams adds the stream buckets and lookups reading table t.
func (r *Rules) bindStreams(bt *BoundTable, t tableRef, b *binder, columns []string) {
	for _, d := range r.streamDefs {
		for _, q := range d.data {
			if q.table == t {
				bd := bindData(q, b, columns)
				bt.data = append(bt.data, bd)
				bt.maxSlots = max(bt.maxSlots, bd.nslots)
				bt.maxOut = max(bt.maxOut, len(bd.keys))
			}
		}
	}
	for _, lk := range r.lookups {
		if lk.table != t {
			continue
		}
		bl := &boundLookup{lk: lk, keyIdx: b.index(lk.keyCol), outIdx: b.index(lk.out)}
		bl.keyHead = append(appendJSONString(append([]byte(nil), '['), "lookup"), ',')
		bl.keyHead = appendJSONString(bl.keyHead, strconv.Itoa(lk.index))
		bl.rowsHead = append(appendJSONString([]byte(`[{`), "0"), ':')
		bt.lookups = append(bt.lookups, bl)
	}
}

// evalLookups appends the stream lookup entries of a row: a NULL (or
// BLOB) key or output stores nothing, as PowerSync skips such rows.
func (e *Evaluator) evalLookups(row []Value, out []LookupEntry, buf []byte) ([]LookupEntry, []byte) {
	for _, bl := range e.t.lookups {
		if bl.keyIdx < 0 || bl.outIdx < 0 {
			continue
		}
		key, val := row[bl.keyIdx], row[bl.outIdx]
		if key.IsNull() || val.IsNull() || val.kind == KindBlob {
			continue
		}
		ks := len(buf)
		buf = append(append(buf, bl.keyHead...), ',')
		var ok bool
		if buf, ok = appendLookupValue(buf, key); !ok {
			buf = buf[:ks]
			continue
		}
		buf = append(buf, ']')
		rs := len(buf)
		buf = appendDataValue(append(buf, bl.rowsHead...), val)
		buf = append(buf, '}', ']')
		out = append(out, LookupEntry{Key: buf[ks:rs:rs], Rows: buf[rs:len(buf):len(buf)]})
	}
	return out, buf
}

// streamUse is how a Lookup of a stream turns stored rows into buckets:
// the resolver's bucket, its other partition values, and which one the
// stored output fills.
type streamUse struct {
	def        *definition
	vals       []Value
	hole       int
	why        StreamReason
	priority   int
	overridden bool // priority is a subscription's override
}

// requestStreams adds the buckets and lookups of the streams the request
// subscribes to (or gets by default) to plan.
func (r *Rules) requestStreams(plan *RequestPlan, st *reqState, sr *StreamsRequest) {
	defaults := sr == nil || sr.IncludeDefaults
	var subs []StreamSubscription
	if sr != nil {
		subs = sr.Subscriptions
	}
	for _, s := range r.streams {
		def := s.auto && defaults
		if def || slices.ContainsFunc(subs, func(sub StreamSubscription) bool { return sub.Stream == s.name }) {
			plan.Streams = append(plan.Streams, StreamState{Name: s.name, Default: s.auto})
		}
		for i, sub := range subs {
			if sub.Stream != s.name {
				continue
			}
			params, raw, err := subscriptionParams(sub.Parameters)
			if err != nil {
				plan.StreamErrors = append(plan.StreamErrors, StreamError{Stream: s.name, Subscription: i, Message: err.Error()})
				continue
			}
			p := s.priority
			if sub.OverridePriority >= 0 {
				p = sub.OverridePriority
			}
			st.subRaw = raw
			s.request(plan, st, params, StreamReason{Stream: s.name, Subscription: i}, p, sub.OverridePriority >= 0)
		}
		if def {
			st.subRaw = "{}"
			s.request(plan, st, nil, StreamReason{Stream: s.name, Subscription: -1}, s.priority, false)
		}
	}
}

// filtersHold reports whether every request filter is true; one that
// fails to evaluate does not hold.
func filtersHold(fs []reqFilter, ctx *evalCtx) bool {
	for _, f := range fs {
		v, err := f.e.eval(ctx)
		if err != nil || !v.truthy() {
			return false
		}
	}
	return true
}

// subscriptionParams converts a subscription's parameters as the service
// does for subscription.parameter().
// The second result is their JSON as subscription.parameters() reads it
// (JSONBig's re-serialization, as for request.parameters()).
func subscriptionParams(raw []byte) (map[string]Value, string, error) {
	out := map[string]Value{}
	if len(raw) == 0 {
		return out, "{}", nil
	}
	doc, err := parseJSON(string(raw))
	if err != nil || doc.k != jObj {
		return nil, "", fmt.Errorf("subscription parameters must be a JSON object: %w", orSyntax(err))
	}
	fillParams(out, &doc)
	return out, string(appendJSONBig(nil, &doc, true)), nil
}

// request evaluates the stream's resolvers for one subscription (sub nil:
// the default one).
func (s *stream) request(plan *RequestPlan, st *reqState, sub map[string]Value, why StreamReason, priority int, overridden bool) {
	st.sub = sub
	defer func() { st.sub = nil }()
	ctx := &evalCtx{req: st}
	for _, rv := range s.resolvers {
		if !filtersHold(rv.filters, ctx) {
			continue
		}
		vals := make([]Value, len(rv.parts))
		hole, missing := -1, false
		for i, p := range rv.parts {
			v := st.streamValue(p.req, sub)
			if v.IsNull() || v.kind == KindBlob || !st.allEqual(v, p.also, sub) {
				missing = true // no bucket, no lookup
				break
			}
			if p.lookup != nil {
				hole = i
			}
			vals[i] = v
		}
		if missing {
			continue
		}
		if hole < 0 {
			b := append([]byte(rv.bucket.prefix), '[')
			for i, v := range vals {
				if i > 0 {
					b = append(b, ',')
				}
				b, _ = appendParamValue(b, v)
			}
			plan.Static = append(plan.Static, BucketRef{ID: string(append(b, ']')), Definition: s.name, Priority: priority,
				Reasons: []StreamReason{why}, overridden: overridden})
			continue
		}
		lk := rv.parts[hole].lookup
		key := append(appendJSONString(append([]byte(nil), '['), "lookup"), ',')
		key = append(appendJSONString(key, strconv.Itoa(lk.index)), ',')
		key, _ = appendLookupValue(key, vals[hole])
		plan.Lookups = append(plan.Lookups, Lookup{Key: append(key, ']'), Definition: s.name,
			stream: &streamUse{def: rv.bucket, vals: vals, hole: hole, why: why, priority: priority, overridden: overridden}})
	}
}

// allEqual reports whether every request value in also equals v, as a
// bucket parameter.
func (s *reqState) allEqual(v Value, also []streamReq, sub map[string]Value) bool {
	if len(also) == 0 {
		return true
	}
	want, _ := appendParamValue(nil, v)
	for _, r := range also {
		got, _ := appendParamValue(nil, s.streamValue(r, sub))
		if string(got) != string(want) {
			return false
		}
	}
	return true
}

// streamValue is a stream request value for this request and
// subscription: NULL when absent.
func (s *reqState) streamValue(r streamReq, sub map[string]Value) Value {
	var v Value
	var ok bool
	switch r.src {
	case srcAuthUserID:
		v, ok = s.claims["sub"]
	case srcAuthParam:
		v, ok = s.claims[r.key]
	case srcConnParam:
		v, ok = s.userParams[r.key]
	case srcSubParam:
		v, ok = sub[r.key]
	case srcAuthParams:
		return Text(s.rawClaims)
	case srcConnParams:
		return Text(s.rawParams)
	case srcSubParams:
		return Text(s.subRaw)
	}
	if !ok {
		return Null()
	}
	return v
}

// streamBuckets is Lookup.Buckets for a stream's lookup: each stored row
// {"0": value} fills the resolver's lookup partition.
func (l *Lookup) streamBuckets(rows []byte, dst []BucketRef) ([]BucketRef, error) {
	doc, err := parseJSON(string(rows))
	if err != nil {
		return dst, fmt.Errorf("parameter rows: %w", err)
	}
	if doc.k != jArr {
		return dst, fmt.Errorf("parameter rows: %w", errNotArray)
	}
	u := l.stream
	for i := range doc.arr {
		obj := &doc.arr[i]
		if obj.k != jObj {
			return dst, fmt.Errorf("parameter row %d is not an object", i)
		}
		j := obj.index("0")
		if j < 0 {
			continue
		}
		b := append([]byte(u.def.prefix), '[')
		ok := true
		for k, v := range u.vals {
			if k == u.hole {
				v = obj.vals[j].storedValue()
			}
			if k > 0 {
				b = append(b, ',')
			}
			if b, ok = appendParamValue(b, v); !ok || v.IsNull() {
				ok = false
				break
			}
		}
		if ok {
			dst = append(dst, BucketRef{ID: string(append(b, ']')), Definition: u.why.Stream, Priority: u.priority,
				Reasons: []StreamReason{u.why}, overridden: u.overridden})
		}
	}
	return dst, nil
}
