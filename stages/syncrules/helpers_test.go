package syncrules

import (
	"errors"
	"math"
	"testing"

	"github.com/syncpipe/syncpipe/model"
)

// evalExpr compiles "SELECT <e> AS v FROM t" the way a data query's SELECT
// list is compiled, binds it to cols and evaluates it on row. Constant
// expressions are folded at compile time, so their errors surface as
// compile errors; both are returned as the error.
func evalExpr(t *testing.T, e string, cols []string, row []model.Value) (model.Value, error) {
	t.Helper()
	s, perr := parseSelect("SELECT " + e + " AS v FROM t")
	if perr != nil {
		return model.Value{}, perr
	}
	c := newCompiler(modeData, "t")
	cl := c.compile(s.cols[0].expr)
	if len(c.errs) > 0 {
		return model.Value{}, c.errs[0]
	}
	b := &binder{cols: map[string]int{}}
	for i, n := range cols {
		b.cols[n] = i
	}
	return cl.e.bind(b).eval(&evalCtx{row: row})
}

// sameValue compares values, treating NaN as equal to NaN.
func sameValue(a, b model.Value) bool {
	if a.Kind() == model.KindReal && b.Kind() == model.KindReal && math.IsNaN(a.Float64()) && math.IsNaN(b.Float64()) {
		return true
	}
	return a.Equal(b)
}

var errAny = errors.New("any error")

type exprCase struct {
	expr string
	want model.Value
	err  error // errAny: expect some error
}

func runExprCases(t *testing.T, cases []exprCase, cols []string, row []model.Value) {
	t.Helper()
	for _, c := range cases {
		got, err := evalExpr(t, c.expr, cols, row)
		switch {
		case c.err != nil && err == nil:
			t.Errorf("%s = %v, want an error", c.expr, got)
		case c.err != nil && c.err != errAny && !errors.Is(err, c.err):
			t.Errorf("%s: error %v, want %v", c.expr, err, c.err)
		case c.err == nil && err != nil:
			t.Errorf("%s: unexpected error %v", c.expr, err)
		case c.err == nil && !sameValue(got, c.want):
			t.Errorf("%s = %v (%s), want %v (%s)", c.expr, got, got.Kind(), c.want, c.want.Kind())
		}
	}
}
