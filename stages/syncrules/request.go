package syncrules

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Request is what a sync request contributes to parameter queries.
type Request struct {
	UserID     string // JWT sub: request.user_id(), token_parameters.user_id
	Claims     []byte // JWT payload as JSON: request.jwt(); its "parameters" object feeds token_parameters
	Parameters []byte // client parameters as JSON: request.parameters(), user_parameters
}

// reqState is a request prepared for evaluation.
type reqState struct {
	userID      string
	rawClaims   string
	rawParams   string
	tokenParams map[string]Value
	userParams  map[string]Value
	params      jval
}

func newReqState(r Request) (*reqState, error) {
	s := &reqState{userID: r.UserID, rawClaims: strings.TrimSpace(string(r.Claims)),
		rawParams: strings.TrimSpace(string(r.Parameters)), tokenParams: map[string]Value{}, userParams: map[string]Value{}}
	if s.rawClaims == "" {
		s.rawClaims = "{}"
	}
	if s.rawParams == "" {
		s.rawParams = "{}"
	}
	claims, err := parseJSON(s.rawClaims)
	if err != nil || claims.k != jObj {
		return nil, fmt.Errorf("request claims must be a JSON object: %w", orSyntax(err))
	}
	if i := claims.index("parameters"); i >= 0 && claims.vals[i].k == jObj {
		fillParams(s.tokenParams, &claims.vals[i])
	}
	s.params, err = parseJSON(s.rawParams)
	if err != nil || s.params.k != jObj {
		return nil, fmt.Errorf("request parameters must be a JSON object: %w", orSyntax(err))
	}
	fillParams(s.userParams, &s.params)
	return s, nil
}

func orSyntax(err error) error {
	if err == nil {
		return errJSONSyntax
	}
	return err
}

// fillParams converts a JSON object the way PowerSync's
// toSyncRulesParameters does: integral numbers INTEGER, other numbers REAL,
// booleans 1/0, nested values JSON text (numbers as JavaScript doubles,
// booleans as 1/0).
func fillParams(dst map[string]Value, obj *jval) {
	for i, k := range obj.keys {
		v := &obj.vals[i]
		switch v.k {
		case jNull:
			dst[k] = Null()
		case jBool:
			dst[k] = Bool(v.b)
		case jStr:
			dst[k] = Text(v.s)
		case jNum:
			f := v.numFloat()
			if isSafeIntegral(f) {
				dst[k] = Int(int64(f))
			} else {
				dst[k] = Real(f)
			}
		default:
			dst[k] = Text(string(appendJSONBigOpt(nil, v, true, true)))
		}
	}
}

// parameter implements request.parameter(key): a "$."-path or plain key
// into the client parameters; JSON null is SQL NULL.
func (s *reqState) parameter(k string) Value {
	var comps []string
	if strings.HasPrefix(k, "$.") {
		comps = strings.Split(k[2:], ".")
	} else {
		comps = []string{k}
	}
	cur := s.params
	for _, c := range comps {
		next, ok := cur.jsMember(c)
		if !ok {
			return Null()
		}
		cur = next
	}
	if cur.k == jNull {
		return Null()
	}
	return cur.toSQLiteLegacy(false)
}

// BucketRef is a bucket a request is entitled to.
type BucketRef struct {
	ID         string
	Definition string
	Priority   int
}

// Lookup is a parameter lookup the sync API must resolve in storage: fetch
// the parameter rows stored under Key (at the checkpoint) and pass each to
// Buckets.
type Lookup struct {
	Key        []byte
	Definition string
	q          *tableParamQuery
	req        *reqState
}

// RequestPlan is the evaluation of all bucket definitions for one request.
type RequestPlan struct {
	Static  []BucketRef // buckets known without storage
	Lookups []Lookup    // parameter lookups to resolve in storage
}

// Request evaluates the parameter queries for a sync request. Static
// queries (no FROM, json_each) and definitions without parameters produce
// buckets directly; table parameter queries produce lookups. The error is
// non-nil for malformed claims/parameters JSON (then the plan is nil), or
// reports queries that failed for this request (the plan holds the rest).
func (r *Rules) Request(req Request) (*RequestPlan, error) {
	st, err := newReqState(req)
	if err != nil {
		return nil, err
	}
	plan := &RequestPlan{}
	var errs []error
	ctx := &evalCtx{req: st}
	for _, d := range r.defs {
		if !d.hasParams {
			plan.Static = append(plan.Static, BucketRef{ID: d.globalID, Definition: d.name, Priority: d.priority})
			continue
		}
		for _, q := range d.static {
			if err := evalStatic(plan, d, q, ctx); err != nil {
				errs = append(errs, &EvalError{Bucket: d.name, Query: q.label, Err: err})
			}
		}
		for _, q := range d.funcs {
			if err := evalFunc(plan, d, q, st); err != nil {
				errs = append(errs, &EvalError{Bucket: d.name, Query: q.label, Err: err})
			}
		}
		for _, q := range d.tables {
			if err := lookupsFor(plan, q, ctx); err != nil {
				errs = append(errs, &EvalError{Bucket: d.name, Query: q.label, Err: err})
			}
		}
	}
	return plan, errors.Join(errs...)
}

func prio(d *definition, p int) int {
	if p >= 0 {
		return p
	}
	return d.priority
}

// bucketFrom builds a bucket id from named values; ok is false if a value
// is NULL or not a valid parameter.
func bucketFrom(d *definition, get func(name string) (Value, error)) (string, bool, error) {
	b := append([]byte(d.prefix), '[')
	for i, name := range d.bucketParams {
		v, err := get(name)
		if err != nil {
			return "", false, err
		}
		if i > 0 {
			b = append(b, ',')
		}
		var ok bool
		if b, ok = appendParamValue(b, v); !ok {
			return "", false, nil
		}
	}
	return string(append(b, ']')), true, nil
}

func evalStatic(plan *RequestPlan, d *definition, q *staticParamQuery, ctx *evalCtx) error {
	if q.where != nil {
		v, err := q.where.eval(ctx)
		if err != nil {
			return err
		}
		if !v.truthy() {
			return nil
		}
	}
	id, ok, err := bucketFrom(d, func(name string) (Value, error) { return q.cols[name].eval(ctx) })
	if ok {
		plan.Static = append(plan.Static, BucketRef{ID: id, Definition: d.name, Priority: prio(d, q.priority)})
	}
	return err
}

func evalFunc(plan *RequestPlan, d *definition, q *funcParamQuery, st *reqState) error {
	arg, err := q.arg.eval(&evalCtx{req: st})
	if err != nil {
		return err
	}
	rows, err := jsonEach(arg)
	if err != nil {
		return err
	}
	for _, row := range rows {
		ctx := &evalCtx{row: row[:], req: st}
		if q.where != nil {
			v, err := q.where.eval(ctx)
			if err != nil {
				return err
			}
			if !v.truthy() {
				continue
			}
		}
		id, ok, err := bucketFrom(d, func(name string) (Value, error) { return q.cols[name].eval(ctx) })
		if err != nil {
			return err
		}
		if ok {
			plan.Static = append(plan.Static, BucketRef{ID: id, Definition: d.name, Priority: prio(d, q.priority)})
		}
	}
	return nil
}

// jsonEach returns json_each rows [key, value] with edition-1 values
// (JSON.parse numbers as REAL, null as the text "null").
func jsonEach(arg Value) ([][2]Value, error) {
	if arg.kind == KindNull {
		return nil, nil
	}
	if arg.kind != KindText {
		return nil, fmt.Errorf("json_each expects JSON text, got %s", arg.kind)
	}
	doc, err := parseJSON(arg.s)
	if err != nil {
		return nil, fmt.Errorf("json_each: %w", err)
	}
	switch doc.k {
	case jArr:
		rows := make([][2]Value, len(doc.arr))
		for i := range doc.arr {
			rows[i] = [2]Value{Real(float64(i)), doc.arr[i].toSQLiteLegacy(true)}
		}
		return rows, nil
	case jObj:
		rows := make([][2]Value, 0, len(doc.keys))
		for _, i := range jsKeyOrder(doc.keys) {
			rows = append(rows, [2]Value{Text(doc.keys[i]), doc.vals[i].toSQLiteLegacy(true)})
		}
		return rows, nil
	}
	return [][2]Value{{Null(), doc.toSQLiteLegacy(true)}}, nil
}

func lookupsFor(plan *RequestPlan, q *tableParamQuery, ctx *evalCtx) error {
	params := q.filter.params
	vals := make([]Value, len(params))
	expand := -1
	var elems []Value
	for i, p := range params {
		v := Null()
		if p.req != nil {
			var err error
			if v, err = p.req.eval(ctx); err != nil {
				return err
			}
		}
		switch {
		case p.expands:
			expand = i
			elems = expandArray(v)
		case p.boolean:
			v = Bool(v.truthy())
		}
		vals[i] = v
	}
	emit := func() {
		key := append([]byte(nil), bpKeyHead(q)...)
		for _, v := range vals {
			var ok bool
			key = append(key, ',')
			if key, ok = appendLookupValue(key, v); !ok {
				return // NULL never matches a stored lookup
			}
		}
		plan.Lookups = append(plan.Lookups, Lookup{Key: append(key, ']'), Definition: q.def.name, q: q, req: ctx.req})
	}
	if expand < 0 {
		emit()
		return nil
	}
	for _, el := range elems {
		vals[expand] = el
		emit()
	}
	return nil
}

func bpKeyHead(q *tableParamQuery) []byte {
	b := append([]byte{'['}, appendJSONString(nil, q.def.name)...)
	b = append(b, ',')
	return appendJSONString(b, q.queryID)
}

// expandArray parses a request-side JSON array for row IN <array>: one
// lookup value per element, numbers normalised; nulls, booleans and nested
// values can never match a stored row value and are skipped.
func expandArray(v Value) []Value {
	if v.kind != KindText {
		return nil
	}
	doc, err := parseJSON(v.s)
	if err != nil || doc.k != jArr {
		return nil
	}
	out := make([]Value, 0, len(doc.arr))
	for i := range doc.arr {
		switch el := &doc.arr[i]; el.k {
		case jStr:
			out = append(out, Text(el.s))
		case jNum:
			out = append(out, Real(el.numFloat()))
		}
	}
	return out
}

// Buckets turns one stored parameter-rows value (the JSON array kept under
// this lookup's key) into bucket ids, appended to dst.
func (l *Lookup) Buckets(rows []byte, dst []BucketRef) ([]BucketRef, error) {
	if l.q == nil {
		return dst, errors.New("lookup was not produced by Rules.Request")
	}
	doc, err := parseJSON(string(rows))
	if err != nil {
		return dst, fmt.Errorf("parameter rows: %w", err)
	}
	if doc.k != jArr {
		return dst, fmt.Errorf("parameter rows: %w", errNotArray)
	}
	q, d := l.q, l.q.def
	ctx := &evalCtx{req: l.req}
	for i := range doc.arr {
		obj := &doc.arr[i]
		if obj.k != jObj {
			return dst, fmt.Errorf("parameter row %d is not an object", i)
		}
		id, ok, err := bucketFrom(d, func(name string) (Value, error) {
			if e, isReq := q.reqCols[name]; isReq {
				return e.eval(ctx)
			}
			j := obj.index(name)
			if j < 0 {
				return Null(), nil
			}
			return obj.vals[j].storedValue(), nil
		})
		if err != nil {
			return dst, &EvalError{Bucket: d.name, Query: q.label, Err: err}
		}
		if ok {
			dst = append(dst, BucketRef{ID: id, Definition: d.name, Priority: prio(d, q.priority)})
		}
	}
	return dst, nil
}

// storedValue converts a value read back from stored parameter rows.
func (v *jval) storedValue() Value {
	switch v.k {
	case jNull:
		return Null()
	case jNum:
		if v.isInt {
			if i, err := strconv.ParseInt(v.s, 10, 64); err == nil {
				return Int(i)
			}
		}
		return Real(v.numFloat())
	}
	return v.toSQLiteLegacy(false)
}

// MergeBuckets removes duplicate bucket ids (a bucket reachable through
// several parameter queries), keeping the highest priority (lowest number)
// and first position.
func MergeBuckets(bs []BucketRef) []BucketRef {
	idx := make(map[string]int, len(bs))
	out := bs[:0:0]
	for _, b := range bs {
		if i, ok := idx[b.ID]; ok {
			out[i].Priority = min(out[i].Priority, b.Priority)
			continue
		}
		idx[b.ID] = len(out)
		out = append(out, b)
	}
	return out
}
