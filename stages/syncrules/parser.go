package syncrules

import (
	"fmt"
	"strconv"

	"github.com/syncpipe/syncpipe/model"
)

// parser is a recursive-descent (Pratt) parser for the SELECT subset of
// SPEC §3. It stops at the first error; the compiler reports semantic
// problems.
type parser struct {
	toks  []token
	i     int
	depth int
	cases []caseUse
	// subqueries allows `x IN (SELECT …)` (Sync Streams); bucket
	// definitions reject subqueries.
	subqueries bool
	nested     int // subqueries being parsed
}

// caseUse is an unquoted identifier written with upper-case letters, which
// SQL folds to lower case; PowerSync warns about those that name columns,
// tables and (in parameter queries) output columns.
type caseUse struct {
	pos   int
	raw   string
	alias bool // an output column alias
}

// noteCase records t if it is such an identifier.
func (p *parser) noteCase(t token, alias bool) {
	if t.kind == tIdent && t.raw != t.text {
		p.cases = append(p.cases, caseUse{pos: t.pos, raw: t.raw, alias: alias})
	}
}

// maxDepth bounds expression nesting so hostile input cannot exhaust the
// stack.
const maxDepth = 200

// parseSelect parses one SELECT statement.
func parseSelect(src string) (*selectStmt, *sqlError) { return parseWith(src, false) }

// parseStreamSelect parses a Sync Streams query, which may hold
// subqueries.
func parseStreamSelect(src string) (*selectStmt, *sqlError) { return parseWith(src, true) }

// parseStreamSelectAt parses a Sync Streams query whose byte offsets
// (in its nodes and errors) start at off: a CTE's (see cte.off).
func parseStreamSelectAt(src string, off int) (*selectStmt, *sqlError) {
	toks, err := lex(src)
	if err != nil {
		err.pos += off
		return nil, err
	}
	for i := range toks {
		toks[i].pos += off
	}
	return parseTokens(toks, true)
}

func parseWith(src string, subqueries bool) (*selectStmt, *sqlError) {
	toks, err := lex(src)
	if err != nil {
		return nil, err
	}
	return parseTokens(toks, subqueries)
}

func parseTokens(toks []token, subqueries bool) (*selectStmt, *sqlError) {
	p := &parser{toks: toks, subqueries: subqueries}
	s, perr := p.selectStmt()
	if s != nil {
		s.cases = p.cases
	}
	return s, perr
}

func (p *parser) peek() token { return p.toks[p.i] }
func (p *parser) next() token {
	t := p.toks[p.i]
	if t.kind != tEOF {
		p.i++
	}
	return t
}

func errAt(t token, format string, args ...any) *sqlError {
	tok := t.raw
	if t.kind == tEOF {
		tok = "end of query"
	}
	return &sqlError{pos: t.pos, token: tok, msg: fmt.Sprintf(format, args...)}
}

func (p *parser) expect(w string) (token, *sqlError) {
	t := p.next()
	if !t.is(w) {
		return t, errAt(t, "expected %s, found %s", w, describe(t))
	}
	return t, nil
}

func describe(t token) string {
	if t.kind == tEOF {
		return "end of query"
	}
	return fmt.Sprintf("%q", t.raw)
}

// unsupportedClauses are keywords that end a supported query and are
// rejected with a specific message.
var unsupportedClauses = map[string]string{
	"group": "GROUP BY is not supported", "order": "ORDER BY is not supported",
	"limit": "LIMIT is not supported", "offset": "OFFSET is not supported",
	"having": "HAVING is not supported", "union": "UNION is not supported",
	"intersect": "INTERSECT is not supported", "except": "EXCEPT is not supported",
	"join": "joins are not supported", "inner": "joins are not supported",
	"left": "joins are not supported", "right": "joins are not supported",
	"full": "joins are not supported", "cross": "joins are not supported",
	"natural": "joins are not supported", "window": "window functions are not supported",
	"for": "SELECT FOR is not supported", "with": "WITH (CTE) is not supported",
	"returning": "RETURNING is not supported", "on": "joins are not supported",
	"using": "joins are not supported", "lateral": "joins are not supported",
}

// reserved words cannot be used as bare aliases or identifiers.
var reserved = map[string]bool{
	"select": true, "from": true, "where": true, "as": true, "and": true, "or": true,
	"not": true, "is": true, "null": true, "in": true, "true": true, "false": true,
	"cast": true, "distinct": true, "all": true, "case": true, "when": true, "then": true,
	"else": true, "end": true, "like": true, "ilike": true, "between": true, "exists": true,
	"collate": true, "similar": true, "escape": true, "isnull": true, "notnull": true,
}

func isReserved(t token) bool {
	if t.kind != tIdent {
		return false
	}
	_, clause := unsupportedClauses[t.text]
	return reserved[t.text] || clause
}

func (p *parser) selectStmt() (*selectStmt, *sqlError) {
	t := p.peek()
	if t.is("with") {
		return nil, errAt(t, "WITH (CTE) is not supported")
	}
	if !t.is("select") {
		return nil, errAt(t, "only SELECT statements are supported, found %s", describe(t))
	}
	p.next()
	s := &selectStmt{pos: t.pos}
	if d := p.peek(); d.is("distinct") || d.is("all") {
		return nil, errAt(d, "%s is not supported", d.raw)
	}
	for {
		col, err := p.selectCol()
		if err != nil {
			return nil, err
		}
		s.cols = append(s.cols, col)
		if !p.peek().is(",") {
			break
		}
		p.next()
	}
	if p.peek().is("from") {
		p.next()
		f, err := p.fromItem()
		if err != nil {
			return nil, err
		}
		s.from = f
		if p.subqueries {
			if s.joins, err = p.joins(); err != nil {
				return nil, err
			}
		}
	}
	if p.peek().is("where") {
		p.next()
		w, err := p.expr(0)
		if err != nil {
			return nil, err
		}
		s.where = w
	}
	if p.nested > 0 && p.peek().is(")") {
		return s, nil // the end of a subquery: the caller takes the ")"
	}
	semi := p.peek().is(";")
	if semi {
		p.next()
	}
	end := p.peek()
	if semi && end.kind != tEOF {
		return nil, errAt(end, "only a single statement is supported")
	}
	if end.kind != tEOF {
		if msg, ok := unsupportedClauses[end.text]; ok && end.kind == tIdent {
			return nil, errAt(end, "%s", msg)
		}
		if end.is(",") && s.from != nil {
			return nil, errAt(end, "joins are not supported")
		}
		if end.is(";") {
			return nil, errAt(end, "only a single statement is supported")
		}
		return nil, errAt(end, "unexpected %s", describe(end))
	}
	return s, nil
}

// joins parses the FROM items after the first of a Sync Streams query:
// `, t` and `[INNER] JOIN t ON cond`. Other joins (LEFT, CROSS, USING, …)
// end the FROM clause and are refused where it ends.
func (p *parser) joins() ([]joinItem, *sqlError) {
	var out []joinItem
	for {
		t := p.peek()
		switch {
		case t.is(","):
			p.next()
			f, err := p.fromItem()
			if err != nil {
				return nil, err
			}
			out = append(out, joinItem{item: f})
			continue
		case t.is("inner") && p.toks[p.i+1].is("join"), t.is("join"):
			if t.is("inner") {
				p.next()
			}
			p.next()
			f, err := p.fromItem()
			if err != nil {
				return nil, err
			}
			on := p.peek()
			if !on.is("on") {
				return nil, errAt(on, "only [INNER] JOIN … ON is supported, found %s", describe(on))
			}
			p.next()
			cond, err := p.expr(0)
			if err != nil {
				return nil, err
			}
			out = append(out, joinItem{item: f, on: cond})
			continue
		}
		return out, nil
	}
}

func (p *parser) selectCol() (selectCol, *sqlError) {
	t := p.peek()
	if t.is("*") {
		p.next()
		return selectCol{star: true, pos: t.pos}, nil
	}
	if (t.kind == tIdent || t.kind == tQIdent) && p.i+2 < len(p.toks) && p.toks[p.i+1].is(".") && p.toks[p.i+2].is("*") {
		p.i += 3
		return selectCol{star: true, starTbl: t.text, pos: t.pos}, nil
	}
	e, err := p.expr(0)
	if err != nil {
		return selectCol{}, err
	}
	col := selectCol{expr: e, pos: e.position()}
	a := p.peek()
	if a.is("as") {
		p.next()
		a = p.next()
		if a.kind != tIdent && a.kind != tQIdent {
			return selectCol{}, errAt(a, "expected an alias after AS, found %s", describe(a))
		}
		col.alias, col.aliasPos, col.hasAlias = a.text, a.pos, true
		p.noteCase(a, true)
	} else if a.kind == tQIdent || (a.kind == tIdent && !isReserved(a)) {
		p.next()
		col.alias, col.aliasPos, col.hasAlias = a.text, a.pos, true
		p.noteCase(a, true)
	}
	return col, nil
}

func (p *parser) fromItem() (*fromItem, *sqlError) {
	t := p.next()
	if t.is("(") {
		return nil, errAt(t, "subqueries are not supported")
	}
	if t.kind != tIdent && t.kind != tQIdent || isReserved(t) {
		return nil, errAt(t, "expected a table name, found %s", describe(t))
	}
	f := &fromItem{pos: t.pos, name: t.text, nameTok: t}
	if p.peek().is(".") {
		p.next()
		n := p.next()
		if n.kind != tIdent && n.kind != tQIdent {
			return nil, errAt(n, "expected a table name, found %s", describe(n))
		}
		f.schema, f.name = f.name, n.text
	}
	if p.peek().is("(") {
		args, err := p.callArgs()
		if err != nil {
			return nil, err
		}
		f.call = &callNode{pos: t.pos, schema: f.schema, name: f.name, args: args, raw: t.raw}
	}
	a := p.peek()
	if a.is("as") {
		p.next()
		a = p.next()
		if a.kind != tIdent && a.kind != tQIdent {
			return nil, errAt(a, "expected an alias after AS, found %s", describe(a))
		}
		f.alias = a.text
	} else if a.kind == tQIdent || (a.kind == tIdent && !isReserved(a)) {
		p.next()
		f.alias = a.text
	}
	return f, nil
}

func (p *parser) callArgs() ([]node, *sqlError) {
	p.next() // (
	var args []node
	if p.peek().is(")") {
		p.next()
		return args, nil
	}
	for {
		if t := p.peek(); t.is("*") || t.is("distinct") {
			return nil, errAt(t, "aggregate functions are not supported")
		}
		a, err := p.expr(0)
		if err != nil {
			return nil, err
		}
		args = append(args, a)
		t := p.next()
		if t.is(")") {
			return args, nil
		}
		if !t.is(",") {
			return nil, errAt(t, "expected , or ) in argument list, found %s", describe(t))
		}
	}
}

// Binding powers, loosely following PostgreSQL's operator precedence.
const (
	bpOr      = 1
	bpAnd     = 2
	bpNot     = 3
	bpIs      = 4
	bpCompare = 5
	bpIn      = 6
	bpOther   = 7
	bpAdd     = 8
	bpMul     = 9
	bpMember  = 10 // -> and ->> bind tighter than arithmetic, as in PowerSync's parser
	bpCast    = 11
)

func infixPower(t token) int {
	if t.kind == tIdent {
		switch t.text {
		case "or":
			return bpOr
		case "and":
			return bpAnd
		case "is", "isnull", "notnull":
			return bpIs
		case "in", "like", "ilike", "between", "similar", "not":
			return bpIn
		case "collate":
			return bpCast
		}
		return 0
	}
	if t.kind != tOp {
		return 0
	}
	switch t.text {
	case "=", "==", "!=", "<>", "<", ">", "<=", ">=":
		return bpCompare
	case "->", "->>":
		return bpMember
	case "||", "&", "|", "#", "~", "^", "@", "!":
		return bpOther
	case "+", "-":
		return bpAdd
	case "*", "/", "%":
		return bpMul
	case "::", "[":
		return bpCast
	}
	return 0
}

// expr parses an expression whose operators bind tighter than minBP.
func (p *parser) expr(minBP int) (node, *sqlError) {
	p.depth++
	defer func() { p.depth-- }()
	if p.depth > maxDepth {
		return nil, errAt(p.peek(), "expression is nested too deeply")
	}
	left, err := p.prefix()
	if err != nil {
		return nil, err
	}
	for {
		t := p.peek()
		bp := infixPower(t)
		if bp == 0 || bp <= minBP {
			return left, nil
		}
		p.next()
		switch {
		case t.is("is"):
			not := false
			if p.peek().is("not") {
				p.next()
				not = true
			}
			n := p.next()
			if !n.is("null") {
				return nil, errAt(n, "only IS [NOT] NULL is supported, found IS %s", describe(n))
			}
			left = &isNullNode{pos: left.position(), x: left, not: not}
		case t.is("isnull"), t.is("notnull"):
			left = &isNullNode{pos: left.position(), x: left, not: t.is("notnull")}
		case t.is("not"):
			n := p.peek()
			if n.is("in") {
				return nil, errAt(t, "NOT IN is not supported")
			}
			return nil, errAt(n, "NOT %s is not supported", n.raw)
		case t.is("like"), t.is("ilike"), t.is("between"), t.is("similar"), t.is("collate"):
			return nil, errAt(t, "%s is not supported", t.raw)
		case t.is("::"):
			ty := p.next()
			if ty.kind != tIdent && ty.kind != tQIdent {
				return nil, errAt(ty, "expected a type name after ::, found %s", describe(ty))
			}
			left = &castNode{pos: left.position(), x: left, to: ty.text, toPos: ty.pos}
		case t.is("["):
			return nil, errAt(t, "array subscripts are not supported")
		case t.kind == tOp && (t.text == "%" || t.text == "&" || t.text == "|" || t.text == "#" ||
			t.text == "~" || t.text == "^" || t.text == "@" || t.text == "!" || t.text == "=="):
			return nil, errAt(t, "operator %s is not supported", t.text)
		default:
			right, err := p.expr(bp)
			if err != nil {
				return nil, err
			}
			op := t.text
			switch op {
			case "<>":
				op = "!="
			case "and", "or", "in":
				op = map[string]string{"and": "AND", "or": "OR", "in": "IN"}[op]
			}
			left = &binaryNode{pos: t.pos, op: op, l: left, r: right, start: left.position()}
		}
	}
}

func (p *parser) prefix() (node, *sqlError) {
	t := p.next()
	switch t.kind {
	case tString:
		return &litNode{pos: t.pos, v: model.Text(t.text), raw: t.raw}, nil
	case tInt:
		return intLiteral(t, t.text, t.raw), nil
	case tFloat:
		f, _ := strconv.ParseFloat(t.text, 64)
		return &litNode{pos: t.pos, v: model.Real(f), raw: t.raw}, nil
	case tOp:
		switch t.text {
		case "(":
			if p.peek().is("select") {
				if !p.subqueries {
					return nil, errAt(p.peek(), "subqueries are not supported")
				}
				return p.subquery(t)
			}
			e, err := p.expr(0)
			if err != nil {
				return nil, err
			}
			if _, err := p.expect(")"); err != nil {
				return nil, err
			}
			return e, nil
		case "-":
			// Only a minus written against a number is supported: it is
			// part of the literal, as in PowerSync's SQL parser.
			if n := p.peek(); (n.kind == tInt || n.kind == tFloat) && n.pos == t.pos+1 {
				p.next()
				if n.kind == tInt {
					return intLiteral(t, "-"+n.text, "-"+n.raw), nil
				}
				f, _ := strconv.ParseFloat("-"+n.text, 64)
				return &litNode{pos: t.pos, v: model.Real(f), raw: "-" + n.raw}, nil
			}
			return nil, errAt(t, "unary - is only supported in front of a number (write -1, not - 1 or -x)")
		case "+":
			return nil, errAt(t, "unary + is not supported")
		case "?", "$":
			return nil, errAt(t, "query parameters are not supported")
		}
		return nil, errAt(t, "unexpected %s", describe(t))
	case tEOF:
		return nil, errAt(t, "unexpected end of query")
	}
	// Identifiers and keywords.
	if t.kind == tIdent {
		switch t.text {
		case "null":
			return &litNode{pos: t.pos, v: model.Null(), raw: t.raw}, nil
		case "true":
			return &litNode{pos: t.pos, v: model.Int(1), raw: t.raw}, nil
		case "false":
			return &litNode{pos: t.pos, v: model.Int(0), raw: t.raw}, nil
		case "not":
			x, err := p.expr(bpNot)
			if err != nil {
				return nil, err
			}
			return &unaryNode{pos: t.pos, op: "NOT", x: x}, nil
		case "cast":
			return p.castExpr(t)
		case "case", "exists", "array", "interval", "row":
			return nil, errAt(t, "%s expressions are not supported", t.raw)
		case "select":
			return nil, errAt(t, "subqueries are not supported")
		}
		if isReserved(t) {
			return nil, errAt(t, "unexpected keyword %s", describe(t))
		}
	}
	return p.refOrCall(t)
}

// intLiteral is an integer literal as PowerSync reads it: through a
// JavaScript number, so digits beyond 2^53 are rounded (9007199254740993
// is 9007199254740992); past int64 it stays REAL.
func intLiteral(t token, text, raw string) *litNode {
	f, _ := strconv.ParseFloat(text, 64)
	if isSafeIntegral(f) {
		return &litNode{pos: t.pos, v: model.Int(int64(f)), raw: raw}
	}
	return &litNode{pos: t.pos, v: model.Real(f), raw: raw}
}

func (p *parser) castExpr(t token) (node, *sqlError) {
	if _, err := p.expect("("); err != nil {
		return nil, err
	}
	x, err := p.expr(0)
	if err != nil {
		return nil, err
	}
	if _, err := p.expect("as"); err != nil {
		return nil, err
	}
	ty := p.next()
	if ty.kind != tIdent && ty.kind != tQIdent {
		return nil, errAt(ty, "expected a type name, found %s", describe(ty))
	}
	if n := p.peek(); !n.is(")") {
		return nil, errAt(n, "CAST to %q %s is not supported", ty.text, n.raw)
	}
	p.next()
	return &castNode{pos: t.pos, x: x, to: ty.text, toPos: ty.pos}, nil
}

func (p *parser) refOrCall(t token) (node, *sqlError) {
	parts := []string{t.text}
	raw := t.raw
	last := t
	for p.peek().is(".") {
		p.next()
		n := p.next()
		if n.is("*") {
			return nil, errAt(n, "%s.* is only allowed in the SELECT list", raw)
		}
		if n.kind != tIdent && n.kind != tQIdent {
			return nil, errAt(n, "expected a name after '.', found %s", describe(n))
		}
		parts = append(parts, n.text)
		raw += "." + n.raw
		last = n
		if len(parts) > 3 {
			return nil, errAt(n, "too many name parts in %s", raw)
		}
	}
	if p.peek().is("(") {
		if len(parts) > 2 {
			return nil, errAt(t, "invalid function name %s", raw)
		}
		args, err := p.callArgs()
		if err != nil {
			return nil, err
		}
		c := &callNode{pos: t.pos, name: parts[len(parts)-1], args: args, raw: raw}
		if len(parts) == 2 {
			c.schema = parts[0]
		}
		if p.peek().is("over") || p.peek().is("filter") {
			return nil, errAt(p.peek(), "window and aggregate functions are not supported")
		}
		return c, nil
	}
	// The column name, and the table part of table.column, are folded.
	if len(parts) <= 2 {
		p.noteCase(last, false)
	}
	if len(parts) == 2 {
		p.noteCase(t, false)
	}
	r := &refNode{pos: t.pos, name: parts[len(parts)-1], raw: raw}
	switch len(parts) {
	case 2:
		r.table = parts[0]
	case 3:
		r.schema, r.table = parts[0], parts[1]
	}
	return r, nil
}

// subquery parses `(SELECT …)` after its "(" (open).
func (p *parser) subquery(open token) (node, *sqlError) {
	p.nested++
	s, err := p.selectStmt()
	p.nested--
	if err != nil {
		return nil, err
	}
	if _, err := p.expect(")"); err != nil {
		return nil, err
	}
	s.cases = nil
	return &subqueryNode{pos: open.pos, stmt: s}, nil
}
