package benchmarks

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/syncpipe/syncpipe/model"
	"github.com/syncpipe/syncpipe/sinks/bucketstore"
	"github.com/syncpipe/syncpipe/stages"
	"github.com/syncpipe/syncpipe/stages/syncrules"
)

// checksumRules are the P5 rules: one global bucket of large documents
// and, per user, one small bucket per list they own (a parameter query).
const checksumRules = `
bucket_definitions:
  global:
    data:
      - SELECT id, payload FROM docs
  by_list:
    parameters: SELECT id AS list_id FROM lists WHERE owner_id = request.user_id()
    data:
      - SELECT id, list_id, description FROM todos WHERE list_id = bucket.list_id
`

// checksumStreamRules are checksumRules as Sync Streams: the global
// documents by default, a list's todos for a subscription with its id if
// the user owns the list.
const checksumStreamRules = `
config:
  edition: 3
streams:
  global:
    auto_subscribe: true
    query: SELECT id, payload FROM docs
  list:
    query: >-
      SELECT id, list_id, description FROM todos WHERE list_id = subscription.parameter('list_id')
      AND list_id IN (SELECT id FROM lists WHERE owner_id = auth.user_id())
`

// p5Data is the P5 data set written straight into bucket storage through
// a bucketstore Writer (no source database: the scenario measures the read
// side, and the driver's commit time is then exact).
type p5Data struct {
	opt    ChecksumsOptions
	store  *bucketstore.Store
	group  int
	tables map[string]*stages.Builder // eval + op build, as replication does
	w      *bucketstore.Writer
}

func newP5Data(ctx context.Context, store *bucketstore.Store, opt ChecksumsOptions) (*p5Data, error) {
	text := checksumRules
	if opt.Streams {
		text = checksumStreamRules
	}
	g, err := store.Catalog().CreateGroup(ctx, text, "bench_")
	if err != nil {
		return nil, err
	}
	rules, err := syncrules.Parse([]byte(text), syncrules.Options{GroupID: strconv.Itoa(g.ID)})
	if err != nil {
		return nil, fmt.Errorf("parse P5 rules: %w", err)
	}
	d := &p5Data{opt: opt, store: store, group: g.ID, tables: map[string]*stages.Builder{}}
	cols := map[string][]string{"docs": {"id", "payload"}, "lists": {"id", "owner_id"}, "todos": {"id", "list_id", "description"}}
	rel := uint32(100)
	for _, name := range []string{"docs", "lists", "todos"} {
		rel++
		st, err := store.Catalog().RegisterTable(ctx, g.ID, rel, "public", name, []string{"id"})
		if err != nil {
			return nil, err
		}
		if err := store.Catalog().MarkTableSnapshotDone(ctx, st.ID, 0); err != nil {
			return nil, err
		}
		spec, err := stages.NewTableSpec(&st.Table, rules, cols[name], []string{"id"})
		if err != nil {
			return nil, err
		}
		d.tables[name] = stages.NewBuilder(spec)
	}
	if err := store.Catalog().MarkSnapshotDone(ctx, g.ID, 0); err != nil {
		return nil, err
	}
	if d.w, err = store.Writes().NewWriter(ctx, g.ID); err != nil {
		return nil, err
	}
	return d, nil
}

func (d *p5Data) close() { d.w.Close() }

// change evaluates one source row (values in column order, id first).
func (d *p5Data) change(table string, vals ...string) (model.Change, error) {
	b := d.tables[table]
	row := make([]model.Value, len(vals))
	for i, v := range vals {
		row[i] = model.Text(v)
	}
	cs, err := b.Upsert(row, nil)
	if err != nil {
		return model.Change{}, fmt.Errorf("evaluate %s row %s: %w", table, vals[0], err)
	}
	return cs[0], nil
}

// payload is a document's ~RowBytes of text; version makes updates differ.
func (d *p5Data) payload(i, version int) string {
	head := fmt.Sprintf("doc %d version %d ", i, version)
	return head + strings.Repeat("lorem ipsum ", max(d.opt.RowBytes-len(head), 0)/12+1)[:max(d.opt.RowBytes-len(head), 0)]
}

func p5User(u int) string       { return fmt.Sprintf("user-%03d", u) }
func p5List(u, l int) string    { return fmt.Sprintf("list-%03d-%03d", u, l) }
func p5Todo(u, l, t int) string { return fmt.Sprintf("todo-%03d-%03d-%d", u, l, t) }
func p5Doc(i int) string        { return fmt.Sprintf("doc-%06d", i) }
func (d *p5Data) global() string {
	if d.opt.Streams {
		return fmt.Sprintf("%d#global|0[]", d.group)
	}
	return fmt.Sprintf("%d#global[]", d.group)
}

// subscriptions is user u's request streams object: a subscription to
// each of the user's lists (nil without streams).
func (d *p5Data) subscriptions(u int) map[string]any {
	if !d.opt.Streams {
		return nil
	}
	subs := make([]map[string]any, d.opt.ListsPerUser)
	for l := range subs {
		subs[l] = map[string]any{"stream": "list", "parameters": map[string]string{"list_id": p5List(u, l)}}
	}
	return map[string]any{"include_defaults": true, "subscriptions": subs}
}
func (d *p5Data) users() int { return d.opt.Clients }
func (d *p5Data) rowsTotal() int {
	return d.opt.GlobalRows + d.users()*d.opt.ListsPerUser*(1+d.opt.TodosPerList)
}

// load writes the whole data set as snapshot batches, as an initial
// snapshot would, and returns the highest op id.
func (d *p5Data) load(ctx context.Context) (int64, error) {
	var last int64
	var batch []model.Change
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		res, err := d.w.WriteSnapshot(ctx, batch)
		if err != nil {
			return err
		}
		last, batch = max(last, res.MaxOpID), batch[:0]
		return nil
	}
	add := func(table string, vals ...string) error {
		c, err := d.change(table, vals...)
		if err != nil {
			return err
		}
		if batch = append(batch, c); len(batch) == 5000 {
			return flush()
		}
		return nil
	}
	for i := range d.opt.GlobalRows {
		if err := add("docs", p5Doc(i), d.payload(i, 0)); err != nil {
			return 0, err
		}
	}
	for u := range d.users() {
		for l := range d.opt.ListsPerUser {
			if err := add("lists", p5List(u, l), p5User(u)); err != nil {
				return 0, err
			}
			for t := range d.opt.TodosPerList {
				if err := add("todos", p5Todo(u, l, t), p5List(u, l), "todo "+p5Todo(u, l, t)); err != nil {
					return 0, err
				}
			}
		}
	}
	return last, flush()
}

// update writes one tick's small changes as one stream transaction: a new
// version of one document (the global bucket every client has) and of
// todos in `todos` users' lists, and returns the highest op id and the
// buckets it changed.
func (d *p5Data) update(ctx context.Context, tick, todos int) (int64, int, error) {
	doc := (tick * 7919) % d.opt.GlobalRows
	c, err := d.change("docs", p5Doc(doc), d.payload(doc, tick+1))
	if err != nil {
		return 0, 0, err
	}
	cs := []model.Change{c}
	changed := map[string]bool{d.global(): true}
	for k := range todos {
		u, l := (tick*31+k*17)%d.users(), (tick*13+k*7)%d.opt.ListsPerUser
		c, err := d.change("todos", p5Todo(u, l, 0), p5List(u, l), fmt.Sprintf("todo %s, edit %d", p5Todo(u, l, 0), tick))
		if err != nil {
			return 0, 0, err
		}
		cs = append(cs, c)
		for _, p := range c.Puts {
			changed[p.Bucket] = true
		}
	}
	res, err := d.w.WriteChanges(ctx, cs)
	if err != nil {
		return 0, 0, err
	}
	return res.MaxOpID, len(changed), nil
}
