package syncrules

import "github.com/syncpipe/syncpipe/model"

// The parser produces this small AST; the compiler turns it into
// evaluators. Every node records the byte offset of its first token so
// errors can point at it.

type node interface{ position() int }

// mapChildren copies an operator or call node with each operand replaced
// by f's result; other nodes (literals, references, subqueries) are
// returned as they are. Rewrites of a tree apply it recursively.
func mapChildren(n node, f func(node) node) node {
	switch n := n.(type) {
	case *binaryNode:
		c := *n
		c.l, c.r = f(n.l), f(n.r)
		return &c
	case *unaryNode:
		c := *n
		c.x = f(n.x)
		return &c
	case *isNullNode:
		c := *n
		c.x = f(n.x)
		return &c
	case *castNode:
		c := *n
		c.x = f(n.x)
		return &c
	case *callNode:
		c := *n
		c.args = make([]node, len(n.args))
		for i, a := range n.args {
			c.args[i] = f(a)
		}
		return &c
	}
	return n
}

type litNode struct {
	pos int
	v   model.Value
	raw string
}

// refNode is [schema.][table.]name; name "*" for wildcards.
type refNode struct {
	pos                 int
	schema, table, name string
	raw                 string
}

type callNode struct {
	pos          int
	schema, name string
	args         []node
	raw          string
}

type unaryNode struct {
	pos int
	op  string // "NOT"
	x   node
}

type binaryNode struct {
	pos   int // operator position
	op    string
	l, r  node
	start int
}

type isNullNode struct {
	pos int
	x   node
	not bool
}

type castNode struct {
	pos   int
	x     node
	to    string
	toPos int
}

// subqueryNode is `(SELECT …)` in a Sync Streams query.
type subqueryNode struct {
	pos  int
	stmt *selectStmt
}

func (n *litNode) position() int      { return n.pos }
func (n *subqueryNode) position() int { return n.pos }
func (n *refNode) position() int      { return n.pos }
func (n *callNode) position() int     { return n.pos }
func (n *unaryNode) position() int    { return n.pos }
func (n *binaryNode) position() int   { return n.start }
func (n *isNullNode) position() int   { return n.pos }
func (n *castNode) position() int     { return n.pos }

// selectCol is one item of the SELECT list.
type selectCol struct {
	expr     node
	star     bool   // * or table.*
	starTbl  string // table of table.*
	alias    string
	aliasPos int
	hasAlias bool
	pos      int
}

// fromItem is the FROM clause: a table or json_each(...).
type fromItem struct {
	pos          int
	schema, name string
	nameTok      token // the (first) name token
	alias        string
	call         *callNode // json_each(...)
}

type selectStmt struct {
	pos   int
	cols  []selectCol
	from  *fromItem
	joins []joinItem // more FROM items (Sync Streams only)
	where node
	cases []caseUse
}

// joinItem is a table joined to the FROM table: `, t` or `[INNER] JOIN t
// ON cond` (on nil for the comma form).
type joinItem struct {
	item *fromItem
	on   node
}
