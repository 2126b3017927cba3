package syncrules

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf16"

	"github.com/syncpipe/syncpipe/model"
)

// Request is what a sync request contributes to parameter queries.
type Request struct {
	UserID     string // JWT sub: request.user_id(), token_parameters.user_id
	Claims     []byte // JWT payload as JSON: request.jwt(); its "parameters" object feeds token_parameters
	Parameters []byte // client parameters as JSON: request.parameters(), user_parameters
	// Streams is the request's `streams` object (Sync Streams); nil when
	// the client sent none: default streams included, no subscriptions.
	Streams *StreamsRequest
}

// StreamsRequest is what a client asks of Sync Streams: whether streams
// marked auto_subscribe apply, and its explicit subscriptions.
type StreamsRequest struct {
	IncludeDefaults bool
	Subscriptions   []StreamSubscription
}

// StreamSubscription is one explicit subscription; its index in
// StreamsRequest.Subscriptions identifies it (PowerSync's opaque id).
type StreamSubscription struct {
	Stream string
	// Parameters is the subscription's parameters as a JSON object
	// (subscription.parameter(…)); empty means {}.
	Parameters []byte
	// OverridePriority replaces the stream's priority for the buckets
	// this subscription reaches; -1 keeps it.
	OverridePriority int
}

// StreamError is a problem evaluating one subscription of a stream for a
// request: PowerSync reports it in the checkpoint's streams[].errors and
// serves the other subscriptions.
type StreamError struct {
	Stream       string
	Subscription int // index in StreamsRequest.Subscriptions; -1: the default subscription
	Message      string
}

// reqState is a request prepared for evaluation.
type reqState struct {
	userID      string
	rawClaims   string // request.jwt(): the payload as PowerSync re-serializes it
	rawParams   string // request.parameters(), likewise
	tokenParams map[string]model.Value
	userParams  map[string]model.Value
	claims      map[string]model.Value // the JWT payload's top-level values (auth.parameter)
	sub         map[string]model.Value // the stream subscription being evaluated (subscription.parameter)
	subRaw      string                 // its JSON (subscription.parameters())
	params      jval
	// bools names the claims and connection parameters that are JSON
	// booleans (subBools, the subscription's): they are 1/0 as values,
	// but PowerSync tells true from 1 when it compares two request values.
	bools    map[streamReq]bool
	subBools map[string]bool
}

// newReqState parses the claims and client parameters as the PowerSync
// service does (JSON.parse, so every number is a double) and keeps their
// JSONBig re-serialization as request.jwt() and request.parameters() see
// it: integral numbers written with ".0", integer-like keys first.
func newReqState(r Request) (*reqState, error) {
	s := &reqState{userID: r.UserID, tokenParams: map[string]model.Value{}, userParams: map[string]model.Value{}, claims: map[string]model.Value{}}
	rawClaims, rawParams := strings.TrimSpace(string(r.Claims)), strings.TrimSpace(string(r.Parameters))
	if rawClaims == "" {
		rawClaims = "{}"
	}
	if rawParams == "" {
		rawParams = "{}"
	}
	claims, err := parseJSON(rawClaims)
	if err != nil || claims.k != jObj {
		return nil, fmt.Errorf("request claims must be a JSON object: %w", orSyntax(err))
	}
	s.rawClaims = string(appendJSONBig(nil, &claims, true))
	fillParams(s.claims, &claims)
	s.bools = map[streamReq]bool{}
	markBools(&claims, func(k string) { s.bools[streamReq{src: srcAuthParam, key: k}] = true })
	if k, ok := s.bools[streamReq{src: srcAuthParam, key: "sub"}]; ok {
		s.bools[streamReq{src: srcAuthUserID}] = k
	}
	if i := claims.index("parameters"); i >= 0 && claims.vals[i].k == jObj {
		fillParams(s.tokenParams, &claims.vals[i])
	}
	s.params, err = parseJSON(rawParams)
	if err != nil || s.params.k != jObj {
		return nil, fmt.Errorf("request parameters must be a JSON object: %w", orSyntax(err))
	}
	s.rawParams = string(appendJSONBig(nil, &s.params, true))
	fillParams(s.userParams, &s.params)
	markBools(&s.params, func(k string) { s.bools[streamReq{src: srcConnParam, key: k}] = true })
	return s, nil
}

// markBools calls mark with the key of every boolean of a JSON object.
func markBools(obj *jval, mark func(key string)) {
	for i, k := range obj.keys {
		if obj.vals[i].k == jBool {
			mark(k)
		}
	}
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
func fillParams(dst map[string]model.Value, obj *jval) {
	for i, k := range obj.keys {
		v := &obj.vals[i]
		switch v.k {
		case jNull:
			dst[k] = model.Null()
		case jBool:
			dst[k] = model.Bool(v.b)
		case jStr:
			dst[k] = model.Text(v.s)
		case jNum:
			dst[k] = jsNumberValue(v)
		default:
			dst[k] = model.Text(string(appendJSONBigOpt(nil, v, true, true)))
		}
	}
}

// parameter implements request.parameter(path) as PowerSync does: a path
// starting with "$" is split on "." (the "$" part dropped), any other path
// is one key; the first component reads the client parameters as
// converted for user_parameters (nested values are JSON text), further
// components index that value as JavaScript would (a text's characters and
// length; anything else is undefined, i.e. NULL).
func (s *reqState) parameter(path string) model.Value {
	comps := []string{path}
	if strings.HasPrefix(path, "$") {
		comps = strings.Split(path, ".")[1:]
	}
	if len(comps) == 0 {
		return model.Text(string(s.appendUserParams(nil)))
	}
	v, ok := s.userParams[comps[0]]
	if !ok {
		return model.Null()
	}
	for _, c := range comps[1:] {
		if v.Kind() != model.KindText {
			return model.Null()
		}
		if c == "length" {
			v = model.Real(float64(jsStringLen(v.Str())))
			continue
		}
		i, ok := arrayIndex(c)
		u := utf16.Encode([]rune(v.Str()))
		if !ok || i >= len(u) {
			return model.Null()
		}
		v = model.Text(string(utf16.Decode(u[i : i+1])))
	}
	return v
}

// undefined reports whether r reads a token or user parameter the request
// does not have.
func (s *reqState) undefined(r *reqE) bool {
	switch r.fn {
	case reqTokenParam:
		_, ok := s.tokenParams[r.name]
		return !ok && r.name != "user_id"
	case reqUserParam:
		_, ok := s.userParams[r.name]
		return !ok
	}
	return false
}

// appendUserParams writes the converted client parameters as JSONBig
// would (request.parameter('$')).
func (s *reqState) appendUserParams(dst []byte) []byte {
	dst = append(dst, '{')
	for n, i := range jsKeyOrder(s.params.keys) {
		if n > 0 {
			dst = append(dst, ',')
		}
		k := s.params.keys[i]
		dst = model.AppendJSONString(dst, k)
		dst = append(dst, ':')
		dst = appendDataValue(dst, s.userParams[k])
	}
	return append(dst, '}')
}

// BucketRef is a bucket a request is entitled to.
type BucketRef struct {
	ID         string
	Definition string
	Priority   int
	// Reasons are the stream subscriptions that reach the bucket (nil for
	// a bucket of bucket_definitions): checkpoint lines list them.
	Reasons []StreamReason
	// overridden: Priority is a stream subscription's override_priority,
	// which PowerSync lets replace the priority of every other way the
	// bucket is reached (MergeBuckets).
	overridden bool
}

// StreamReason is a subscription a stream bucket is synced for: the
// stream's default subscription, or an explicit one.
type StreamReason struct {
	Stream       string
	Subscription int // index in StreamsRequest.Subscriptions; -1: the default subscription
}

// StreamState is a stream a request subscribes to, by default or
// explicitly, for the checkpoint's list of streams.
type StreamState struct {
	Name string
	// Default: the stream is auto_subscribe (a property of the stream,
	// whether or not this request takes defaults).
	Default bool
}

// Lookup is a parameter lookup the sync API must resolve in storage: fetch
// the parameter rows stored under Key (at the checkpoint) and pass each to
// Buckets.
type Lookup struct {
	Key        []byte
	Definition string
	q          *tableParamQuery
	req        *reqState
	stream     *streamUse // a Sync Streams lookup (streams_eval.go)
}

// RequestPlan is the evaluation of all bucket definitions for one request.
type RequestPlan struct {
	Static  []BucketRef // buckets known without storage
	Lookups []Lookup    // parameter lookups to resolve in storage
	// Staged are Sync Streams resolvers with several parameter lookups,
	// resolved in stages (ResolveStaged) after Lookups.
	Staged []*StagedLookup
	// StreamErrors are the subscriptions that could not be evaluated
	// (their buckets are missing; the request goes on).
	StreamErrors []StreamError
	// Streams are the streams the request subscribes to, in the rules'
	// order.
	Streams []StreamState
}

// Request evaluates the parameter queries for a sync request. Static
// queries (no FROM, json_each) and definitions without parameters produce
// buckets directly; table parameter queries produce lookups. The error is
// non-nil (and the plan nil) for malformed claims/parameters JSON, or when
// a query fails for this request: PowerSync then fails the whole request
// rather than serve a partial set of buckets.
func (r *Rules) Request(req Request) (*RequestPlan, error) {
	st, err := newReqState(req)
	if err != nil {
		return nil, err
	}
	plan := &RequestPlan{}
	ctx := &evalCtx{req: st}
	for _, d := range r.defs {
		// Beside edition-2 streams, bucket definitions are default
		// sources: include_defaults false drops them.
		if r.compat.Edition == 2 && req.Streams != nil && !req.Streams.IncludeDefaults {
			break
		}
		if !d.hasParams {
			plan.Static = append(plan.Static, BucketRef{ID: d.globalID, Definition: d.name, Priority: d.priority})
			continue
		}
		for _, q := range d.tables {
			if err := lookupsFor(plan, q, ctx); err != nil {
				return nil, &EvalError{Bucket: d.name, Query: q.label, Err: err}
			}
		}
		for _, q := range d.static {
			if err := evalStatic(plan, d, q, ctx); err != nil {
				return nil, &EvalError{Bucket: d.name, Query: q.label, Err: err}
			}
		}
		for _, q := range d.funcs {
			if err := evalFunc(plan, d, q, st); err != nil {
				return nil, &EvalError{Bucket: d.name, Query: q.label, Err: err}
			}
		}
	}
	r.requestStreams(plan, st, req.Streams)
	return plan, nil
}

func prio(d *definition, p int) int {
	if p >= 0 {
		return p
	}
	return d.priority
}

// errInvalidParameter: a json_each query produced a BLOB bucket parameter,
// which PowerSync rejects by failing the request.
var errInvalidParameter = errors.New("invalid bucket parameter value (blob)")

// bucketFrom builds a bucket id from named values; ok is false if a value
// is not a valid parameter (a BLOB).
func bucketFrom(d *definition, get func(name string) (model.Value, error)) (string, bool, error) {
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

// evalStatic evaluates a parameter query without FROM. Its row always
// counts, NULL values included (bucket "…[null]"); only a false WHERE or a
// BLOB value yields no bucket.
func evalStatic(plan *RequestPlan, d *definition, q *staticParamQuery, ctx *evalCtx) error {
	if q.where != nil {
		v, err := q.where.eval(ctx)
		if err != nil {
			return err
		}
		if !truthy(v) {
			return nil
		}
	}
	id, ok, err := bucketFrom(d, func(name string) (model.Value, error) { return q.cols[name].eval(ctx) })
	if ok {
		plan.Static = append(plan.Static, BucketRef{ID: id, Definition: d.name, Priority: prio(d, q.priority)})
	}
	return err
}

func evalFunc(plan *RequestPlan, d *definition, q *funcParamQuery, st *reqState) error {
	if r, ok := q.arg.(*reqE); ok && st.undefined(r) {
		// JavaScript's undefined (an absent token or user parameter) is
		// not null to json_each, which then fails the request.
		return fmt.Errorf("json_each expects JSON text, got undefined (%s is not set)", r.describe())
	}
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
			if !truthy(v) {
				continue
			}
		}
		id, ok, err := bucketFrom(d, func(name string) (model.Value, error) { return q.cols[name].eval(ctx) })
		if err != nil {
			return err
		}
		if !ok {
			return errInvalidParameter
		}
		plan.Static = append(plan.Static, BucketRef{ID: id, Definition: d.name, Priority: prio(d, q.priority)})
	}
	return nil
}

// jsonEach returns json_each rows [key, value] with edition-1 values:
// array indexes as INTEGER keys, numbers (JSON.parse) REAL, booleans 1/0,
// null, objects and arrays as JSON text.
func jsonEach(arg model.Value) ([][2]model.Value, error) {
	if arg.Kind() == model.KindNull {
		return nil, nil
	}
	if arg.Kind() != model.KindText {
		return nil, fmt.Errorf("json_each expects JSON text, got %s", arg.Kind())
	}
	doc, err := parseJSON(arg.Str())
	if err != nil {
		return nil, fmt.Errorf("json_each: %w", err)
	}
	switch doc.k {
	case jArr:
		rows := make([][2]model.Value, len(doc.arr))
		for i := range doc.arr {
			rows[i] = [2]model.Value{model.Int(int64(i)), doc.arr[i].toSQLiteLegacy(true)}
		}
		return rows, nil
	case jObj:
		rows := make([][2]model.Value, 0, len(doc.keys))
		for _, i := range jsKeyOrder(doc.keys) {
			rows = append(rows, [2]model.Value{model.Text(doc.keys[i]), doc.vals[i].toSQLiteLegacy(true)})
		}
		return rows, nil
	}
	return [][2]model.Value{{model.Null(), doc.toSQLiteLegacy(true)}}, nil
}

// lookupsFor evaluates a table parameter query's request side into lookup
// keys. NULL request values are looked up as null (PowerSync does; they
// meet only rows stored with NULL through IN); a BLOB value means no lookup.
func lookupsFor(plan *RequestPlan, q *tableParamQuery, ctx *evalCtx) error {
	params := q.filter.params
	vals := make([]model.Value, len(params))
	expand := -1
	var elems []model.Value
	for i, p := range params {
		v := model.Null()
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
			v = model.Bool(truthy(v))
		}
		vals[i] = v
	}
	emit := func() {
		key := append([]byte(nil), bpKeyHead(q)...)
		for _, v := range vals {
			var ok bool
			key = append(key, ',')
			if key, ok = appendLookupValue(key, v); !ok {
				return
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
	b := append([]byte{'['}, model.AppendJSONString(nil, q.def.name)...)
	b = append(b, ',')
	return model.AppendJSONString(b, q.queryID)
}

// expandArray parses a request-side JSON array for row IN <array> as
// PowerSync does (JSON.parse; not TEXT or not an array: no lookups): one
// lookup value per element, every element kept (null, booleans and nested
// values too, though only strings, numbers and null can meet a stored row).
func expandArray(v model.Value) []model.Value {
	if v.Kind() != model.KindText {
		return nil
	}
	doc, err := parseJSON(v.Str())
	if err != nil || doc.k != jArr {
		return nil
	}
	out := make([]model.Value, 0, len(doc.arr))
	for i := range doc.arr {
		switch el := &doc.arr[i]; el.k {
		case jNull:
			out = append(out, model.Null())
		case jStr:
			out = append(out, model.Text(el.s))
		case jNum:
			out = append(out, model.Real(el.numFloat()))
		default:
			out = append(out, model.JSON(string(appendJSONBig(nil, el, true))))
		}
	}
	return out
}

// Buckets turns one stored parameter-rows value (the JSON array kept under
// this lookup's key) into bucket ids, appended to dst. Stored values are
// used as they are (a missing or null one is null in the bucket id);
// request-side values must be valid parameters, else the row gives no
// bucket.
func (l *Lookup) Buckets(rows []byte, dst []BucketRef) ([]BucketRef, error) {
	if l.stream != nil {
		return l.streamBuckets(rows, dst)
	}
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
		id, ok, err := bucketFrom(d, func(name string) (model.Value, error) {
			if e, isReq := q.reqCols[name]; isReq {
				return e.eval(ctx)
			}
			j := obj.index(name)
			if j < 0 {
				return model.Null(), nil
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
func (v *jval) storedValue() model.Value {
	switch v.k {
	case jNull:
		return model.Null()
	case jNum:
		if v.isInt {
			if i, err := strconv.ParseInt(v.s, 10, 64); err == nil {
				return model.Int(i)
			}
		}
		return model.Real(v.numFloat())
	}
	return v.toSQLiteLegacy(false)
}

// MergeBuckets removes duplicate bucket ids (a bucket reachable through
// several parameter queries or streams), keeping the highest priority
// (lowest number) and first position — but a stream subscription's
// override_priority, where one reaches the bucket, replaces the others
// (the lowest override wins), as the PowerSync service applies overrides
// after merging.
func MergeBuckets(bs []BucketRef) []BucketRef {
	idx := make(map[string]int, len(bs))
	out := bs[:0:0]
	for _, b := range bs {
		if i, ok := idx[b.ID]; ok {
			o := &out[i]
			if len(b.Reasons) > 0 {
				o.Reasons = append(o.Reasons[:len(o.Reasons):len(o.Reasons)], b.Reasons...)
			}
			switch {
			case b.overridden && !o.overridden:
				o.Priority, o.overridden = b.Priority, true
			case b.overridden == o.overridden:
				o.Priority = min(o.Priority, b.Priority)
			}
			continue
		}
		idx[b.ID] = len(out)
		out = append(out, b)
	}
	return out
}
