package syncrules

import (
	"fmt"
	"strings"

	"github.com/syncpipe/syncpipe/model"
)

// Partitions whose row side is more than a plain column:
//
//   - `<row expression> = <request value>`, e.g. lower(email) =
//     auth.parameter('email'): the bucket parameter is the expression
//     evaluated on the row (NULL or BLOB: no bucket), as data queries
//     evaluate it.
//   - `<row expression> IN <request value>`: as for a column, a bucket per
//     element of the request's array.
//   - `<request value> IN <row expression>`: the row holds a JSON array
//     (expanded as PowerSync's json_each does, streams_eval.go), a bucket
//     per element; the request side is the plain value.
//
// PowerSync orders partitions by a hash of the expression's SQL as its
// sync plan prints it, columns written `?`, followed by the columns'
// names (for json_each, of the function, its input and its `value`
// output); rowExprSQL prints the same text.

// rowExprFunctions are the functions a partition's row expression may
// call: those PowerSync's sync plan and this package's engine both know.
var rowExprFunctions = map[string]bool{
	"lower": true, "upper": true, "length": true, "substring": true, "hex": true, "typeof": true,
	"instr": true, "ifnull": true, "iif": true, "json_extract": true,
}

// rowExprOps are the binary operators a partition's row expression may
// use, with PowerSync's precedence (higher binds tighter).
var rowExprOps = map[string]int{
	"+": 7, "-": 7, "*": 8, "/": 8, "%": 8, "||": 9,
}

// rowExprPart classifies the factors this file handles; ok is false for
// any other factor, which classify then reads as before.
func (q *qscope) rowExprPart(f node) (fclass, bool, *sqlError) {
	b, isBin := f.(*binaryNode)
	if !isBin || (b.op != "=" && b.op != "IN") || hasInOrSubquery(b.l) || hasInOrSubquery(b.r) || q.cteInside(f) != nil {
		return fclass{}, false, nil // subqueries and CTEs: streams_join.go
	}
	pairs := [][2]node{{b.l, b.r}, {b.r, b.l}}
	for i, lr := range pairs {
		row, val := lr[0], lr[1]
		req, ok := requestValue(val)
		if !ok || !hasColumn(row) || !q.onlySynced(row) {
			continue
		}
		if _, plain := rowColumn(row, q.outName); plain && (b.op == "=" || i == 0) {
			return fclass{}, false, nil // the plain partitions classify already knows
		}
		sql, cols, err := rowExprSQL(row)
		if err != nil {
			return fclass{}, true, err
		}
		p := partition{req: req, expr: row, pos: b.start, array: b.op == "IN" && i == 0}
		hashed := append([]string{sql}, cols...)
		if b.op == "IN" && i == 1 {
			p.each = true
			hashed = append(append([]string{"json_each"}, hashed...), "?", "value")
		}
		p.col = strings.Join(hashed, "\x00")
		p.hash = streamHash(hashed...)
		return fclass{kind: fPart, part: p}, true, nil
	}
	return fclass{}, false, nil
}

// onlySynced reports whether every column n reads is the synced table's.
func (q *qscope) onlySynced(n node) bool {
	ok := true
	_, _ = mapRefs(n, func(r *refNode) (node, *sqlError) {
		if _, plain := rowColumn(r, q.outName); !plain {
			ok = false
		}
		return r, nil
	})
	return ok
}

// rowExprSQL prints a partition's row expression as PowerSync's sync plan
// does (ExpressionToSqlite), columns as `?`, and lists the columns in the
// order they appear; a form outside the supported ones is an error
// naming its token.
func rowExprSQL(n node) (string, []string, *sqlError) {
	var cols []string
	var walk func(n node, outer int) (string, *sqlError)
	walk = func(n node, outer int) (string, *sqlError) {
		switch n := n.(type) {
		case *refNode:
			cols = append(cols, n.name)
			return "?", nil
		case *litNode:
			return rowExprLiteral(n)
		case *callNode:
			if n.schema != "" || !rowExprFunctions[strings.ToLower(n.name)] {
				break
			}
			args := make([]string, len(n.args))
			for i, a := range n.args {
				s, err := walk(a, 0)
				if err != nil {
					return "", err
				}
				args[i] = s
			}
			return `"` + strings.ToLower(n.name) + `"(` + strings.Join(args, ", ") + ")", nil
		case *castNode:
			s, err := walk(n.x, 0)
			return "CAST(" + s + " AS " + strings.ToLower(n.to) + ")", err
		case *binaryNode:
			return rowExprBinary(n, outer, walk)
		}
		return "", rowExprRefusal(n)
	}
	s, err := walk(n, 0)
	return s, cols, err
}

// rowExprBinary prints an operator, parenthesized where the outer
// operator binds as tight or tighter; PowerSync prints the JSON operators
// as functions ("->>"(?, 'k')).
func rowExprBinary(n *binaryNode, outer int, walk func(node, int) (string, *sqlError)) (string, *sqlError) {
	if n.op == "->" || n.op == "->>" {
		l, err := walk(n.l, 0)
		if err != nil {
			return "", err
		}
		r, err := walk(n.r, 0)
		return `"` + n.op + `"(` + l + ", " + r + ")", err
	}
	prec, ok := rowExprOps[n.op]
	if !ok {
		return "", rowExprRefusal(n)
	}
	l, err := walk(n.l, prec)
	if err != nil {
		return "", err
	}
	r, err := walk(n.r, prec)
	if err != nil {
		return "", err
	}
	s := l + " " + n.op + " " + r
	if outer >= prec {
		s = "(" + s + ")"
	}
	return s, nil
}

// rowExprLiteral prints a literal: integers in decimal, reals as
// JavaScript prints them (an integral one with ".0"), text quoted.
func rowExprLiteral(n *litNode) (string, *sqlError) {
	switch n.v.Kind() {
	case model.KindInteger:
		if n.raw != "" && strings.ToUpper(n.raw) != n.raw {
			break // TRUE, FALSE: not printed as written
		}
		return n.v.String(), nil
	case model.KindReal:
		s := string(model.AppendJSNumber(nil, n.v.Float64()))
		if !strings.ContainsAny(s, ".e") {
			s += ".0"
		}
		return s, nil
	case model.KindText:
		return "'" + strings.ReplaceAll(n.v.Str(), "'", "''") + "'", nil
	case model.KindNull:
		return "NULL", nil
	}
	return "", rowExprRefusal(n)
}

// rowExprRefusal is the error for a form a partition's row expression may
// not take yet.
func rowExprRefusal(n node) *sqlError {
	tok := ""
	switch n := n.(type) {
	case *callNode:
		tok = n.name
	case *binaryNode:
		tok = n.op
	case *litNode:
		tok = n.raw
	}
	return &sqlError{pos: n.position(), token: tok, msg: fmt.Sprintf("%s is not supported in an expression compared with a request value (not supported yet)", describeNode(n, tok))}
}

// describeNode names a node in an error message.
func describeNode(n node, tok string) string {
	if tok != "" {
		return fmt.Sprintf("%q", tok)
	}
	return fmt.Sprintf("this %s", strings.TrimSuffix(strings.TrimPrefix(fmt.Sprintf("%T", n), "*syncrules."), "Node"))
}

// rowFilter is the bucket side of a partition as a data query's WHERE
// factor: `<row side> = bucket.<param>`, or `bucket.<param> IN <row
// side>` for a JSON array in the row.
func (p partition) rowFilter(param string) node {
	b := &refNode{pos: p.pos, table: "bucket", name: param, raw: "bucket." + param}
	row := p.expr
	if row == nil {
		row = &refNode{pos: p.pos, name: p.col, raw: p.col}
	}
	if p.each {
		return &binaryNode{pos: p.pos, op: "IN", start: p.pos, l: b, r: row}
	}
	return &binaryNode{pos: p.pos, op: "=", start: p.pos, l: row, r: b}
}

// mParamEach is parameter IN row_value in a stream's data query: one set
// per value PowerSync's json_each gives for the row's value (NULL:
// none), duplicates kept; a value json_each refuses is the row's error.
type mParamEach struct {
	row expr
	p   *inputParam
}

func (m *mParamEach) filter(c *evalCtx, a *setArena) (int, int, error) {
	v, err := m.row.eval(c)
	if err != nil {
		return 0, 0, err
	}
	if v.Kind() == model.KindBlob {
		return 0, 0, fmt.Errorf("json_each: %w", errNotArray)
	}
	vs, err := jsonEachValues(v)
	if err != nil {
		return 0, 0, fmt.Errorf("json_each: %w", err)
	}
	lo := a.count()
	for _, e := range vs {
		a.set(a.add(), m.p.slot, e)
	}
	return lo, a.count(), nil
}

// paramInRow is the match node of `bucket.x IN <row value>`: a stream's
// expands the value as json_each, a bucket definition's as JSON.parse.
func (c *compiler) paramInRow(row expr, p *inputParam) matchNode {
	if c.jsonEach {
		return &mParamEach{row: row, p: p}
	}
	return &mParamInRow{row: row, p: p, skipNull: c.skipNullIn}
}
