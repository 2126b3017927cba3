package syncrules

import (
	"errors"
	"fmt"

	"github.com/syncpipe/syncpipe/model"
)

// inputParam is one value that links a row to a request: a bucket
// parameter in data queries, a lookup component in parameter queries.
type inputParam struct {
	key     string
	req     expr // request-side evaluator (parameter queries); nil for bucket.x
	expands bool // request side is a JSON array expanded into one lookup per element
	boolean bool // request side is reduced to 1/0 (a request-only condition)
	slot    int  // position in the query's parameter list
}

// matchSpec is a compiled WHERE clause: for a row it yields zero or more
// parameter sets, each assigning values to the parameters' slots.
type matchSpec struct {
	params    []*inputParam
	unbounded bool
	node      matchNode
}

// setArena stores parameter sets for one row evaluation without
// allocating in steady state. Set i occupies vals[i*n:(i+1)*n]; mask bit
// j tells whether slot j is assigned.
type setArena struct {
	n     int
	vals  []model.Value
	masks []uint64
}

func (a *setArena) reset(n int) {
	a.n = n
	a.vals = a.vals[:0]
	a.masks = a.masks[:0]
}

func (a *setArena) count() int { return len(a.masks) }

// add appends an empty set and returns its index.
func (a *setArena) add() int {
	for i := 0; i < a.n; i++ {
		a.vals = append(a.vals, model.Value{})
	}
	a.masks = append(a.masks, 0)
	return len(a.masks) - 1
}

func (a *setArena) set(i, slot int, v model.Value) {
	a.vals[i*a.n+slot] = v
	a.masks[i] |= 1 << uint(slot)
}

func (a *setArena) get(i, slot int) (model.Value, bool) {
	if a.masks[i]&(1<<uint(slot)) == 0 {
		return model.Value{}, false
	}
	return a.vals[i*a.n+slot], true
}

// copySet appends a copy of set i.
func (a *setArena) copySet(i int) int {
	j := a.add()
	copy(a.vals[j*a.n:(j+1)*a.n], a.vals[i*a.n:(i+1)*a.n])
	a.masks[j] = a.masks[i]
	return j
}

// maxSlots bounds the number of parameters of one query (mask width).
const maxSlots = 64

// matchNode evaluates part of a WHERE clause for a row, appending its
// parameter sets to the arena and returning their index range [lo, hi).
type matchNode interface {
	filter(c *evalCtx, a *setArena) (lo, hi int, err error)
}

// mBool is a row-only condition: one empty set if true, none otherwise.
type mBool struct{ e expr }

func (m *mBool) filter(c *evalCtx, a *setArena) (int, int, error) {
	v, err := m.e.eval(c)
	if err != nil {
		return 0, 0, err
	}
	lo := a.count()
	if truthy(v) {
		a.add()
	}
	return lo, a.count(), nil
}

// mEq is row_expr = parameter. NULL never matches and BLOBs cannot be
// persisted as parameters, so both give no set.
type mEq struct {
	row expr
	p   *inputParam
}

func (m *mEq) filter(c *evalCtx, a *setArena) (int, int, error) {
	v, err := m.row.eval(c)
	if err != nil {
		return 0, 0, err
	}
	lo := a.count()
	if v.Kind() != model.KindNull && v.Kind() != model.KindBlob {
		a.set(a.add(), m.p.slot, v)
	}
	return lo, a.count(), nil
}

// mRowInParam is row_expr IN <request array>: the row stores its value
// and the request supplies one lookup per array element. Unlike =, NULL is
// stored (PowerSync keeps every JSON-compatible value here, so a NULL row
// value meets a null array element); BLOBs cannot be persisted.
type mRowInParam struct {
	row expr
	p   *inputParam
}

func (m *mRowInParam) filter(c *evalCtx, a *setArena) (int, int, error) {
	v, err := m.row.eval(c)
	if err != nil {
		return 0, 0, err
	}
	lo := a.count()
	if v.Kind() != model.KindBlob {
		a.set(a.add(), m.p.slot, v)
	}
	return lo, a.count(), nil
}

// mParamInRow is parameter IN row_array: one set per element of the row's
// JSON array (parsed like JSON.parse), null elements included.
type mParamInRow struct {
	row      expr
	p        *inputParam
	skipNull bool // NULL elements match nothing (edition-2 streams)
}

var errNotArray = errors.New("not a JSON array")

func (m *mParamInRow) filter(c *evalCtx, a *setArena) (int, int, error) {
	v, err := m.row.eval(c)
	if err != nil {
		return 0, 0, err
	}
	lo := a.count()
	if v.Kind() == model.KindNull {
		return lo, lo, nil
	}
	if v.Kind() != model.KindText {
		return 0, 0, errNotArray
	}
	doc, err := parseJSON(v.Str())
	if err != nil {
		return 0, 0, fmt.Errorf("IN: %w", err)
	}
	if doc.k != jArr {
		return 0, 0, errNotArray
	}
	for i := range doc.arr {
		if m.skipNull && doc.arr[i].k == jNull {
			continue
		}
		a.set(a.add(), m.p.slot, jsElementValue(&doc.arr[i]))
	}
	return lo, a.count(), nil
}

// jsElementValue converts an element of a JSON.parse'd array into a
// bucket parameter as PowerSync keeps it: strings TEXT, numbers doubles
// (REAL), null NULL, and booleans, objects and arrays as the JSON
// JavaScript writes for them.
func jsElementValue(el *jval) model.Value {
	switch el.k {
	case jNull:
		return model.Null()
	case jStr:
		return model.Text(el.s)
	case jNum:
		return model.Real(el.numFloat())
	}
	return model.JSON(string(appendJSONPlain(nil, el)))
}

// mParamBool is a request-only condition inside a table query: the row
// side stores 1 and the request side supplies the condition's truth value.
type mParamBool struct{ p *inputParam }

func (m *mParamBool) filter(_ *evalCtx, a *setArena) (int, int, error) {
	lo := a.count()
	a.set(a.add(), m.p.slot, valTrue)
	return lo, a.count(), nil
}

// mAnd is the cartesian product of both sides' sets. As in PowerSync, when
// both sides assign the same parameter the right side's value wins.
type mAnd struct{ a, b matchNode }

func (m *mAnd) filter(c *evalCtx, ar *setArena) (int, int, error) {
	alo, ahi, err := m.a.filter(c, ar)
	if err != nil {
		return 0, 0, err
	}
	if alo == ahi {
		// No set on the left: still evaluate the right for its errors,
		// as PowerSync does, then produce nothing.
		if _, _, err := m.b.filter(c, ar); err != nil {
			return 0, 0, err
		}
		return ar.count(), ar.count(), nil
	}
	blo, bhi, err := m.b.filter(c, ar)
	if err != nil {
		return 0, 0, err
	}
	lo := ar.count()
	for i := alo; i < ahi; i++ {
		for j := blo; j < bhi; j++ {
			k := ar.copySet(i)
			for s := 0; s < ar.n; s++ {
				if v, ok := ar.get(j, s); ok {
					ar.set(k, s, v)
				}
			}
		}
	}
	return lo, ar.count(), nil
}

// mOr is the union of both sides' sets.
type mOr struct{ a, b matchNode }

func (m *mOr) filter(c *evalCtx, ar *setArena) (int, int, error) {
	alo, ahi, err := m.a.filter(c, ar)
	if err != nil {
		return 0, 0, err
	}
	blo, bhi, err := m.b.filter(c, ar)
	if err != nil {
		return 0, 0, err
	}
	if ahi == blo {
		return alo, bhi, nil
	}
	lo := ar.count()
	for i := alo; i < ahi; i++ {
		ar.copySet(i)
	}
	for j := blo; j < bhi; j++ {
		ar.copySet(j)
	}
	return lo, ar.count(), nil
}

// bindMatch resolves column references of a match tree.
func bindMatch(n matchNode, b *binder) matchNode {
	switch m := n.(type) {
	case *mBool:
		return &mBool{e: m.e.bind(b)}
	case *mEq:
		return &mEq{row: m.row.bind(b), p: m.p}
	case *mRowInParam:
		return &mRowInParam{row: m.row.bind(b), p: m.p}
	case *mParamInRow:
		return &mParamInRow{row: m.row.bind(b), p: m.p, skipNull: m.skipNull}
	case *mParamEach:
		return &mParamEach{row: m.row.bind(b), p: m.p}
	case *mAnd:
		return &mAnd{a: bindMatch(m.a, b), b: bindMatch(m.b, b)}
	case *mOr:
		return &mOr{a: bindMatch(m.a, b), b: bindMatch(m.b, b)}
	}
	return n
}
