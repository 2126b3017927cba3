package syncrules

import (
	"fmt"
	"strings"

	"github.com/syncpipe/syncpipe/model"
)

// ckind classifies a compiled clause the way PowerSync's legacy compiler
// does; the class decides where it can be evaluated.
type ckind uint8

const (
	ckErr    ckind = iota // already reported
	ckStatic              // constant (usable as row or request value)
	ckRow                 // depends on the source row only
	ckParam               // depends on request / bucket parameters only
	ckMatch               // WHERE fragment matching row values against parameters
)

type clause struct {
	kind ckind
	e    expr       // ckStatic, ckRow, ckParam (nil for bucket.x)
	key  string     // ckParam: canonical text, identifies the input parameter
	m    *matchSpec // ckMatch
	use  reqUse     // the request values it reads
}

// reqUse records which request values a clause reads, for PowerSync's
// "potentially dangerous query" warning: authenticated ones (JWT: sub,
// claims, token_parameters) and client-supplied ones (request.parameters(),
// user_parameters).
type reqUse uint8

const (
	useAuth reqUse = 1 << iota
	useUnauth
)

func (c clause) rowCap() bool   { return c.kind == ckStatic || c.kind == ckRow }
func (c clause) paramCap() bool { return c.kind == ckStatic || c.kind == ckParam }

// qmode is the kind of query being compiled.
type qmode uint8

const (
	modeData       qmode = iota // data query: row + bucket.x
	modeParamTable              // parameter query with FROM table
	modeStatic                  // parameter query without FROM
	modeTableFunc               // parameter query FROM json_each(...)
)

// colUse records a source column reference for schema checks.
type colUse struct {
	name string
	pos  int
}

// compiler turns one parsed query into evaluators, collecting every error.
type compiler struct {
	mode     qmode
	rowName  string // name (or alias) that qualifies row columns
	errs     []*sqlError
	params   map[string]*inputParam
	refs     []colUse
	whereUse reqUse // request values the WHERE clause reads
	// streams allows Sync Streams' request functions (auth.*,
	// connection.*, subscription.*).
	streams bool
	// jsonEach expands `bucket.x IN <row value>` as a stream does
	// (streams_rowexpr.go).
	jsonEach bool
	// skipNullIn drops NULL elements of `bucket.x IN <row value>`, as
	// edition-2 streams do.
	skipNullIn bool
	// fixedJSON reads JSON as fixed_json_extract does (see jsonExtract).
	fixedJSON bool
}

func newCompiler(mode qmode, rowName string) *compiler {
	return &compiler{mode: mode, rowName: rowName, params: map[string]*inputParam{}}
}

func (c *compiler) errorf(pos int, tok, format string, args ...any) clause {
	c.errs = append(c.errs, &sqlError{pos: pos, token: tok, msg: fmt.Sprintf(format, args...)})
	return clause{kind: ckErr}
}

// abortf is errorf for a problem that stops PowerSync's compiler (sqlError.abort).
func (c *compiler) abortf(pos int, tok, format string, args ...any) {
	c.errorf(pos, tok, format, args...)
	c.errs[len(c.errs)-1].abort = true
}

func (c *compiler) supportsParamExpr() bool { return c.mode != modeData }

// param returns the input parameter for key, creating it on first use.
func (c *compiler) param(key string, req expr, expands, boolean bool) *inputParam {
	if p, ok := c.params[key]; ok {
		return p
	}
	p := &inputParam{key: key, req: req, expands: expands, boolean: boolean}
	c.params[key] = p
	return p
}

// reqClause classifies a request-derived value: a parameter, except in
// json_each queries where request and row are both known at sync time.
func (c *compiler) reqClause(e expr, key string) clause {
	if c.mode == modeTableFunc {
		return clause{kind: ckRow, e: e}
	}
	return clause{kind: ckParam, e: e, key: key}
}

func (c *compiler) compile(n node) clause {
	switch n := n.(type) {
	case *litNode:
		return clause{kind: ckStatic, e: &constE{v: n.v}, key: n.v.String()}
	case *refNode:
		return c.ref(n)
	case *callNode:
		return c.call(n)
	case *unaryNode: // NOT; a sign is part of a number literal
		x := c.compile(n.x)
		return c.compose(n.pos, "NOT", "not", []clause{x}, func(a []expr) expr { return &notE{x: a[0]} })
	case *isNullNode:
		x := c.compile(n.x)
		name := "is_null"
		if n.not {
			name = "is_not_null"
		}
		return c.compose(n.pos, "IS", name, []clause{x}, func(a []expr) expr { return &isNullE{x: a[0], not: n.not} })
	case *castNode:
		x := c.compile(n.x)
		switch n.to {
		case "text", "numeric", "integer", "real", "blob":
		default:
			return c.errorf(n.toPos, n.to, "CAST to %q is not supported (use text, integer, real, numeric or blob)", n.to)
		}
		return c.compose(n.pos, "CAST", "cast_"+n.to, []clause{x}, func(a []expr) expr { return &castE{x: a[0], to: n.to} })
	case *binaryNode:
		return c.binary(n)
	}
	return c.errorf(n.position(), "", "unsupported expression")
}

func (c *compiler) ref(n *refNode) clause {
	if n.schema != "" {
		return c.errorf(n.pos, n.raw, "schema names are not supported in column references")
	}
	switch {
	case n.table == "":
		return c.rowRef(n)
	case n.table == "bucket":
		if c.mode != modeData {
			return c.errorf(n.pos, n.raw, "bucket parameters can only be used in data queries")
		}
		return clause{kind: ckParam, key: "bucket." + n.name}
	case n.table == "token_parameters" || n.table == "user_parameters":
		if c.mode == modeData {
			return c.errorf(n.pos, n.raw, "%s is not available in data queries; use bucket.<parameter>", n.table)
		}
		fn, use := reqTokenParam, useAuth
		if n.table == "user_parameters" {
			fn, use = reqUserParam, useUnauth
		}
		cl := c.reqClause(&reqE{fn: fn, name: n.name}, n.table+"."+n.name)
		cl.use = use
		return cl
	case n.table == c.rowName && c.rowName != "":
		return c.rowRef(n)
	case n.table == "request":
		return c.errorf(n.pos, n.raw, "%s is a function: write %s()", n.raw, n.raw)
	}
	return c.errorf(n.pos, n.raw, "undefined table %q in %s", n.table, n.raw)
}

func (c *compiler) rowRef(n *refNode) clause {
	switch c.mode {
	case modeStatic:
		return c.errorf(n.pos, n.raw, "unknown column %q: a parameter query without FROM can only use request values", n.name)
	case modeTableFunc:
		switch n.name {
		case "key":
			return clause{kind: ckRow, e: &colE{name: "key", idx: 0}}
		case "value":
			return clause{kind: ckRow, e: &colE{name: "value", idx: 1}}
		}
		return c.errorf(n.pos, n.raw, "json_each has no column %q (use key or value)", n.name)
	}
	c.refs = append(c.refs, colUse{name: n.name, pos: n.pos})
	return clause{kind: ckRow, e: &colE{name: n.name, idx: -1}}
}

func (c *compiler) call(n *callNode) clause {
	if n.schema == "request" {
		return c.requestCall(n)
	}
	if c.streams {
		if req, ok := requestValue(n); ok {
			use := useAuth
			if req.unauth() {
				use = useUnauth
			}
			cl := c.reqClause(&reqE{fn: reqStream, sreq: req}, req.String())
			cl.use = use
			return cl
		}
	}
	if n.schema != "" {
		return c.errorf(n.pos, n.raw, "unknown function %q", n.schema+"."+n.name)
	}
	if n.name == "json_each" {
		return c.errorf(n.pos, n.raw, "json_each is only supported as the FROM of a parameter query")
	}
	if aggregates[n.name] {
		return c.errorf(n.pos, n.raw, "aggregate function %q is not supported", n.name)
	}
	fn := builtins[n.name]
	if f := fixedJSONBuiltins[n.name]; f != nil && c.fixedJSON {
		fn = f
	}
	if fn == nil {
		return c.errorf(n.pos, n.raw, "unknown function %q", n.name)
	}
	if len(n.args) < fn.minArgs || len(n.args) > fn.maxArgs {
		return c.errorf(n.pos, n.raw, "%s() takes %s, got %d", n.name, argCount(fn.minArgs, fn.maxArgs), len(n.args))
	}
	args := make([]clause, len(n.args))
	for i, a := range n.args {
		args[i] = c.compile(a)
	}
	return c.compose(n.pos, n.raw, n.name, args, func(a []expr) expr { return &callE{fn: fn, args: a} })
}

func argCount(lo, hi int) string {
	if lo == hi {
		if lo == 1 {
			return "1 argument"
		}
		return fmt.Sprintf("%d arguments", lo)
	}
	return fmt.Sprintf("%d to %d arguments", lo, hi)
}

func (c *compiler) requestCall(n *callNode) clause {
	if c.mode == modeData {
		return c.errorf(n.pos, n.raw, "request functions are not available in data queries; use bucket.<parameter>")
	}
	want, use := 0, useAuth
	var fn reqFn
	switch n.name {
	case "user_id":
		fn = reqUserID
	case "jwt":
		fn = reqJWT
	case "parameters":
		fn, use = reqParameters, useUnauth
	case "parameter":
		fn, want, use = reqParameter, 1, useUnauth
	default:
		return c.errorf(n.pos, n.raw, "unknown function %q", "request."+n.name)
	}
	if len(n.args) != want {
		return c.errorf(n.pos, n.raw, "request.%s() takes %s", n.name, argCount(want, want))
	}
	e := &reqE{fn: fn}
	key := "request." + n.name + "()"
	var argUse reqUse
	if want == 1 {
		a := c.compile(n.args[0])
		if a.kind == ckErr {
			return a
		}
		if !a.paramCap() && !(c.mode == modeTableFunc && a.kind == ckRow) {
			return c.errorf(n.args[0].position(), "", "the argument of request.parameter() must only depend on the request")
		}
		e.arg, argUse = a.e, a.use
		key = "request.parameter(" + a.key + ")"
	}
	cl := c.reqClause(e, key)
	cl.use = use | argUse
	return cl
}

// compose builds a function or operator over compiled arguments, applying
// PowerSync's composition rules: constants fold, row values stay row
// values, request values stay request values, and mixing the two (or using
// bucket parameters in expressions) is an error.
func (c *compiler) compose(pos int, tok, name string, args []clause, build func([]expr) expr) clause {
	kind := ckStatic
	for _, a := range args {
		switch a.kind {
		case ckErr:
			return a
		case ckMatch:
			return c.errorf(pos, tok, "parameter match clauses cannot be used inside %s", tok)
		case ckParam:
			if !c.supportsParamExpr() {
				return c.errorf(pos, tok, "cannot use bucket parameters in expressions (only in = and IN comparisons with row values)")
			}
			if kind == ckRow {
				return c.errorf(pos, tok, "cannot use table values and request parameters in the same expression")
			}
			kind = ckParam
		case ckRow:
			if kind == ckParam {
				return c.errorf(pos, tok, "cannot use table values and request parameters in the same expression")
			}
			kind = ckRow
		}
	}
	exprs := make([]expr, len(args))
	keys := make([]string, len(args))
	var use reqUse
	for i, a := range args {
		exprs[i], keys[i] = a.e, a.key
		use |= a.use
	}
	e := build(exprs)
	switch kind {
	case ckStatic:
		v, err := e.eval(&evalCtx{})
		if err != nil {
			c.errs = append(c.errs, &sqlError{pos: pos, token: tok, msg: err.Error(), cause: err})
			return clause{kind: ckErr}
		}
		return clause{kind: ckStatic, e: &constE{v: v}, key: v.String()}
	case ckParam:
		return clause{kind: ckParam, e: e, key: name + "(" + strings.Join(keys, ",") + ")", use: use}
	}
	return clause{kind: ckRow, e: e, use: use}
}

func (c *compiler) binary(n *binaryNode) clause {
	l, r := c.compile(n.l), c.compile(n.r)
	if l.kind == ckErr || r.kind == ckErr {
		return clause{kind: ckErr}
	}
	switch n.op {
	case "AND", "OR":
		and := n.op == "AND"
		build := func(a []expr) expr { return &logicE{and: and, l: a[0], r: a[1]} }
		if l.kind == ckStatic && r.kind == ckStatic {
			// PowerSync does not fold AND/OR of constants: the result is a
			// row value (so e.g. json_keys(1 AND 1) fails per row, not at load).
			return clause{kind: ckRow, e: build([]expr{l.e, r.e})}
		}
		if l.rowCap() && r.rowCap() {
			return c.compose(n.pos, n.op, strings.ToLower(n.op), []clause{l, r}, build)
		}
		if l.paramCap() && r.paramCap() {
			saved := c.mode
			if c.mode == modeData {
				c.mode = modeParamTable // PowerSync combines bucket-only AND/OR as a parameter value
			}
			res := c.compose(n.pos, n.op, strings.ToLower(n.op), []clause{l, r}, build)
			c.mode = saved
			return res
		}
		return c.combineMatch(n, l, r, and)
	case "=":
		return c.equals(n, l, r)
	case "IN":
		return c.in(n, l, r)
	case "->", "->>":
		lit, ok := n.r.(*litNode)
		if !ok || lit.v.Kind() != model.KindText {
			return c.errorf(n.r.position(), n.op, "the right side of %s must be a string literal", n.op)
		}
		text := n.op == "->>"
		fixed := c.fixedJSON
		return c.compose(n.pos, n.op, "json"+n.op+lit.v.String(), []clause{l},
			func(a []expr) expr { return &jsonOpE{x: a[0], path: lit.v.Str(), text: text, fixed: fixed} })
	case "!=", "<", ">", "<=", ">=", "+", "-", "*", "/", "||":
		op := n.op
		return c.compose(n.pos, op, op, []clause{l, r}, func(a []expr) expr { return &binE{op: op, l: a[0], r: a[1]} })
	}
	return c.errorf(n.pos, n.op, "operator %s is not supported", n.op)
}

func (c *compiler) equals(n *binaryNode, l, r clause) clause {
	build := func(a []expr) expr { return &binE{op: "=", l: a[0], r: a[1]} }
	if c.supportsParamExpr() && l.paramCap() && r.paramCap() {
		return c.compose(n.pos, "=", "=", []clause{l, r}, build)
	}
	if !l.rowCap() && !r.rowCap() {
		return c.errorf(n.pos, "=", "cannot have bucket parameters on both sides of = operator")
	}
	row, other := l, r
	if !l.rowCap() {
		row, other = r, l
	}
	switch other.kind {
	case ckStatic, ckRow:
		return c.compose(n.pos, "=", "=", []clause{l, r}, build)
	case ckParam:
		p := c.param(other.key, other.e, false, false)
		return clause{kind: ckMatch, m: &matchSpec{params: []*inputParam{p}, node: &mEq{row: row.e, p: p}}, use: other.use}
	}
	return c.errorf(n.pos, "=", "parameter match clauses cannot be compared with =")
}

func (c *compiler) in(n *binaryNode, l, r clause) clause {
	build := func(a []expr) expr { return &binE{op: "IN", l: a[0], r: a[1]} }
	if l.kind == ckMatch || r.kind == ckMatch {
		return c.errorf(n.pos, "IN", "parameter match clauses cannot be used with IN")
	}
	if (l.rowCap() && r.rowCap()) || (c.supportsParamExpr() && l.paramCap() && r.paramCap()) {
		return c.compose(n.pos, "IN", "in", []clause{l, r}, build)
	}
	if l.kind == ckParam && r.kind == ckRow {
		// bucket.x IN row.array / token_parameters.x IN row.array
		p := c.param(l.key, l.e, false, false)
		return clause{kind: ckMatch, m: &matchSpec{params: []*inputParam{p}, unbounded: true, node: c.paramInRow(r.e, p)}, use: l.use}
	}
	if c.mode == modeParamTable && l.rowCap() && r.kind == ckParam {
		// row.x IN request array: one lookup per array element
		p := c.param(r.key+"[*]", r.e, true, false)
		return clause{kind: ckMatch, m: &matchSpec{params: []*inputParam{p}, node: &mRowInParam{row: l.e, p: p}}, use: r.use}
	}
	if c.mode == modeData {
		return c.errorf(n.pos, "IN", "cannot use bucket parameters on the right side of IN operators")
	}
	return c.errorf(n.pos, "IN", "cannot use table values and request parameters in the same IN expression")
}

// toMatch converts any clause into a match specification (PowerSync's
// toBooleanParameterSetClause).
func (c *compiler) toMatch(cl clause) *matchSpec {
	switch cl.kind {
	case ckMatch:
		return cl.m
	case ckParam:
		// Equivalent to `parameter = true`: the row side always stores 1.
		p := c.param(cl.key, cl.e, false, true)
		return &matchSpec{params: []*inputParam{p}, node: &mParamBool{p: p}}
	}
	return &matchSpec{node: &mBool{e: cl.e}}
}

func (c *compiler) combineMatch(n *binaryNode, l, r clause, and bool) clause {
	a, b := c.toMatch(l), c.toMatch(r)
	params := mergeParams(a.params, b.params)
	if and {
		if a.unbounded && b.unbounded {
			return c.errorf(n.pos, n.op, "cannot have multiple IN expressions on bucket parameters")
		}
		return clause{kind: ckMatch, m: &matchSpec{params: params, unbounded: a.unbounded || b.unbounded, node: &mAnd{a: a.node, b: b.node}},
			use: l.use | r.use}
	}
	if len(params) != len(a.params) || len(params) != len(b.params) {
		return c.errorf(n.pos, n.op, "left and right sides of OR must use the same parameters (%s vs %s), or split into separate queries",
			paramKeys(a.params), paramKeys(b.params))
	}
	// PowerSync counts an OR as authenticated only if both sides are.
	use := (l.use | r.use) & useUnauth
	if l.use&r.use&useAuth != 0 {
		use |= useAuth
	}
	return clause{kind: ckMatch, m: &matchSpec{params: params, unbounded: a.unbounded || b.unbounded, node: &mOr{a: a.node, b: b.node}}, use: use}
}

func mergeParams(a, b []*inputParam) []*inputParam {
	out := append([]*inputParam(nil), a...)
	for _, p := range b {
		dup := false
		for _, q := range out {
			if q.key == p.key {
				dup = true
				break
			}
		}
		if !dup {
			out = append(out, p)
		}
	}
	return out
}

func paramKeys(ps []*inputParam) string {
	keys := make([]string, len(ps))
	for i, p := range ps {
		keys[i] = p.key
	}
	return "[" + strings.Join(keys, ", ") + "]"
}

// whereSpec compiles a WHERE clause (nil = always true) into a match
// specification with final slot numbers.
func (c *compiler) whereSpec(where node) *matchSpec {
	if where == nil {
		return &matchSpec{node: &mBool{e: &constE{v: model.Int(1)}}}
	}
	cl := c.compile(where)
	if cl.kind == ckErr {
		return nil
	}
	c.whereUse = cl.use
	m := c.toMatch(cl)
	for i, p := range m.params {
		p.slot = i
	}
	return m
}
