package syncrules

import (
	"fmt"
	"strings"

	"github.com/syncpipe/syncpipe/model"
)

// BoundTable is the part of the rules that applies to one source table,
// with column names resolved to row indexes. Bind once per table (and again
// when its columns change); it is immutable and safe for concurrent use.
// Each goroutine evaluates rows through its own Evaluator.
type BoundTable struct {
	table    TableName
	columns  []string
	data     []*boundData
	params   []*boundParam
	lookups  []*boundLookup // Sync Streams lookups (streams_eval.go)
	maxSlots int
	maxOut   int
}

// boundData is a data query bound to a table.
type boundData struct {
	q      *dataQuery
	filter matchNode
	nslots int
	steps  []outStep
	keys   [][]byte // `"name":` per output slot
	idSlot int      // output slot of "id", -1 if none
}

type outStep struct {
	star  bool // fill from source column col unless already set to non-NULL
	slot  int
	col   int
	e     expr
	skip  bool // plain reference to a column the table does not have (undefined)
	blank bool // expression result replaces the slot
}

// boundParam is a table parameter query bound to a table.
type boundParam struct {
	q       *tableParamQuery
	filter  matchNode
	nslots  int
	colIdx  []int    // source column per lookup column (-1: missing)
	keys    [][]byte // `"name":` per lookup column
	keyHead []byte   // `["def","1"` lookup key prefix
}

// Bind resolves the rules for a source table given its ordered column
// names. table is "schema.name" or "name" (default schema). A table no
// query reads gives a BoundTable with HasData and HasParameters false.
func (r *Rules) Bind(table string, columns []string) (*BoundTable, error) {
	t := tableRef{schema: r.opts.defaultSchema(), name: table}
	if i := strings.IndexByte(table, '.'); i >= 0 {
		t = tableRef{schema: table[:i], name: table[i+1:]}
	}
	b := &binder{cols: make(map[string]int, len(columns))}
	for i, c := range columns {
		if _, dup := b.cols[c]; dup {
			return nil, fmt.Errorf("bind %s: duplicate column %q", t, c)
		}
		b.cols[c] = i
	}
	bt := &BoundTable{table: TableName{Schema: t.schema, Name: t.name}, columns: append([]string(nil), columns...)}
	for _, d := range r.defs {
		for _, q := range d.data {
			if q.table == t {
				bt.addData(q, b, columns)
			}
		}
		for _, q := range d.tables {
			if q.table == t {
				bp := bindParam(q, b)
				bt.params = append(bt.params, bp)
				bt.maxSlots = max(bt.maxSlots, bp.nslots)
			}
		}
	}
	r.bindStreams(bt, t, b, columns)
	return bt, nil
}

// addData binds data query q (of a bucket definition or a stream bucket)
// to the table.
func (bt *BoundTable) addData(q *dataQuery, b *binder, columns []string) {
	bd := bindData(q, b, columns)
	bt.data = append(bt.data, bd)
	bt.maxSlots = max(bt.maxSlots, bd.nslots)
	bt.maxOut = max(bt.maxOut, len(bd.keys))
}

func bindData(q *dataQuery, b *binder, columns []string) *boundData {
	bd := &boundData{q: q, filter: bindMatch(q.filter.node, b), nslots: len(q.filter.params), idSlot: -1}
	slotOf := map[string]int{}
	slot := func(name string) (int, bool) {
		if s, ok := slotOf[name]; ok {
			return s, true
		}
		s := len(bd.keys)
		slotOf[name] = s
		key := model.AppendJSONString(nil, name)
		bd.keys = append(bd.keys, append(key, ':'))
		if name == "id" {
			bd.idSlot = s
		}
		return s, false
	}
	for _, c := range q.cols {
		if c.star {
			// SELECT * copies every column not starting with "_", without
			// overwriting earlier non-NULL outputs (JavaScript ??=).
			for i, name := range columns {
				if strings.HasPrefix(name, "_") {
					continue
				}
				s, _ := slot(name)
				bd.steps = append(bd.steps, outStep{star: true, slot: s, col: i})
			}
			continue
		}
		s, _ := slot(c.name)
		st := outStep{slot: s, e: c.e.bind(b), blank: true}
		if c.bareCol != "" && b.index(c.bareCol) < 0 {
			st.skip = true
		}
		bd.steps = append(bd.steps, st)
	}
	return bd
}

func bindParam(q *tableParamQuery, b *binder) *boundParam {
	bp := &boundParam{q: q, filter: bindMatch(q.filter.node, b), nslots: len(q.filter.params)}
	for _, lc := range q.lookupCols {
		bp.colIdx = append(bp.colIdx, b.index(lc.col))
		bp.keys = append(bp.keys, append(model.AppendJSONString(nil, lc.name), ':'))
	}
	bp.keyHead = append(bp.keyHead, '[')
	bp.keyHead = model.AppendJSONString(bp.keyHead, q.def.name)
	bp.keyHead = append(bp.keyHead, ',')
	bp.keyHead = model.AppendJSONString(bp.keyHead, q.queryID)
	return bp
}

// Table returns the bound table's name.
func (t *BoundTable) Table() TableName { return t.table }

// HasData reports whether rows of this table go into any bucket.
func (t *BoundTable) HasData() bool { return len(t.data) > 0 }

// HasParameters reports whether rows of this table feed parameter queries.
func (t *BoundTable) HasParameters() bool { return len(t.params) > 0 || len(t.lookups) > 0 }

// NewEvaluator returns a per-goroutine evaluator with its own scratch
// space; reuse it for every row to avoid allocations.
func (t *BoundTable) NewEvaluator() *Evaluator {
	return &Evaluator{
		t:       t,
		vals:    make([]model.Value, t.maxOut),
		present: make([]bool, t.maxOut),
		scratch: make([]byte, 0, 128),
	}
}
