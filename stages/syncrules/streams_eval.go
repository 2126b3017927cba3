package syncrules

import (
	"errors"
	"fmt"
	"slices"
	"strconv"

	"github.com/syncpipe/syncpipe/model"
)

// boundLookup is a stream lookup bound to its table.
type boundLookup struct {
	lk      *streamLookup
	keyIdx  []int  // source columns of the key (-1: missing)
	outIdx  []int  // source columns of the outputs (-1: missing)
	filter  expr   // bound; nil for none
	keyHead []byte // `["lookup","<n>"`
}

// bindStreams adds the stream buckets and lookups reading table t.
func (r *Rules) bindStreams(bt *BoundTable, t tableRef, b *binder, columns []string) {
	for _, d := range r.streamDefs {
		for _, q := range d.data {
			if q.table == t {
				bt.addData(q, b, columns)
			}
		}
	}
	for _, lk := range r.lookups {
		if lk.table != t {
			continue
		}
		bl := &boundLookup{lk: lk}
		for _, k := range lk.keys {
			bl.keyIdx = append(bl.keyIdx, b.index(k))
		}
		for _, o := range lk.outs {
			bl.outIdx = append(bl.outIdx, b.index(o))
		}
		if lk.filter != nil {
			bl.filter = lk.filter.bind(b)
		}
		bl.keyHead = append(model.AppendJSONString(append([]byte(nil), '['), "lookup"), ',')
		bl.keyHead = model.AppendJSONString(bl.keyHead, strconv.Itoa(lk.index))
		bt.lookups = append(bt.lookups, bl)
	}
}

// evalLookups appends the stream lookup entries of a row: a row whose
// filter does not hold, or with a NULL (or BLOB) key or output, stores
// nothing, as PowerSync skips such rows.
func (e *Evaluator) evalLookups(row []model.Value, out []LookupEntry, buf []byte) ([]LookupEntry, []byte) {
	for _, bl := range e.t.lookups {
		if !bl.usable(row) {
			continue
		}
		ks := len(buf)
		buf = append(buf, bl.keyHead...)
		ok := true
		for _, i := range bl.keyIdx {
			if buf, ok = appendLookupValue(append(buf, ','), row[i]); !ok {
				break
			}
		}
		if !ok {
			buf = buf[:ks]
			continue
		}
		buf = append(buf, ']')
		rs := len(buf)
		buf = append(buf, '[', '{')
		for n, i := range bl.outIdx {
			if n > 0 {
				buf = append(buf, ',')
			}
			buf = appendDataValue(append(model.AppendJSONString(buf, strconv.Itoa(n)), ':'), row[i])
		}
		buf = append(buf, '}', ']')
		out = append(out, LookupEntry{Key: buf[ks:rs:rs], Rows: buf[rs:len(buf):len(buf)]})
	}
	return out, buf
}

// usable reports whether a row makes an entry of the lookup: its columns
// are there, keys and outputs neither NULL nor (outputs) BLOB, and its
// filter holds (an error evaluating it does not).
func (bl *boundLookup) usable(row []model.Value) bool {
	for _, i := range bl.keyIdx {
		if i < 0 || row[i].IsNull() {
			return false
		}
	}
	for _, i := range bl.outIdx {
		if i < 0 || row[i].IsNull() || row[i].Kind() == model.KindBlob {
			return false
		}
	}
	if bl.filter == nil {
		return true
	}
	v, err := bl.filter.eval(&evalCtx{row: row})
	return err == nil && truthy(v)
}

// streamUse is how a Lookup of a stream turns stored rows into buckets:
// the resolver's bucket, its other partition values, and which one the
// stored output fills.
type streamUse struct {
	def        *definition
	vals       []model.Value // nil: the lookup makes no bucket (see request)
	holes      []hole
	why        StreamReason
	priority   int
	overridden bool // priority is a subscription's override
}

// hole is a bucket parameter a stored lookup row fills.
type hole struct {
	part   int      // in the bucket's parameters
	key    string   // of the stored output: "0", "1", …
	equals []string // keys (reqKey) of the values it must equal (the column also compared with them)
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
		subscribed := slices.ContainsFunc(subs, func(sub StreamSubscription) bool { return sub.Stream == s.name })
		def := s.auto && defaults
		if def || subscribed {
			plan.Streams = append(plan.Streams, StreamState{Name: s.name, Default: s.auto})
		}
		for i, sub := range subs {
			if sub.Stream != s.name {
				continue
			}
			params, raw, bools, err := subscriptionParams(sub.Parameters)
			if err != nil {
				plan.StreamErrors = append(plan.StreamErrors, StreamError{Stream: s.name, Subscription: i, Message: err.Error()})
				continue
			}
			p := s.priority
			if sub.OverridePriority >= 0 {
				p = sub.OverridePriority
			}
			st.subRaw, st.subBools = raw, bools
			s.request(plan, st, params, StreamReason{Stream: s.name, Subscription: i}, p, sub.OverridePriority >= 0)
		}
		// The alpha (edition 2) gives an auto-subscribed stream its
		// default subscription whenever it is considered at all.
		if def || (s.ed2 && s.auto && subscribed) {
			st.subRaw, st.subBools = "{}", nil
			s.request(plan, st, nil, StreamReason{Stream: s.name, Subscription: -1}, s.priority, false)
		}
	}
}

// filtersHold reports whether every request filter is true; one that
// fails to evaluate does not hold.
func filtersHold(fs []reqFilter, ctx *evalCtx) bool {
	for _, f := range fs {
		v, err := f.e.eval(ctx)
		if err != nil || !truthy(v) {
			return false
		}
	}
	return true
}

// subscriptionParams converts a subscription's parameters as the service
// does for subscription.parameter().
// The second result is their JSON as subscription.parameters() reads it
// (JSONBig's re-serialization, as for request.parameters()), the third
// the names of its booleans (see reqState.bools).
func subscriptionParams(raw []byte) (map[string]model.Value, string, map[string]bool, error) {
	out := map[string]model.Value{}
	if len(raw) == 0 {
		return out, "{}", nil, nil
	}
	doc, err := parseJSON(string(raw))
	if err != nil || doc.k != jObj {
		return nil, "", nil, fmt.Errorf("subscription parameters must be a JSON object: %w", orSyntax(err))
	}
	fillParams(out, &doc)
	bools := map[string]bool{}
	markBools(&doc, func(k string) { bools[k] = true })
	return out, string(appendJSONBig(nil, &doc, true)), bools, nil
}

// request evaluates the stream's resolvers for one subscription (sub nil:
// the default one).
func (s *stream) request(plan *RequestPlan, st *reqState, sub map[string]model.Value, why StreamReason, priority int, overridden bool) {
	st.sub = sub
	defer func() { st.sub = nil }()
	ctx := &evalCtx{req: st}
	for _, rv := range s.resolvers {
		if !filtersHold(rv.filters, ctx) {
			continue
		}
		lists, lookup, err := st.partValues(rv.parts, sub, s.ed2)
		if err != nil {
			plan.StreamErrors = append(plan.StreamErrors, StreamError{Stream: s.name, Subscription: why.Subscription,
				Message: "Error evaluating bucket ids: " + err.Error()})
			continue
		}
		if isStaged(rv.parts) {
			if lists != nil || lookup {
				u := streamUse{def: rv.bucket, why: why, priority: priority, overridden: overridden}
				plan.Staged = append(plan.Staged, st.newStaged(rv, u, valueSets(lists), sub))
			}
			continue
		}
		lk := resolverLookup(rv.parts)
		var key []byte
		if lk != nil {
			if key = st.lookupKey(lk, sub); key == nil {
				continue
			}
			if lists == nil {
				if lookup { // queried, for no bucket (partValues)
					plan.Lookups = append(plan.Lookups, Lookup{Key: key, Definition: s.name, stream: &streamUse{def: rv.bucket, why: why}})
				}
				continue
			}
		}
		for vals := range product(lists) {
			if lk == nil {
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
			var holes []hole
			for i, p := range rv.parts {
				if p.lookup == nil {
					continue
				}
				h := hole{part: i, key: strconv.Itoa(p.out), equals: make([]string, len(p.also))}
				for j, r := range p.also {
					h.equals[j] = st.reqKey(r, sub)
				}
				holes = append(holes, h)
			}
			plan.Lookups = append(plan.Lookups, Lookup{Key: slices.Clone(key), Definition: s.name,
				stream: &streamUse{def: rv.bucket, vals: slices.Clone(vals), holes: holes, why: why, priority: priority, overridden: overridden}})
		}
	}
}

// resolverLookup is the lookup a resolver's partitions come from, if any.
func resolverLookup(parts []partition) *lookupUse {
	for _, p := range parts {
		if p.lookup != nil {
			return p.lookup
		}
	}
	return nil
}

// lookupKey is the key of a resolver's lookup for this request:
// ["lookup","<n>",<key values>…]; nil when a key value is NULL (or
// missing, or a BLOB): no lookup.
func (st *reqState) lookupKey(lu *lookupUse, sub map[string]model.Value) []byte {
	key := append(model.AppendJSONString(append([]byte(nil), '['), "lookup"), ',')
	key = model.AppendJSONString(key, strconv.Itoa(lu.lk.index))
	for _, k := range lu.keys {
		v := st.streamValue(k.req, sub)
		var ok bool
		if key, ok = appendLookupValue(append(key, ','), v); !ok || v.IsNull() {
			return nil
		}
	}
	return append(key, ']')
}

// partValues returns each partition's request values: one, or an array's
// elements, in PowerSync's order of stages. The arrays come first: a NULL
// (or missing) or empty one gives no lists and no lookup, one that is not
// an array an error. Then a NULL value, or request values that differ
// where they must be equal, give no lists (no bucket, no error) — but
// lookup: the variant's lookup is still queried, as PowerSync's lookup
// stage comes before it instantiates the bucket.
func (st *reqState) partValues(parts []partition, sub map[string]model.Value, ed2 bool) (lists [][]model.Value, lookup bool, err error) {
	if ed2 {
		return st.partValues2(parts, sub)
	}
	lists = make([][]model.Value, len(parts))
	empty := false
	none := false // an intersection without values: no bucket
	for i, p := range parts {
		if p.inter != nil {
			var stop bool
			if lists[i], _, stop, err = st.intersection(p, sub); err != nil {
				return nil, false, err
			}
			empty, none = empty || stop, none || len(lists[i]) == 0
			continue
		}
		if !p.array {
			continue
		}
		// Every array is expanded: one that is not an array is an error
		// even when another is NULL.
		elems, err := jsonEachValues(st.streamValue(p.req, sub))
		if err != nil {
			return nil, false, err
		}
		empty = empty || len(elems) == 0
		lists[i] = elems
	}
	if empty {
		return nil, false, nil
	}
	if none {
		return nil, true, nil
	}
	for i, p := range parts {
		switch {
		case p.array:
		case p.lookup != nil:
			lists[i] = []model.Value{model.Null()} // filled from the lookup's rows
		default:
			v := st.streamValue(p.req, sub)
			if v.IsNull() || v.Kind() == model.KindBlob || !st.allEqual(p.req, v, p.also, sub) {
				return nil, true, nil
			}
			lists[i] = []model.Value{v}
		}
	}
	return lists, true, nil
}

// product yields every combination of one value from each list (nothing
// when a list is nil). The slice it yields is reused.
func product(lists [][]model.Value) func(yield func([]model.Value) bool) {
	return func(yield func([]model.Value) bool) {
		if lists == nil {
			return
		}
		vals := make([]model.Value, len(lists))
		var walk func(i int) bool
		walk = func(i int) bool {
			if i == len(lists) {
				return yield(vals)
			}
			for _, v := range lists[i] {
				vals[i] = v
				if !walk(i + 1) {
					return false
				}
			}
			return true
		}
		walk(0)
	}
}

// jsonEachValues expands a request value used as an array (`column IN
// <value>`) as PowerSync's json_each does: TEXT holding JSON — an array's
// elements, an object's values, a scalar itself; JSON null elements are
// skipped, booleans are 1/0, nested arrays and objects are their JSON
// text; a number is an error, as is TEXT that is not JSON.
func jsonEachValues(v model.Value) ([]model.Value, error) {
	switch v.Kind() {
	case model.KindInteger, model.KindReal:
		//lint:ignore ST1005 PowerSync's message, word for word: clients show it, and TestReferenceStreams compares it
		return nil, fmt.Errorf("Expected json_each to be called with a string, got %s", textOf(v))
	case model.KindText:
	default:
		return nil, nil
	}
	doc, err := parseJSON(v.Str())
	if err != nil {
		//lint:ignore ST1005 PowerSync's message, word for word: clients show it, and TestReferenceStreams compares it
		return nil, errors.New("Expected JSON string")
	}
	var items []jval
	switch doc.k {
	case jNull:
		return nil, nil
	case jArr:
		items = doc.arr
	case jObj:
		items = doc.vals
	default:
		items = []jval{doc}
	}
	var out []model.Value
	for i := range items {
		el := &items[i]
		switch el.k {
		case jNull:
		case jBool:
			out = append(out, model.Bool(el.b))
		case jStr:
			out = append(out, model.Text(el.s))
		case jNum:
			out = append(out, jsNumberValue(el))
		default:
			out = append(out, model.Text(string(appendJSONBigOpt(nil, el, true, true))))
		}
	}
	return out, nil
}

// allEqual reports whether every request value in also equals v, the
// value of r, as a bucket parameter and as JSON: a boolean equals only a
// boolean.
func (s *reqState) allEqual(r streamReq, v model.Value, also []streamReq, sub map[string]model.Value) bool {
	if len(also) == 0 {
		return true
	}
	want, _ := appendParamValue(nil, v)
	for _, a := range also {
		got, _ := appendParamValue(nil, s.streamValue(a, sub))
		if string(got) != string(want) || s.isBool(a) != s.isBool(r) {
			return false
		}
	}
	return true
}

// isBool reports whether request value r is a JSON boolean.
func (s *reqState) isBool(r streamReq) bool {
	if r.src == srcSubParam {
		return s.subBools[r.key]
	}
	return s.bools[r]
}

// streamValue is a stream request value for this request and
// subscription: NULL when absent.
func (s *reqState) streamValue(r streamReq, sub map[string]model.Value) model.Value {
	var v model.Value
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
		return model.Text(s.rawClaims)
	case srcConnParams:
		return model.Text(s.rawParams)
	case srcSubParams:
		return model.Text(s.subRaw)
	}
	if !ok {
		return model.Null()
	}
	return v
}

// streamBuckets is Lookup.Buckets for a stream's lookup: each stored row
// {"0": value, …} fills the resolver's lookup partitions.
func (l *Lookup) streamBuckets(rows []byte, dst []BucketRef) ([]BucketRef, error) {
	doc, err := parseJSON(string(rows))
	if err != nil {
		return dst, fmt.Errorf("parameter rows: %w", err)
	}
	if doc.k != jArr {
		return dst, fmt.Errorf("parameter rows: %w", errNotArray)
	}
	u := l.stream
	if u.vals == nil {
		return dst, nil // a lookup queried for no bucket
	}
	vals := slices.Clone(u.vals)
	for i := range doc.arr {
		obj := &doc.arr[i]
		if obj.k != jObj {
			return dst, fmt.Errorf("parameter row %d is not an object", i)
		}
		filled := true
		for _, h := range u.holes {
			j := obj.index(h.key)
			if j < 0 {
				filled = false
				break
			}
			out := obj.vals[j].storedValue()
			if !keysEqual(storedKey(out), h.equals) {
				filled = false
				break
			}
			vals[h.part] = out
		}
		if !filled {
			continue
		}
		b := append([]byte(u.def.prefix), '[')
		ok := true
		for k, v := range vals {
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
