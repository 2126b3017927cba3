package syncrules

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Sync Streams (edition 3, `streams:`) compile to the same bucket model as
// bucket_definitions, the way PowerSync's sync-plan compiler does it:
//
//   - Each stream query becomes a resolver: the source table, its row-only
//     filters, and partitions — the bucket parameters, each a row column on
//     the bucket side and, on the request side, a request value
//     (auth.user_id(), auth.parameter(k), connection.parameter(k),
//     subscription.parameter(k)) or an output of a lookup (a subquery
//     `col IN (SELECT out FROM t WHERE key = <request value>)`, a CTE
//     named there, or a joined table: streams_join.go).
//   - A resolver's bucket is "<group>#<stream>|<n>[<partition values>]",
//     n counting the stream's resolvers. Resolvers of any streams whose row
//     side is the same share one bucket, named after the first of them
//     (streams ordered as JavaScript orders object keys).
//   - Partitions are ordered by a hash of their row expression, not by
//     their place in the query (streamHash).
//   - Lookups are numbered across the file; identical ones are shared. A
//     lookup row is stored under ["lookup","<n>",<key values>…] (keys
//     ordered by hash) as [{"0":<out value>,"1":…}].
//   - At request time, a NULL or missing request value yields no bucket
//     and no lookup (unlike bucket_definitions).
//
// Supported so far: `query` or `queries` (queries of a stream with the
// same request side share a bucket, named after the first), WHERE in any
// AND/OR/NOT shape (expanded to OR-ed variants, numbered as PowerSync
// does) whose factors are row-only predicates, `column = <request
// value>`, `column IN <request value>` (a JSON array: a bucket per
// element), lookups, or conditions on request values alone (checked at
// request time); `with:` CTEs (streams_cte.go) and inner joins of one
// more tables, several lookups in one variant (streams_graph.go). Other
// forms (functions on the partition side, arrays in rows, outer joins)
// are rejected as not supported.

// stream is one entry of streams:.
type stream struct {
	name            string
	ed2             bool // edition 2: NULL request values and defaults as the alpha treats them
	auto            bool // auto_subscribe
	priority        int
	acceptDangerous bool
	resolvers       []*resolver
}

// resolver is one way a stream reaches rows: a bucket and how a request
// fills its parameters.
type resolver struct {
	bucket  *definition
	parts   []partition // in bucket parameter order
	filters []reqFilter // request-only conditions: all must hold
}

// reqFilter is a condition on request values alone, checked at request
// time: the bucket is the request's only where it holds.
type reqFilter struct {
	e      expr
	unauth bool   // reads a value the client chooses, and no authenticated one
	pos    int    // in the query
	text   string // canonical text, for the request side's identity
}

// partition is one bucket parameter's request side: a request value, or
// an output of the variant's lookup whose stored rows give the value.
type partition struct {
	req streamReq
	// also are more request values the column is compared with: all must
	// be equal (to the value, or to the lookup output).
	also   []streamReq
	lookup *lookupUse
	out    int // the lookup output
	// array: the request value is an array (column IN <value>), a bucket
	// per element.
	array bool
	// inter: the column is also compared with an array, or with more
	// values: its values are their intersection (streams_intersect.go).
	inter []member
	hash  uint32 // streamHash of the row expression: the order of parameters
	col   string // row column (or, with expr, a key naming the expression)
	// expr is the row side when it is more than the column col; each: the
	// request value is an element of it, a JSON array (streams_rowexpr.go).
	expr node
	each bool
	pos  int // of the factor in the query, for the row-side filter
	// ands are lookup outputs the column also equals (streams_graph.go).
	ands []lookupRef
}

// reqSource is where a stream request value comes from.
type reqSource uint8

const (
	srcAuthUserID reqSource = iota // auth.user_id()
	srcAuthParam                   // auth.parameter(k): a JWT claim
	srcConnParam                   // connection.parameter(k): the client's parameters
	srcSubParam                    // subscription.parameter(k)
	srcAuthParams                  // auth.parameters(): the JWT payload as JSON
	srcConnParams                  // connection.parameters()
	srcSubParams                   // subscription.parameters()
)

// streamReq is a request value a partition or lookup is keyed by.
type streamReq struct {
	src reqSource
	key string
}

// String is the request value as written in a query.
func (r streamReq) String() string {
	switch r.src {
	case srcAuthUserID:
		return "auth.user_id()"
	case srcAuthParam:
		return "auth.parameter(" + strconv.Quote(r.key) + ")"
	case srcConnParam:
		return "connection.parameter(" + strconv.Quote(r.key) + ")"
	case srcAuthParams:
		return "auth.parameters()"
	case srcConnParams:
		return "connection.parameters()"
	case srcSubParams:
		return "subscription.parameters()"
	}
	return "subscription.parameter(" + strconv.Quote(r.key) + ")"
}

// unauth reports a value the client chooses freely.
func (r streamReq) unauth() bool {
	return r.src == srcConnParam || r.src == srcSubParam || r.src == srcConnParams || r.src == srcSubParams
}

// streamCompiler holds what is shared across the streams of a file.
type streamCompiler struct {
	ld      *loader
	buckets map[string]*definition // by row-side identity
	lookups map[string]*streamLookup
	used    []*streamLookup // by the stream being compiled, in the order its subqueries are met
	ctes    []*cte          // every CTE of the file, in YAML order
	ed2     bool            // edition 2: the alpha's own engine (streams_ed2.go)
}

// loadStreams compiles the streams: mapping (edition 3), with the
// top-level CTEs (with: mapping; nil for none).
func (ld *loader) loadStreams(v, with *yaml.Node) {
	if v.Kind != yaml.MappingNode {
		ld.errAt(v, "", "", "streams", "streams must be a mapping of stream names to streams")
		return
	}
	sc := &streamCompiler{ld: ld, buckets: map[string]*definition{}, lookups: map[string]*streamLookup{}}
	global := cteScope{}
	if with != nil {
		global = sc.loadCTEs(with, "", nil)
	}
	type entry struct{ k, v *yaml.Node }
	var entries []entry
	for i := 0; i+1 < len(v.Content); i += 2 {
		entries = append(entries, entry{v.Content[i], v.Content[i+1]})
	}
	// PowerSync names a shared bucket after the first stream in
	// JavaScript's object key order: integer-like names first, ascending.
	slices.SortStableFunc(entries, func(a, b entry) int {
		ai, aok := arrayIndexKey(a.k.Value)
		bi, bok := arrayIndexKey(b.k.Value)
		switch {
		case aok && bok:
			return int(ai) - int(bi)
		case aok:
			return -1
		case bok:
			return 1
		}
		return 0
	})
	uses := map[*yaml.Node][]*streamLookup{}
	for _, e := range entries {
		sc.used = nil
		if s := sc.stream(e.k, e.v, global); s != nil {
			ld.rules.streams = append(ld.rules.streams, s)
		}
		uses[e.k] = sc.used
	}
	sc.unusedCTEs()
	// Lookups are numbered as PowerSync creates them: streams in the
	// file's order (not the key order above), subqueries in the order met.
	for i := 0; i+1 < len(v.Content); i += 2 {
		for _, lk := range uses[v.Content[i]] {
			if !slices.Contains(ld.rules.lookups, lk) {
				lk.index = len(ld.rules.lookups)
				ld.rules.lookups = append(ld.rules.lookups, lk)
			}
		}
	}
	seen := map[*definition]bool{}
	for _, s := range ld.rules.streams {
		for _, r := range s.resolvers {
			if !seen[r.bucket] {
				seen[r.bucket] = true
				ld.rules.streamDefs = append(ld.rules.streamDefs, r.bucket)
			}
		}
	}
}

// arrayIndexKey reports whether name is a canonical array index, which
// JavaScript orders before other object keys.
func arrayIndexKey(name string) (int64, bool) {
	n, err := strconv.ParseInt(name, 10, 64)
	if err != nil || n < 0 || n > 1<<32-2 || strconv.FormatInt(n, 10) != name {
		return 0, false
	}
	return n, true
}

// stream compiles one stream entry; global are the top-level CTEs.
func (sc *streamCompiler) stream(k, v *yaml.Node, global cteScope) *stream {
	ld := sc.ld
	s := &stream{name: k.Value, priority: 3, ed2: sc.ed2}
	if v.Kind != yaml.MappingNode {
		ld.errAt(v, s.name, "", "", "a stream must be a mapping with a query")
		return nil
	}
	var query, queries, with *yaml.Node
	for i := 0; i+1 < len(v.Content); i += 2 {
		key, val := v.Content[i], v.Content[i+1]
		switch key.Value {
		case "query":
			query = val
		case "queries":
			queries = val
		case "with":
			with = val
		case "auto_subscribe":
			s.auto = ld.boolean(val, s.name, key.Value)
		case "priority":
			if p, ok := ld.priority(val, s.name, "Invalid priority, expected a number between 0 and 3 (inclusive)."); ok {
				s.priority = p
			}
		case "accept_potentially_dangerous_queries":
			s.acceptDangerous = ld.boolean(val, s.name, key.Value)
		}
		// Other keys: PowerSync's schema allows any in a stream.
	}
	if sc.ed2 {
		// The alpha reads a stream's priority (and refuses a bad one)
		// but never gives it to its buckets.
		s.priority = 3
		if sc.refuseEd2(s, query, queries, with) {
			return nil
		}
		with = nil
	}
	ctes := global
	if with != nil {
		ctes = sc.loadCTEs(with, s.name, global)
	}
	if (query == nil) == (queries == nil) {
		ld.errAt(v, s.name, "", "", "One of `queries` or `query` must be given.")
		return nil
	}
	nodes, labels := []*yaml.Node{query}, []string{"query"}
	if queries != nil {
		if queries.Kind != yaml.SequenceNode {
			ld.errAt(queries, s.name, "queries", "", "queries must be a list of queries")
			return nil
		}
		nodes, labels = queries.Content, nil
		for i := range nodes {
			labels = append(labels, fmt.Sprintf("queries[%d]", i))
		}
	}
	var pend []*pending
	var bases []*queryBase
	ok := true
	for i, n := range nodes {
		if n.Kind != yaml.ScalarNode || n.Tag == "!!null" || strings.TrimSpace(n.Value) == "" {
			ld.errAt(n, s.name, labels[i], "", "Expected a scalar value here.")
			ok = false
			continue
		}
		base := &queryBase{def: &definition{name: s.name, priority: s.priority}, label: labels[i], sql: n.Value, loc: locOf(n, ld.src)}
		ps, errs := sc.pendings(s, base, ctes, len(pend))
		sc.report(base, errs)
		bases = append(bases, base)
		if len(errs) > 0 {
			ok = false
			continue
		}
		pend = append(pend, ps...)
	}
	if ok {
		s.resolvers = sc.merge(s, pend)
	}
	if sc.ed2 && s.auto && query != nil && usesSubParams(query.Value) && len(bases) > 0 {
		sc.warn(bases[0], []*sqlError{{pos: 0, msg: autoSubParamWarning}})
	}
	for _, b := range bases {
		sc.warn(b, b.warns)
	}
	if s.resolvers == nil {
		return nil
	}
	return s
}

// pending is a compiled stream query before the stream's resolvers are
// merged and their buckets made.
type pending struct {
	name    string // "<stream>|<n>": the bucket's name if this query creates it
	base    *queryBase
	stmt    *selectStmt // the query with its WHERE as the bucket side checks it
	parts   []partition // in bucket parameter order
	filters []reqFilter
	inst    string // the request side: queries with the same one share a bucket
	rowID   string // the row side, for buckets shared across streams
	warn    *sqlError
}

// merge makes the stream's resolvers: queries with the same request side
// share one bucket (named after the first of them), and a bucket with the
// same row side as another stream's is that stream's.
func (sc *streamCompiler) merge(s *stream, pend []*pending) []*resolver {
	if sc.ed2 {
		// Every edition-2 variant has a bucket of its own.
		var out []*resolver
		for _, p := range pend {
			def := sc.bucket([]*pending{p})
			if def == nil {
				return nil
			}
			if len(out) == 0 {
				// The alpha checks the query's identifiers once.
				sc.ld.queryWarnings(&def.data[0].queryBase)
			}
			out = append(out, &resolver{bucket: def, parts: p.parts, filters: p.filters})
		}
		return out
	}
	var groups [][]*pending
	for _, p := range pend {
		i := slices.IndexFunc(groups, func(g []*pending) bool { return g[0].inst == p.inst })
		if i < 0 {
			groups = append(groups, []*pending{p})
			continue
		}
		groups[i] = append(groups[i], p)
	}
	var out []*resolver
	for _, g := range groups {
		// PowerSync checks a merged resolver once for unauthenticated
		// parameters, and reports it at its first query.
		if w := g[0].warn; w != nil {
			g[0].base.warns = append(g[0].base.warns, w)
		}
		ids := make([]string, len(g))
		for i, p := range g {
			ids[i] = p.rowID
		}
		slices.Sort(ids)
		ids = slices.Compact(ids) // a query (or variant) given twice is the same row side
		id := strings.Join(ids, "\x02")
		def, ok := sc.buckets[id]
		if !ok {
			if def = sc.bucket(g); def == nil {
				return nil
			}
			sc.buckets[id] = def
		}
		out = append(out, &resolver{bucket: def, parts: g[0].parts, filters: g[0].filters})
	}
	return out
}

// bucket compiles the bucket side of a group of queries: a definition
// with a data query per query, its parameters the partitions.
func (sc *streamCompiler) bucket(g []*pending) *definition {
	first := g[0]
	names := make([]string, len(first.parts))
	for i := range names {
		names[i] = "p" + strconv.Itoa(i)
	}
	// The alpha compiles a stream's data query as a bucket definition's:
	// a row array is read with JSON.parse and the id column is required.
	def := &definition{name: first.name, priority: first.base.def.priority, stream: !sc.ed2, alpha: sc.ed2, bucketParams: names, hasParams: len(names) > 0,
		fixedJSON: sc.ld.rules.compat.FixedJSONExtract}
	def.prefix = def.name
	if gid := sc.ld.opts.GroupID; gid != "" {
		def.prefix = gid + "#" + def.name
	}
	def.globalID = def.prefix + "[]"
	seen := map[string]bool{}
	for _, p := range g {
		if seen[p.rowID] {
			continue // the same row side twice: PowerSync's evaluators are a set
		}
		seen[p.rowID] = true
		q := &dataQuery{queryBase: queryBase{def: def, label: p.base.label, sql: p.base.sql, loc: p.base.loc}}
		if errs := compileDataStmt(def, q, p.stmt, sc.ld.opts.defaultSchema()); len(errs) > 0 {
			sc.ld.sqlErrors(p.base, errs)
			return nil
		}
		def.data = append(def.data, q)
	}
	return def
}
