package syncrules

import (
	"fmt"
	"sort"
	"strings"

	"github.com/syncpipe/syncpipe/model"
)

// tableRef names a source table.
type tableRef struct{ schema, name string }

// String returns schema.name.
func (t tableRef) String() string { return t.schema + "." + t.name }

// queryBase is what every compiled query keeps for error reporting.
type queryBase struct {
	def   *definition
	label string // "data[0]", "parameters[1]", "parameters"
	sql   string
	loc   srcLoc
	warns []*sqlError // PowerSync's warnings about the query
}

// Warning texts.
const (
	msgDangerous = "potentially dangerous query: it depends on parameters the client sets (request.parameters(), user_parameters) " +
		"and on no authenticated value, so it cannot authorize anything; set accept_potentially_dangerous_queries: true on the bucket if this is intended"
)

// noteWarnings records the folded-identifier warnings of s (aliases only in
// parameter queries, as PowerSync checks them) and, for a parameter query
// whose bucket does not accept it, the dangerous-query warning.
func (q *queryBase) noteWarnings(s *selectStmt, paramQuery bool, use, authUse reqUse) {
	for _, c := range s.cases {
		if !c.alias || paramQuery {
			q.warns = append(q.warns, caseWarning(c.pos, c.raw))
		}
	}
	if f := s.from; f != nil && f.call == nil && f.alias == "" && f.schema == "" && f.nameTok.kind == tIdent && f.nameTok.raw != f.nameTok.text {
		q.warns = append(q.warns, caseWarning(f.pos, f.nameTok.raw))
	}
	if paramQuery && use&useUnauth != 0 && authUse&useAuth == 0 && !q.def.acceptDangerous {
		q.warns = append(q.warns, &sqlError{pos: 0, msg: msgDangerous})
	}
}

func caseWarning(pos int, raw string) *sqlError {
	return &sqlError{pos: pos, token: raw, msg: fmt.Sprintf(`unquoted identifier %s is folded to lower case; write "%s" to keep the upper case`, raw, raw)}
}

// dataQuery is a compiled `SELECT … FROM table [WHERE …]` of a definition.
type dataQuery struct {
	queryBase
	table    tableRef
	tablePos int    // offset of the table name in the query
	outName  string // object_type
	filter   *matchSpec
	slots    []int // slot of each definition bucket parameter
	cols     []outCol
	refs     []colUse
	hasStar  bool
	starPos  int
}

// outCol is one item of a data query's SELECT list.
type outCol struct {
	star    bool
	name    string
	e       expr
	bareCol string // source column if the item is a plain column reference
}

// tableParamQuery is a parameter query with FROM table (evaluated at
// replication time into lookup entries).
type tableParamQuery struct {
	queryBase
	queryID    string
	table      tableRef
	tablePos   int // offset of the table name in the query
	filter     *matchSpec
	lookupCols []lookupCol // row columns stored in parameter rows
	reqCols    map[string]expr
	outNames   []string // bucket parameter names, SELECT order
	priority   int
	refs       []colUse
}

type lookupCol struct {
	name string // output name (bucket parameter)
	col  string // source column
}

// staticParamQuery is a parameter query without FROM.
type staticParamQuery struct {
	queryBase
	where    expr // nil: always
	cols     map[string]expr
	outNames []string
	priority int
}

// funcParamQuery is `SELECT … FROM json_each(<request expr>) [WHERE …]`.
type funcParamQuery struct {
	queryBase
	arg      expr
	where    expr
	cols     map[string]expr
	outNames []string
	priority int
}

// definition is one entry of bucket_definitions.
type definition struct {
	name        string
	priority    int
	prioritySet bool // priority given in YAML
	// acceptDangerous is accept_potentially_dangerous_queries: true.
	acceptDangerous bool
	// paramsAborted: a parameter query failed so that its bucket
	// parameters are unknown.
	paramsAborted bool
	prefix        string
	globalID      string // prefix + "[]", for definitions without parameters
	bucketParams  []string
	hasParams     bool
	static        []*staticParamQuery
	funcs         []*funcParamQuery
	tables        []*tableParamQuery
	data          []*dataQuery
	// stream: a Sync Streams bucket (streams.go), compiled from a stream
	// query's row side.
	stream bool
	// alpha: an edition-2 stream's bucket (streams_ed2.go).
	alpha bool
	// fixedJSON: its queries read JSON as fixed_json_extract does.
	fixedJSON bool
}

func outputName(col selectCol) (string, bool) {
	if col.hasAlias {
		return col.alias, true
	}
	if r, ok := col.expr.(*refNode); ok {
		return r.name, true
	}
	return "", false
}

func compileDataQuery(def *definition, q *dataQuery, defaultSchema string) []*sqlError {
	s, perr := parseSelect(q.sql)
	if perr != nil {
		return []*sqlError{perr}
	}
	return compileDataStmt(def, q, s, defaultSchema)
}

// compileDataStmt compiles the parsed data query s of def into q.
func compileDataStmt(def *definition, q *dataQuery, s *selectStmt, defaultSchema string) []*sqlError {
	if s.from == nil {
		return []*sqlError{{pos: s.pos, token: "SELECT", msg: "data queries must select FROM a table"}}
	}
	if s.from.call != nil {
		return []*sqlError{{pos: s.from.pos, token: s.from.name, msg: "table-valued functions are only supported in parameter queries"}}
	}
	q.table, q.tablePos = tableRef{schema: s.from.schema, name: s.from.name}, s.from.pos
	if q.table.schema == "" {
		q.table.schema = defaultSchema
	}
	q.outName = s.from.name
	if s.from.alias != "" {
		q.outName = s.from.alias
	}
	c := newCompiler(modeData, q.outName)
	c.jsonEach, c.fixedJSON, c.skipNullIn = def.stream, def.fixedJSON, def.alpha
	q.filter = c.whereSpec(s.where)
	if q.filter != nil {
		checkSlots(c, s, q.filter)
		var got []string
		for _, p := range q.filter.params {
			got = append(got, p.key)
		}
		want := make([]string, len(def.bucketParams))
		q.slots = make([]int, len(def.bucketParams))
		for i, name := range def.bucketParams {
			want[i] = "bucket." + name
			q.slots[i] = -1
			for _, p := range q.filter.params {
				if p.key == want[i] {
					q.slots[i] = p.slot
				}
			}
		}
		if !sameSet(got, want) {
			c.errorf(s.pos, "SELECT", "query must cover all bucket parameters: expected %s, got %s", jsonList(want), jsonList(got))
		}
	}
	hasID := false
	for _, col := range s.cols {
		if col.star {
			if col.starTbl != "" && col.starTbl != q.outName {
				c.errorf(col.pos, col.starTbl+".*", "undefined table %q", col.starTbl)
				continue
			}
			q.cols = append(q.cols, outCol{star: true})
			q.hasStar, q.starPos, hasID = true, col.pos, true
			continue
		}
		name, ok := outputName(col)
		if !ok {
			c.errorf(col.pos, "", "alias is required for expressions in the SELECT list")
			continue
		}
		cl := c.compile(col.expr)
		if cl.kind == ckErr {
			continue
		}
		if !cl.rowCap() {
			c.errorf(col.pos, name, "bucket parameters cannot be selected in data queries")
			continue
		}
		oc := outCol{name: name, e: cl.e}
		if r, ok := col.expr.(*refNode); ok {
			oc.bareCol = r.name
		}
		q.cols = append(q.cols, oc)
		if name == "id" {
			hasID = true
		}
	}
	if !hasID && !def.stream { // a stream's rows without one get id ""
		c.errorf(s.pos, "SELECT", `query must return an "id" column`)
	}
	q.refs = c.refs
	q.noteWarnings(s, false, 0, 0)
	return c.errs
}

func checkSlots(c *compiler, s *selectStmt, m *matchSpec) {
	if len(m.params) > maxSlots {
		c.errorf(s.pos, "WHERE", "too many parameters (%d, at most %d)", len(m.params), maxSlots)
		m.params = m.params[:maxSlots]
	}
}

func sameSet(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	x := append([]string(nil), a...)
	y := append([]string(nil), b...)
	sort.Strings(x)
	sort.Strings(y)
	for i := range x {
		if x[i] != y[i] {
			return false
		}
	}
	return true
}

func jsonList(xs []string) string {
	b := []byte{'['}
	for i, x := range xs {
		if i > 0 {
			b = append(b, ',')
		}
		b = model.AppendJSONString(b, x)
	}
	return string(append(b, ']'))
}

// compileParamQuery compiles one entry of `parameters` into a static,
// json_each or table parameter query.
func compileParamQuery(def *definition, base queryBase, queryID, defaultSchema string) (any, []*sqlError) {
	s, perr := parseSelect(base.sql)
	if perr != nil {
		return nil, []*sqlError{perr}
	}
	switch {
	case s.from == nil:
		q := &staticParamQuery{queryBase: base, cols: map[string]expr{}, priority: -1}
		c := newCompiler(modeStatic, "")
		var whereUse reqUse
		if s.where != nil {
			cl := c.compile(s.where)
			if cl.kind != ckErr && !cl.paramCap() {
				c.errorf(s.where.position(), "WHERE", "a parameter query without FROM can only filter on request values")
			}
			q.where, whereUse = cl.e, cl.use
		}
		var selUse reqUse
		q.outNames = c.outputColumns(s, def, q.cols, &q.priority, &selUse)
		q.noteWarnings(s, true, whereUse|selUse, selUse)
		return q, c.errs
	case s.from.call != nil:
		return compileFuncQuery(def, base, s)
	}
	q := &tableParamQuery{queryBase: base, queryID: queryID, reqCols: map[string]expr{}, priority: -1,
		table: tableRef{schema: s.from.schema, name: s.from.name}, tablePos: s.from.pos}
	if q.table.schema == "" {
		q.table.schema = defaultSchema
	}
	c := newCompiler(modeParamTable, s.from.name)
	if s.from.alias != "" {
		c.errorf(s.from.pos, s.from.alias, "table aliases are not supported in parameter queries")
	}
	q.filter = c.whereSpec(s.where)
	if q.filter != nil {
		checkSlots(c, s, q.filter)
		expands := 0
		for _, p := range q.filter.params {
			if p.expands {
				expands++
			}
		}
		if expands > 1 {
			c.errorf(s.pos, "IN", "cannot have multiple array input parameters")
		}
	}
	var selUse reqUse
	for _, col := range s.cols {
		name, ok := c.colName(col)
		if !ok {
			continue
		}
		if name == "_priority" {
			c.priorityCol(col, def, &q.priority)
			continue
		}
		if r, isRef := col.expr.(*refNode); isRef && r.schema == "" && (r.table == "" || r.table == s.from.name) {
			c.refs = append(c.refs, colUse{name: r.name, pos: r.pos})
			q.lookupCols = append(q.lookupCols, lookupCol{name: name, col: r.name})
			q.outNames = append(q.outNames, name)
			continue
		}
		q.outNames = append(q.outNames, name)
		cl := c.compile(col.expr)
		if cl.kind == ckErr {
			continue
		}
		if !cl.paramCap() {
			c.errorf(col.pos, name, "selected values must be plain columns of %q or depend only on the request", s.from.name)
			continue
		}
		q.reqCols[name] = cl.e
		selUse |= cl.use
	}
	q.refs = c.refs
	q.noteWarnings(s, true, c.whereUse|selUse, c.whereUse|selUse)
	return q, c.errs
}

func compileFuncQuery(def *definition, base queryBase, s *selectStmt) (any, []*sqlError) {
	call := s.from.call
	c := newCompiler(modeTableFunc, "json_each")
	if s.from.alias != "" {
		c.rowName = s.from.alias
	}
	q := &funcParamQuery{queryBase: base, cols: map[string]expr{}, priority: -1}
	if call.name != "json_each" || call.schema != "" {
		c.abortf(call.pos, call.raw, "unsupported table-valued function %q (only json_each)", call.name)
		return q, c.errs
	}
	if len(call.args) != 1 {
		c.errorf(call.pos, call.raw, "json_each() takes 1 argument, got %d", len(call.args))
		return q, c.errs
	}
	argc := newCompiler(modeStatic, "")
	arg := argc.compile(call.args[0])
	c.errs = append(c.errs, argc.errs...)
	if arg.kind != ckErr && !arg.paramCap() {
		c.errorf(call.args[0].position(), "json_each", "the argument of json_each must only depend on the request")
	}
	q.arg = arg.e
	var whereUse reqUse
	if s.where != nil {
		cl := c.compile(s.where)
		q.where, whereUse = cl.e, cl.use
	}
	var selUse reqUse
	q.outNames = c.outputColumns(s, def, q.cols, &q.priority, &selUse)
	q.noteWarnings(s, true, whereUse|selUse|arg.use, selUse|arg.use)
	return q, c.errs
}

// outputColumns compiles the SELECT list of a static or json_each query.
func (c *compiler) outputColumns(s *selectStmt, def *definition, cols map[string]expr, prio *int, use *reqUse) []string {
	var names []string
	for _, col := range s.cols {
		name, ok := c.colName(col)
		if !ok {
			continue
		}
		if name == "_priority" {
			c.priorityCol(col, def, prio)
			continue
		}
		// Every item names a bucket parameter, even one that fails to
		// compile (PowerSync takes the names first).
		names = append(names, name)
		cl := c.compile(col.expr)
		if cl.kind == ckErr {
			continue
		}
		if c.mode == modeStatic && !cl.paramCap() {
			c.errorf(col.pos, name, "selected values must depend only on the request")
			continue
		}
		cols[name] = cl.e
		*use |= cl.use
	}
	return names
}

func (c *compiler) colName(col selectCol) (string, bool) {
	if col.star {
		c.abortf(col.pos, "*", "* is not supported in parameter queries; select explicit columns")
		return "", false
	}
	name, ok := outputName(col)
	if !ok {
		c.abortf(col.pos, "", "alias is required for expressions in the SELECT list")
	}
	return name, ok
}

func (c *compiler) priorityCol(col selectCol, def *definition, prio *int) {
	lit, ok := col.expr.(*litNode)
	if !ok || lit.v.Kind() != model.KindInteger || lit.v.Int64() < 0 || lit.v.Int64() > 3 {
		c.errorf(col.pos, "_priority", "_priority must be an integer literal from 0 to 3")
		return
	}
	if def.prioritySet || *prio >= 0 {
		c.errorf(col.pos, "_priority", "cannot set priority multiple times")
		return
	}
	*prio = int(lit.v.Int64())
}

func describeTable(t tableRef) string {
	return strings.TrimPrefix(t.String(), ".")
}
