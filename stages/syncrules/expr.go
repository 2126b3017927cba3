package syncrules

import (
	"fmt"
	"strings"

	"github.com/syncpipe/syncpipe/model"
)

// expr is a compiled expression. Evaluation never panics on any input;
// problems are returned as errors (PowerSync turns them into a per-row
// evaluation error).
type expr interface {
	eval(c *evalCtx) (model.Value, error)
	// bind returns a copy with column references resolved against a table.
	bind(b *binder) expr
}

// evalCtx carries what an expression can see: the current row (source row
// or json_each row) and, at sync time, the request.
type evalCtx struct {
	row []model.Value
	req *reqState
}

// binder resolves column names to row indexes for one table.
type binder struct {
	cols map[string]int
}

func (b *binder) index(name string) int {
	if i, ok := b.cols[name]; ok {
		return i
	}
	return -1
}

type constE struct{ v model.Value }

func (e *constE) eval(*evalCtx) (model.Value, error) { return e.v, nil }
func (e *constE) bind(*binder) expr                  { return e }

// colE reads a column of the current row; idx -1 means the column does not
// exist in the bound table, which reads as NULL (JavaScript undefined).
type colE struct {
	name string
	idx  int
}

func (e *colE) eval(c *evalCtx) (model.Value, error) {
	if e.idx < 0 || e.idx >= len(c.row) {
		return model.Null(), nil
	}
	return c.row[e.idx], nil
}
func (e *colE) bind(b *binder) expr { return &colE{name: e.name, idx: b.index(e.name)} }

type notE struct{ x expr }

func (e *notE) eval(c *evalCtx) (model.Value, error) {
	v, err := e.x.eval(c)
	if err != nil {
		return model.Value{}, err
	}
	return model.Bool(!truthy(v)), nil
}
func (e *notE) bind(b *binder) expr { return &notE{x: e.x.bind(b)} }

// logicE is AND/OR over row or request values. PowerSync uses two-valued
// logic here (NULL counts as false) and evaluates both sides.
type logicE struct {
	and  bool
	l, r expr
}

func (e *logicE) eval(c *evalCtx) (model.Value, error) {
	a, err := e.l.eval(c)
	if err != nil {
		return model.Value{}, err
	}
	b, err := e.r.eval(c)
	if err != nil {
		return model.Value{}, err
	}
	if e.and {
		return model.Bool(truthy(a) && truthy(b)), nil
	}
	return model.Bool(truthy(a) || truthy(b)), nil
}
func (e *logicE) bind(b *binder) expr { return &logicE{and: e.and, l: e.l.bind(b), r: e.r.bind(b)} }

// binE is a binary operator other than AND/OR.
type binE struct {
	op   string
	l, r expr
}

func (e *binE) eval(c *evalCtx) (model.Value, error) {
	a, err := e.l.eval(c)
	if err != nil {
		return model.Value{}, err
	}
	b, err := e.r.eval(c)
	if err != nil {
		return model.Value{}, err
	}
	return binaryOp(e.op, a, b)
}
func (e *binE) bind(b *binder) expr { return &binE{op: e.op, l: e.l.bind(b), r: e.r.bind(b)} }

func binaryOp(op string, a, b model.Value) (model.Value, error) {
	switch op {
	case "=", "!=", "<", ">", "<=", ">=":
		if a.Kind() == model.KindNull || b.Kind() == model.KindNull {
			return model.Null(), nil
		}
		d, err := compareValues(a, b)
		if err != nil {
			return model.Value{}, err
		}
		switch op {
		case "=":
			return model.Bool(d == 0), nil
		case "!=":
			return model.Bool(d != 0), nil
		case "<":
			return model.Bool(d < 0), nil
		case ">":
			return model.Bool(d > 0), nil
		case "<=":
			return model.Bool(d <= 0), nil
		default:
			return model.Bool(d >= 0), nil
		}
	case "+", "-", "*", "/":
		return arith(op[0], a, b)
	case "||":
		return concat(a, b), nil
	case "IN":
		return inJSONArray(a, b)
	}
	return model.Value{}, fmt.Errorf("operator %s not supported", op)
}

type isNullE struct {
	x   expr
	not bool
}

func (e *isNullE) eval(c *evalCtx) (model.Value, error) {
	v, err := e.x.eval(c)
	if err != nil {
		return model.Value{}, err
	}
	return model.Bool(v.IsNull() != e.not), nil
}
func (e *isNullE) bind(b *binder) expr { return &isNullE{x: e.x.bind(b), not: e.not} }

type castE struct {
	x  expr
	to string
}

func (e *castE) eval(c *evalCtx) (model.Value, error) {
	v, err := e.x.eval(c)
	if err != nil {
		return model.Value{}, err
	}
	return castTo(v, e.to)
}
func (e *castE) bind(b *binder) expr { return &castE{x: e.x.bind(b), to: e.to} }

// jsonOpE is x -> 'path' or x ->> 'path', with edition-1 path rules or
// fixed_json_extract's.
type jsonOpE struct {
	x     expr
	path  string
	text  bool // ->>
	fixed bool // fixed_json_extract
}

func (e *jsonOpE) eval(c *evalCtx) (model.Value, error) {
	v, err := e.x.eval(c)
	if err != nil {
		return model.Value{}, err
	}
	op := "->"
	if e.text {
		op = "->>"
	}
	return jsonExtract(v, model.Text(e.path), op, e.fixed)
}
func (e *jsonOpE) bind(b *binder) expr {
	return &jsonOpE{x: e.x.bind(b), path: e.path, text: e.text, fixed: e.fixed}
}

// callE calls a scalar function. All arguments are evaluated first, as in
// PowerSync (so ifnull/iif are not short-circuiting).
type callE struct {
	fn   *builtin
	args []expr
}

func (e *callE) eval(c *evalCtx) (model.Value, error) {
	var buf [4]model.Value
	vals := buf[:0]
	for _, a := range e.args {
		v, err := a.eval(c)
		if err != nil {
			return model.Value{}, err
		}
		vals = append(vals, v)
	}
	v, err := e.fn.call(vals)
	if err != nil {
		return model.Value{}, fmt.Errorf("%s(): %w", e.fn.name, err)
	}
	return v, nil
}
func (e *callE) bind(b *binder) expr {
	args := make([]expr, len(e.args))
	for i, a := range e.args {
		args[i] = a.bind(b)
	}
	return &callE{fn: e.fn, args: args}
}

// reqFn identifies a request-derived value.
type reqFn uint8

const (
	reqUserID reqFn = iota
	reqJWT
	reqParameters
	reqParameter // request.parameter(key)
	reqTokenParam
	reqUserParam
	reqStream // a Sync Streams request value (streamReq)
)

// reqE reads from the sync request. At replication time there is no
// request; reading one is an internal error.
type reqE struct {
	fn   reqFn
	name string    // token/user parameter name
	arg  expr      // request.parameter(arg)
	sreq streamReq // reqStream's value
}

func (e *reqE) eval(c *evalCtx) (model.Value, error) {
	r := c.req
	if r == nil {
		return model.Value{}, fmt.Errorf("request value %s used without a request", e.describe())
	}
	switch e.fn {
	case reqUserID:
		return model.Text(r.userID), nil
	case reqJWT:
		return model.Text(r.rawClaims), nil
	case reqParameters:
		return model.Text(r.rawParams), nil
	case reqParameter:
		k, err := e.arg.eval(c)
		if err != nil {
			return model.Value{}, err
		}
		if k.Kind() != model.KindText {
			return model.Null(), nil
		}
		return r.parameter(k.Str()), nil
	case reqTokenParam:
		if e.name == "user_id" {
			return model.Text(r.userID), nil
		}
		return r.tokenParams[e.name], nil
	case reqStream:
		return r.streamValue(e.sreq, r.sub), nil
	default:
		return r.userParams[e.name], nil
	}
}
func (e *reqE) bind(b *binder) expr {
	if e.arg == nil {
		return e
	}
	return &reqE{fn: e.fn, name: e.name, arg: e.arg.bind(b)}
}

func (e *reqE) describe() string {
	switch e.fn {
	case reqUserID:
		return "request.user_id()"
	case reqJWT:
		return "request.jwt()"
	case reqParameters:
		return "request.parameters()"
	case reqParameter:
		return "request.parameter()"
	case reqTokenParam:
		return "token_parameters." + e.name
	case reqStream:
		return e.sreq.String()
	default:
		return "user_parameters." + e.name
	}
}

// jsonExtract implements json_extract, -> and ->> with edition-1 semantics:
// the path is split on '.', a leading '$' component is dropped (and
// required by json_extract), and each component indexes the parsed value.
// With fixed (PowerSync's fixed_json_extract, on from edition 2) a path
// without '$' is one key, as in SQLite (x ->> 'a.b' reads the key "a.b"),
// and a JSON null found is 'null' for -> and NULL for ->> and
// json_extract (edition 1 has it the other way round).
func jsonExtract(src, path model.Value, op string, fixed bool) (model.Value, error) {
	if src.Kind() == model.KindNull || path.Kind() == model.KindNull {
		return model.Null(), nil
	}
	// The document is parsed before the path is looked at, and a null
	// document is NULL whatever the path (a null reached by the path is
	// "null" text for ->> below).
	doc, err := parseJSONBig(textOf(src))
	if err != nil {
		return model.Value{}, fmt.Errorf("%s: %w", op, err)
	}
	if doc.k == jNull {
		return model.Null(), nil
	}
	comps := strings.Split(textOf(path), ".")
	if fixed && !strings.HasPrefix(comps[0], "$") && op != "json_extract" {
		comps = []string{textOf(path)}
	} else if strings.HasPrefix(comps[0], "$") {
		comps = comps[1:] // "$", but also "$x": PowerSync drops the part that starts with $
	} else if op == "json_extract" {
		return model.Value{}, ErrJSONPath
	}
	cur, found := doc, true
	for _, c := range comps {
		if cur.k == jNull {
			break
		}
		cur, found = cur.jsMember(c)
		if !found {
			break
		}
	}
	if !found {
		return model.Null(), nil // undefined
	}
	if op == "->" {
		if cur.k == jNull && !fixed {
			return model.Null(), nil // edition 1: -> gives NULL for JSON null
		}
		return model.Text(string(appendJSONBig(nil, &cur, false))), nil
	}
	if cur.k == jNull && fixed {
		return model.Null(), nil
	}
	return cur.toSQLiteLegacy(false), nil
}
