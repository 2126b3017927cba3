package syncrules

import "strings"

// The generator's partitions on row expressions (streams_rowexpr.go):
// a function or operator around the column compared with a request
// value, and a request value IN a column holding a JSON array.

// rowExprForms wrap a column (%s) for `<expression> = <request value>`.
var rowExprForms = []string{
	"lower(%s)", "upper(%s)", "length(%s)", "CAST(%s AS TEXT)", "%s || 'x'", "%s + 1",
	"substring(%s, 1, 2)", "ifnull(%s, 'u1')", "typeof(%s)", "(%s - 1) * 2",
}

// rowExprEq draws, now and then, an expression around the column of an
// `=` partition; f.col becomes the expression, a partition of its own.
func (s *sgen) rowExprEq(f *sfactor, col string, ref func(string) string) (string, bool) {
	if !s.chance(0.2) {
		return ref(col), false
	}
	form := rowExprForms[s.r.IntN(len(rowExprForms))]
	f.col = strings.ReplaceAll(form, "%s", col)
	return strings.ReplaceAll(form, "%s", ref(col)), true
}

// rowArrayIn draws, now and then, `<request value> IN <column>` for an
// array partition: the row's column holds the array.
func (s *sgen) rowArrayIn(f *sfactor, col string, ref func(string) string) bool {
	if (s.ed2 && s.skip.has(diffEd2RowArrayErrors)) || !s.chance(0.25) {
		return false
	}
	s.reqValue(f, s.eqValue())
	f.each, f.col = true, "json_each("+col+")"
	f.sql = f.sql + " IN " + ref(col)
	f.key = unqualified(f.sql)
	return true
}

// eachOK reports whether an OR-ed term has at most one `value IN
// column`: syncpipe's bucket side takes one array per row (refused
// otherwise).
func eachOK(t []*sfactor) bool {
	n := 0
	for _, f := range t {
		if f.each {
			n++
		}
	}
	return n <= 1
}

// rowArrayValue is a row value holding a JSON array (or not quite) for
// `value IN column`.
func (s *sgen) rowArrayValue() [2]string {
	return [2]string{"t", s.pick(`["u1","t1"]`, `["u2",1,null]`, `[]`, `["l1","l1"]`, `[1,2.0,true]`, `"u1"`, `{"a":"t1"}`, `[["u1"]]`, `not json`, `5`)}
}
