package syncrules

import (
	"fmt"
	"math/rand/v2"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// The case generator of TestReferenceStreams: random Sync Streams rules
// (edition 3) within the subset syncpipe compiles (streams.go), rows for
// their tables and sync requests with streams objects. It is seeded like
// generateCases (reference_gen_test.go): a seed always yields the same
// cases (for the same skip list).
//
// What it draws:
//   - 1–3 streams of distinct names (integer-like ones too, which
//     JavaScript orders first), each with `query` or `queries` (1–3),
//     `auto_subscribe`, `priority` and `accept_potentially_dangerous_queries`
//     present or not; a query is sometimes repeated by another stream, so
//     buckets are shared;
//   - queries `SELECT *` or a column list with aliases from one table,
//     optionally aliased, or from it joined to a parameter table (`JOIN …
//     ON` or a comma join: the lookup a subquery would be, AND-ed with the
//     WHERE), WHERE absent or an AND/OR/NOT tree (NOT only above row and
//     request conditions, never directly above another NOT) of factors:
//     row-only predicates (column <op> literal, IS [NOT] NULL, column =
//     column), `column = <request value>` (either side), `column IN
//     <request value>` (an array claim or parameter), `column IN (SELECT c
//     FROM t WHERE k = <request value> [AND a filter])` (at most one per
//     OR-ed term, its column compared with nothing else there; sometimes a
//     CTE, `column IN cte` or `column IN (SELECT c FROM cte [x])`, in the
//     top-level or the stream's with:) and conditions on request values
//     alone; an unused CTE now and then;
//   - tables of 3–6 columns (id TEXT, duplicates included), values TEXT,
//     INTEGER, REAL (integral ones too) and NULL from a small pool so that
//     rows and requests meet and partitions collide; parameter-table rows
//     for the subqueries;
//   - requests: always a `sub` claim (syncpipe's API refuses a token
//     without one), some of the claims and connection parameters the
//     queries read (strings, numbers, booleans, arrays, objects, null,
//     missing), and a streams object or none: include_defaults
//     true/false/absent, 0–3 subscriptions to the case's streams or an
//     unknown one, parameters with the keys read or others or null,
//     override_priority null or 0–3.
//
// Every fourth case is edition 2 (streams_ed2.go), drawn without
// subqueries, joins, CTEs or `queries`, which syncpipe refuses there.
//
// Not drawn (outside the subset): functions on a partition's
// column side, `<value> IN column`, joins on two columns or chains of
// them, a join and a subquery in one term, several streams of one name,
// requests without sub. (streams.jsonl's hand-made cases cover joins on
// several columns and CTEs of several columns.) NOT (NOT (NOT x)) is not drawn either:
// the reference compiler crashes on it ("DNF transformation did not have
// inner type as base").

// knownDiff is a difference between syncpipe and the reference compiler
// found by this generator, inside the subset: the generator leaves out the
// shape that shows it while it is in the skip list (streamKnownDiffs).
type knownDiff uint

const (
	// diffNotEqual (fixed: syncpipe now reads a stream's `!=` as NOT (a =
	// b) too, so it is out of the skip list; its filter stays for
	// bisecting): PowerSync reads `a != b` as NOT (a = b), which holds
	// when a or b is NULL (its NOT is "not true"); syncpipe's `!=` was
	// SQL's, NULL there. Rows with a NULL column and requests with a
	// missing claim differ (`WHERE team != 't1'`, `WHERE
	// auth.parameter('role') != 'admin'`), and `a != b` does not share a
	// bucket with NOT (a = b). Skipped: `!=` in row predicates and request
	// conditions on values that may be missing.
	diffNotEqual knownDiff = 1 << iota
	// diffNegationSpelling (fixed: dnf spells NOT (x IS NULL) as x IS NOT
	// NULL, as != is NOT (=); the filter stays for bisecting): PowerSync
	// normalizes negations before it compares request sides and row
	// sides — NOT (x IS NULL) is x IS NOT NULL, a != b is NOT (a = b) —
	// so two spellings of one condition in two queries of a stream
	// (`auth.user_id() != 'u1'`, `NOT (auth.user_id() = 'u1')`) share a
	// bucket there (and draw one warning, see diffMergedWarning); syncpipe
	// compared their text and made two. Skipped: IS [NOT] NULL, != and auth.user_id() conditions
	// under a NOT.
	diffNegationSpelling
	// diffFactorOrder (fixed: dnf orders factors as PowerSync's
	// prepareToDNF and row sides keep their order; the filter stays for
	// bisecting): PowerSync's request side (the request conditions
	// of a variant) and row side (its row conditions) are its conditions
	// in its order, which puts the factors an AND gets from its ORs before
	// its own (a AND (b OR c) gives b AND a, c AND a); syncpipe keeps them
	// left to right (a AND b) and sorts row conditions. So variants merge
	// or share buckets differently: `r = 1 AND (r = 'u' OR n = id) AND
	// (team = NULL OR r = 'u')` merges two variants in syncpipe only, and
	// `a = 1 AND b = 2` in one stream shares `b = 2 AND a = 1`'s bucket
	// in syncpipe only. Skipped: cases where the two orders make
	// different variants alike (orderAgrees).
	diffFactorOrder
	// diffArrayAndValue (fixed: syncpipe computes the intersection too,
	// streams_intersect.go; its filter stays for bisecting): a column
	// compared with a request array and with another value in one OR-ed
	// term (`c IN auth.parameter('a') AND c = auth.user_id()`, or the same
	// array twice) compiled in PowerSync and was refused by syncpipe.
	// Skipped: such terms (diffMissingValue's filter leaves them out too).
	diffArrayAndValue
	// diffDuplicateVariant (fixed: syncpipe drops the duplicate too, so it
	// is out of the skip list; its filter stays for bisecting): syncpipe
	// merged the variants of a stream with the same request side into one
	// bucket whose row side was the list of theirs, duplicates kept, so two identical variants (a query listed
	// twice in queries, or an OR giving one term twice, as NOT ((a AND b
	// AND b) OR c) does) make a bucket of their own instead of sharing
	// the one of the same single variant elsewhere (another stream, or
	// another variant of the stream); PowerSync drops the duplicate.
	// Skipped: a query repeated within one stream, a term repeated within
	// one WHERE.
	diffDuplicateVariant
	// diffBoolEquals (fixed: a boolean equals only a boolean; the filter
	// stays for bisecting): a column compared with two request values in
	// one term is one partition that needs them equal; syncpipe took a
	// boolean claim for 1/0 there (true equals 1), PowerSync compares the
	// JSON values (true differs from 1, false from 0). Skipped: a column
	// compared with two request values in one term.
	diffBoolEquals
	// diffMergedWarning (fixed; the filter stays for bisecting): PowerSync
	// warns about unauthenticated parameters once per merged resolver
	// (queries of a stream with the same request side share one), at the
	// first query; syncpipe warned for each query.
	// Skipped: two queries of a stream without
	// accept_potentially_dangerous_queries: true that may both warn.
	diffMergedWarning
	// diffMissingValue (fixed: syncpipe now follows PowerSync's stages —
	// every array expanded first, an error in any reported, a NULL or
	// empty one stopping the term; then the lookup queried even when a
	// scalar value is NULL — so it is out of the skip list; its filter
	// stays for bisecting): syncpipe stopped at a variant's first NULL,
	// missing or empty partition value, so with several partitions in one
	// term a lookup was not queried (PowerSync queries it) and a request
	// value that is not an array was not reported as a stream error
	// (PowerSync reports it). Skipped: terms with an array or subquery
	// partition and another partition.
	diffMissingValue
	// diffSubqueryVariantOrder (fixed: syncpipe now counts a lookup's key
	// conditions and filter as factors of the term, as PowerSync's join
	// does, so it is out of the skip list; its filter stays for
	// bisecting): PowerSync numbers a term that is a subquery alone (a
	// join plus its condition) among the terms of several factors, before
	// single partitions; syncpipe numbered it as a single partition, so
	// the buckets of `a IN arr OR b IN (SELECT ...)` or `b IN (SELECT ...)
	// OR (x = 1 AND c = auth.user_id())` were numbered differently.
	// Skipped: a lone-subquery term among others.
	diffSubqueryVariantOrder
	// diffLookupOrder (fixed; the filter stays for bisecting): PowerSync
	// numbers lookups in the file's order of streams; syncpipe numbered
	// them in JavaScript's key order (integer-like names first), so a file with stream `a` then `'7'` numbers their lookups
	// differently. Skipped: rules with subqueries list integer-like stream
	// names first, in ascending order.
	diffLookupOrder
	// diffEd2RowArrayErrors: in edition 2 the alpha checks a variant's
	// row conditions, then its partitions in order, and stops at the
	// first that fails, so `<request value> IN <column>` on a row whose
	// column is not a JSON array is an error only when everything before
	// it held; syncpipe's bucket side reports it whatever the other
	// conditions give (more errors). Skipped: `<request value> IN
	// <column>` in edition-2 cases.
	diffEd2RowArrayErrors
	// diffWarningLine: with two or more lookups in one OR-ed term (a join
	// and a subquery, two subqueries) that read unauthenticated values,
	// one of them in a top-level CTE, PowerSync's unauthenticated-parameter
	// warning sometimes names the CTE's line where syncpipe names the
	// query's (its querier graph decides; neither "first in the file" nor
	// "first in bucket-parameter order" reproduces it). The buckets,
	// lookups and data agree; only validate's warning line differs.
	// Example (streams seed 22 #6): `with: {cte0: SELECT id FROM teams
	// WHERE team = subscription.parameter('id')}` and `SELECT it.* FROM
	// docs it JOIN teams m ON it.team = m.owner AND m.owner =
	// subscription.parameter('id') WHERE NOT connection.parameter('on') OR
	// it.team IN (SELECT id FROM cte0)`: PowerSync warns at the CTE.
	// Skipped: such a query in a stream that does not accept dangerous
	// queries.
	diffWarningLine
)

// knownDiffs is a set of knownDiff.
type knownDiffs knownDiff

func (k knownDiffs) has(d knownDiff) bool { return knownDiff(k)&d != 0 }

// streamKnownDiffs is the skip list of the default run: remove a
// difference once syncpipe answers like the reference for its shape
// (check with -reference.streamsall, which generates them all).
const streamKnownDiffs = knownDiffs(diffEd2RowArrayErrors | diffWarningLine)

// streamGenFamilies name what a case stresses; the name of a generated case
// ends with its family.
var streamGenFamilies = []string{"global", "partition", "array", "subquery", "reqfilter", "or", "multi"}

// generateStreamCases generates n stream cases from seed, leaving out the
// shapes of the known differences in skip.
func generateStreamCases(seed uint64, n int, skip knownDiffs) []refCase {
	s := &sgen{gen: &gen{r: rand.New(rand.NewPCG(seed, 0x57e4a45))}, skip: skip}
	out := make([]refCase, 0, n)
	for i := 0; i < n; i++ {
		fam := streamGenFamilies[i%len(streamGenFamilies)]
		// Every fourth case is edition 2 (streams_ed2.go).
		s.ed2 = i%4 == 3
		c := s.streamCase(fam)
		c.Name = fmt.Sprintf("streams seed %d #%d %s", seed, i, fam)
		if s.ed2 {
			c.Name += " edition 2"
		}
		out = append(out, c)
	}
	return out
}

// sgen is the stream generator's state; the fields after skip are the
// current case's.
type sgen struct {
	*gen
	skip   knownDiffs
	ed2    bool // an edition-2 case: no subqueries, joins, CTEs or queries lists
	fam    string
	w      factorWeights
	tables map[string][]string // the case's tables: columns, id first
	used   map[string]bool     // request keys read: "auth:k", "conn:k", "sub:k"
	names  []string            // stream names
	// CTEs: the top-level ones by name, every one's name by its SQL, and
	// the stream-level ones of the query being drawn.
	globals, cteNames, qctes map[string]string
}

// sfKind is the kind of a WHERE factor.
type sfKind uint8

const (
	sfRow sfKind = iota // row-only predicate
	sfEq                // column = <request value>
	sfArr               // column IN <request value>
	sfSub               // column IN (subquery)
	sfReq               // request-only condition
)

// sfactor is one factor of a generated WHERE.
type sfactor struct {
	sql    string
	kind   sfKind
	col    string // the row column of a partition
	bare   bool   // a bare call: NOT needs no parentheses
	auth   bool   // reads auth.*
	unauth bool   // reads connection.* or subscription.*
	key    string // identity: the same for factors that PowerSync compiles alike
	each   bool   // <request value> IN <column> (streams_gen_rowexpr_test.go)
}

func (f *sfactor) partition() bool { return f.kind == sfEq || f.kind == sfArr || f.kind == sfSub }

// snode is a node of a generated WHERE: a factor or AND/OR/NOT.
type snode struct {
	op   string
	kids []*snode
	f    *sfactor
}

// squery is a generated query and the OR-ed terms of its WHERE.
type squery struct {
	sql   string
	ctes  map[string]string // stream-level CTEs it names, by name
	side  string            // table, output name and columns
	terms [][]*sfactor      // as syncpipe orders them (sdnf)
	ps    [][]*sfactor      // as PowerSync orders them (psdnf)
}

// variants are the identities of the query's OR-ed terms.
func (q squery) variants() []string {
	if len(q.terms) == 0 {
		return []string{q.side}
	}
	out := make([]string, len(q.terms))
	for i, t := range q.terms {
		out[i] = q.side + "\x01" + termID(t)
	}
	return out
}

// mayWarn reports whether a term of q may draw the unauthenticated
// parameter warning: no partition reads auth.*, and a factor reads a value
// the client chooses.
func (q squery) mayWarn() bool {
	for _, t := range q.terms {
		auth := slices.ContainsFunc(t, func(f *sfactor) bool { return f.partition() && f.auth })
		if !auth && slices.ContainsFunc(t, func(f *sfactor) bool { return f.unauth }) {
			return true
		}
	}
	return false
}

// multiLookup reports whether a term of q has two or more lookups (a
// join's and a subquery's, or two subqueries).
func (q squery) multiLookup() bool {
	for _, t := range q.terms {
		n := 0
		for _, f := range t {
			if f.kind == sfSub {
				n++
			}
		}
		if n > 1 {
			return true
		}
	}
	return false
}

func (q squery) hasSubquery() bool {
	for _, t := range q.terms {
		if slices.ContainsFunc(t, func(f *sfactor) bool { return f.kind == sfSub }) {
			return true
		}
	}
	return false
}

// factorWeights are a family's odds of each factor kind.
type factorWeights [5]int

var familyWeights = map[string]factorWeights{
	"global":    {10, 0, 0, 0, 0},
	"partition": {3, 8, 0, 0, 1},
	"array":     {3, 3, 7, 0, 1},
	"subquery":  {3, 3, 1, 6, 1},
	"reqfilter": {3, 3, 1, 1, 7},
	"or":        {5, 5, 2, 2, 4},
	"multi":     {4, 5, 2, 2, 2},
}

// Source tables (the queries' FROM) and parameter tables (subqueries').
var (
	streamTables = map[string][]string{
		"items": {"owner", "team", "list_id", "status", "score"},
		"docs":  {"owner", "team", "kind", "n", "note"},
	}
	paramTables = map[string][]string{
		"members": {"user_id", "team", "list_id", "role"},
		"teams":   {"code", "team", "owner"},
	}
	streamNames = []string{"lists", "my_items", "team_docs", "a", "b", "by_id", "7", "0", "12"}
)

// sstream is a generated stream.
type sstream struct {
	name    string
	opts    []string // option lines
	accept  bool     // accept_potentially_dangerous_queries: true
	queries []squery
	list    bool // queries: rather than query:
}

// streamCase draws one case of family fam.
func (s *sgen) streamCase(fam string) refCase {
	s.fam, s.w = fam, familyWeights[fam]
	if s.ed2 {
		s.w[sfSub] = 0 // no subqueries, hence no joins or CTEs either
	}
	for {
		s.tables = map[string][]string{}
		s.used = map[string]bool{}
		s.globals, s.cteNames = map[string]string{}, map[string]string{}
		streams := s.streams()
		if s.skip.has(diffFactorOrder) && !orderAgrees(streams) {
			continue
		}
		return s.caseOf(streams)
	}
}

// streams draws the streams of a case.
func (s *sgen) streams() []*sstream {
	fam := s.fam
	nStreams := 1
	switch {
	case fam == "multi":
		nStreams = 2 + s.r.IntN(2)
	case s.chance(0.3):
		nStreams = 2
	}
	names := slices.Clone(streamNames)
	s.r.Shuffle(len(names), func(i, j int) { names[i], names[j] = names[j], names[i] })
	s.names = names[:nStreams]
	var streams []*sstream
	var all []squery // every query so far, for sharing
	subs := false
	for _, name := range s.names {
		st := &sstream{name: name}
		s.streamOptions(st)
		nq := 1
		if !s.ed2 && (fam == "multi" || s.chance(0.25)) {
			nq = 1 + s.r.IntN(3)
		}
		st.list = !s.ed2 && (nq > 1 || s.chance(0.15))
		for len(st.queries) < nq {
			var q squery
			if len(all) > 0 && s.chance(0.2) {
				q = all[s.r.IntN(len(all))]
			} else {
				q = s.query()
			}
			if s.skip.has(diffDuplicateVariant) && slices.ContainsFunc(st.queries, func(o squery) bool {
				return slices.ContainsFunc(o.variants(), func(v string) bool { return slices.Contains(q.variants(), v) })
			}) {
				continue
			}
			if s.skip.has(diffMergedWarning) && !st.accept && q.mayWarn() && slices.ContainsFunc(st.queries, squery.mayWarn) {
				continue
			}
			if s.skip.has(diffWarningLine) && !st.accept && q.mayWarn() && q.multiLookup() {
				continue
			}
			st.queries = append(st.queries, q)
			subs = subs || q.hasSubquery()
		}
		all = append(all, st.queries...)
		streams = append(streams, st)
	}
	if subs && s.skip.has(diffLookupOrder) {
		// YAML order = JavaScript's key order.
		slices.SortStableFunc(streams, func(a, b *sstream) int {
			ai, aok := arrayIndexKey(a.name)
			bi, bok := arrayIndexKey(b.name)
			switch {
			case aok && bok:
				return int(ai - bi)
			case aok:
				return -1
			case bok:
				return 1
			}
			return 0
		})
	}
	return streams
}

// caseOf renders the streams and draws rows and requests.
func (s *sgen) caseOf(streams []*sstream) refCase {
	var b strings.Builder
	if s.ed2 {
		b.WriteString("config:\n  edition: 2\n")
	} else {
		b.WriteString("config:\n  edition: 3\n")
	}
	if !s.ed2 && s.chance(0.1) {
		s.globals["unused_"+s.pick("a", "b")] = "SELECT " + s.pick("code FROM teams", "role FROM members WHERE user_id = auth.user_id()")
	}
	if len(s.globals) > 0 {
		b.WriteString("with:\n")
		writeCTEs(&b, "  ", s.globals)
	}
	b.WriteString("streams:\n")
	for _, st := range streams {
		s.renderStream(&b, st)
	}
	c := refCase{Rules: b.String()}
	tabs := make([]string, 0, len(s.tables))
	for t := range s.tables {
		tabs = append(tabs, t)
	}
	slices.Sort(tabs)
	for _, t := range tabs {
		for range 3 + s.r.IntN(4) {
			c.Rows = append(c.Rows, s.row(t))
		}
	}
	s.r.Shuffle(len(c.Rows), func(i, j int) { c.Rows[i], c.Rows[j] = c.Rows[j], c.Rows[i] })
	for range 4 + s.r.IntN(3) {
		c.Requests = append(c.Requests, s.request())
	}
	return c
}

// orderAgrees reports whether syncpipe and PowerSync see the same variants
// alike: within a stream, variants with the same partitions have the same
// request side in both (PowerSync's is its request conditions in its
// order, syncpipe's in its own); across the case, variants with the same
// table, columns and partition columns have the same row side in both
// (PowerSync's is its row conditions in its order, syncpipe's the set).
func orderAgrees(streams []*sstream) bool {
	type variant struct {
		stream                                    int
		parts, rowKey, rowSP, rowPS, reqSP, reqPS string
	}
	keys := func(t []*sfactor, kind sfKind, sorted bool) string {
		var ks []string
		for _, f := range t {
			if f.kind == kind || kind == sfEq && f.partition() {
				ks = append(ks, f.key)
			}
		}
		if sorted {
			slices.Sort(ks)
		}
		return strings.Join(ks, "\x00")
	}
	var vs []variant
	for i, st := range streams {
		for _, q := range st.queries {
			if len(q.terms) == 0 {
				vs = append(vs, variant{stream: i, rowKey: q.side})
				continue
			}
			ps := map[string][]*sfactor{}
			for _, t := range q.ps {
				ps[termID(t)] = t
			}
			for _, t := range q.terms {
				p := ps[termID(t)]
				var cols []string
				for _, f := range t {
					if f.partition() {
						cols = append(cols, f.col)
					}
				}
				slices.Sort(cols)
				vs = append(vs, variant{stream: i, parts: keys(t, sfEq, true), rowKey: q.side + "\x01" + strings.Join(cols, ","),
					rowSP: keys(t, sfRow, true), rowPS: keys(p, sfRow, false), reqSP: keys(t, sfReq, false), reqPS: keys(p, sfReq, false)})
			}
		}
	}
	for i, a := range vs {
		for _, b := range vs[i+1:] {
			if a.stream == b.stream && a.parts == b.parts && (a.reqSP == b.reqSP) != (a.reqPS == b.reqPS) {
				return false
			}
			if a.rowKey == b.rowKey && (a.rowSP == b.rowSP) != (a.rowPS == b.rowPS) {
				return false
			}
		}
	}
	return true
}

// streamOptions draws a stream's options but its query.
func (s *sgen) streamOptions(st *sstream) {
	if s.chance(0.6) {
		st.opts = append(st.opts, "    auto_subscribe: "+s.pick("true", "true", "false")+"\n")
	}
	if s.chance(0.4) {
		st.opts = append(st.opts, "    priority: "+s.pick("0", "1", "2", "3")+"\n")
	}
	if s.chance(0.35) {
		v := s.pick("true", "true", "false")
		st.accept = v == "true"
		st.opts = append(st.opts, "    accept_potentially_dangerous_queries: "+v+"\n")
	}
}

// renderStream writes one stream entry, its keys in random order.
func (s *sgen) renderStream(b *strings.Builder, st *sstream) {
	if _, ok := arrayIndexKey(st.name); ok {
		fmt.Fprintf(b, "  %s:\n", s.pick("'"+st.name+"'", `"`+st.name+`"`))
	} else {
		fmt.Fprintf(b, "  %s:\n", st.name)
	}
	q := ""
	if st.list {
		q = "    queries:\n"
		for _, x := range st.queries {
			q += "      - " + yamlQuery(x.sql) + "\n"
		}
	} else {
		q = "    query: " + yamlQuery(st.queries[0].sql) + "\n"
	}
	lines := append(slices.Clone(st.opts), q)
	local := map[string]string{}
	for _, x := range st.queries {
		for k, v := range x.ctes {
			local[k] = v
		}
	}
	if s.chance(0.05) {
		local["unused_local"] = "SELECT team FROM teams"
	}
	if len(local) > 0 {
		var w strings.Builder
		w.WriteString("    with:\n")
		writeCTEs(&w, "      ", local)
		lines = append(lines, w.String())
	}
	s.r.Shuffle(len(lines), func(i, j int) { lines[i], lines[j] = lines[j], lines[i] })
	for _, l := range lines {
		b.WriteString(l)
	}
}

// writeCTEs writes a with: mapping's entries, sorted by name.
func writeCTEs(b *strings.Builder, indent string, ctes map[string]string) {
	names := make([]string, 0, len(ctes))
	for k := range ctes {
		names = append(names, k)
	}
	slices.Sort(names)
	for _, k := range names {
		b.WriteString(indent + k + ": " + yamlQuery(ctes[k]) + "\n")
	}
}

// useTable adds a table to the case, with id and 2–5 of its columns.
func (s *sgen) useTable(name string, pool map[string][]string) []string {
	if cols, ok := s.tables[name]; ok {
		return cols
	}
	all := pool[name]
	n := 2 + s.r.IntN(len(all)-1)
	idx := s.r.Perm(len(all))[:n]
	slices.Sort(idx)
	cols := []string{"id"}
	for _, i := range idx {
		cols = append(cols, all[i])
	}
	s.tables[name] = cols
	return cols
}

// query draws one stream query.
func (s *sgen) query() squery {
	s.qctes = map[string]string{}
	table := s.pick("items", "docs")
	cols := s.useTable(table, streamTables)
	alias := ""
	if s.chance(0.2) {
		alias = s.pick("t", "x", "it")
	}
	join := s.w[sfSub] > 0 && s.chance(0.3)
	if join {
		alias = s.pick("t", "x", "it")
	}
	ref := func(c string) string {
		switch {
		case join:
			return alias + "." + c
		case alias != "" && s.chance(0.5):
			return alias + "." + c
		case alias == "" && s.chance(0.15):
			return table + "." + c
		}
		return c
	}
	sel, side := "*", "*"
	if join {
		sel = alias + ".*"
	}
	if s.chance(0.5) {
		parts := []string{ref("id")}
		for _, c := range cols[1:] {
			if !s.chance(0.6) {
				continue
			}
			if s.chance(0.35) {
				parts = append(parts, ref(c)+" AS "+s.pick("v_"+c, "x"+c, c+"2"))
			} else {
				parts = append(parts, ref(c))
			}
		}
		s.r.Shuffle(len(parts), func(i, j int) { parts[i], parts[j] = parts[j], parts[i] })
		sel, side = strings.Join(parts, ", "), unqualified(strings.Join(parts, ", "))
	}
	q := squery{sql: "SELECT " + sel + " FROM " + table, side: table + " " + alias + " " + side, ctes: s.qctes}
	if alias != "" {
		q.sql += s.pick(" AS ", " ") + alias
	}
	if join {
		return s.joinQuery(q, cols, ref)
	}
	if s.fam == "global" && s.chance(0.3) {
		return q
	}
	w, n, terms := s.whereClause(cols, ref, nil)
	q.sql += " WHERE " + w
	q.terms = terms
	q.ps = psTerms(psdnf(n, false))
	return q
}

// joinQuery makes q a join of its table to a parameter table: the lookup
// `col IN (SELECT out FROM p WHERE key = <value>)` would be, written as
// `JOIN p m ON …` or `, p m WHERE …` (now and then keyed by a third
// table n: a chain), AND-ed with a WHERE (with subqueries now and then).
func (s *sgen) joinQuery(q squery, cols []string, ref func(string) string) squery {
	col := cols[s.r.IntN(len(cols))]
	f := &sfactor{kind: sfSub, col: col}
	table, out, key, v, filter := s.lookupParts(f, "m.")
	f.key = col + " IN " + f.key
	on := ref(col) + " = m." + out
	if s.chance(0.3) {
		on = "m." + out + " = " + ref(col)
	}
	keyCond := "m." + key + " = " + v
	chain, link := "", "" // a third table n the key comes from (a chain of joins)
	if s.chance(0.25) {
		inner := &sfactor{}
		itable, iout, ikey, iv, _ := s.lookupParts(inner, "n.")
		chain, link, keyCond = itable, "m."+key+" = n."+iout, "n."+ikey+" = "+iv
		f.key += " chain " + inner.key
		f.auth, f.unauth = inner.auth, inner.unauth
	}
	if filter != "" {
		keyCond += " AND " + filter
	}
	var conds []string
	if s.chance(0.5) {
		if s.chance(0.4) && chain == "" {
			on += " AND " + keyCond
		} else {
			conds = append(conds, keyCond)
		}
		q.sql += " " + s.pick("JOIN", "INNER JOIN") + " " + table + s.pick(" AS ", " ") + "m ON " + on
		if chain != "" {
			q.sql += " JOIN " + chain + " n ON " + link
		}
	} else {
		q.sql += ", " + table + s.pick(" AS ", " ") + "m"
		conds = append(conds, on, keyCond)
		if chain != "" {
			q.sql += ", " + chain + " n"
			conds = append(conds, link)
		}
		s.r.Shuffle(len(conds), func(i, j int) { conds[i], conds[j] = conds[j], conds[i] })
	}
	n := &snode{f: f}
	terms := [][]*sfactor{{f}}
	if !(s.fam == "global" && s.chance(0.3)) {
		var w string
		var where *snode
		w, where, terms = s.whereClause(cols, ref, f)
		conds = append(conds, "("+w+")")
		n = &snode{op: "AND", kids: []*snode{n, where}}
	}
	if len(conds) > 0 {
		q.sql += " WHERE " + strings.Join(conds, " AND ")
	}
	q.terms = terms
	q.ps = psTerms(psdnf(n, false))
	return q
}

// whereClause draws a WHERE tree within the subset and without the
// skipped shapes: it retries until every OR-ed term passes termOK and the
// terms are few. join is a joined table's factor, AND-ed to every term
// (nil for none; with one, no subquery is drawn).
func (s *sgen) whereClause(cols []string, ref func(string) string, join *sfactor) (string, *snode, [][]*sfactor) {
	if join != nil && s.chance(0.6) {
		w := s.w
		s.w[sfSub] = 0
		defer func() { s.w = w }()
	}
	for {
		used := s.used
		s.used = map[string]bool{}
		for k := range used {
			s.used[k] = true
		}
		n := s.wnode(2+s.r.IntN(2), true, false, cols, ref)
		terms := sdnf(n, false)
		if join != nil {
			for i := range terms {
				terms[i] = append([]*sfactor{join}, terms[i]...)
			}
		}
		ok := len(terms) <= 12
		seen := map[string]bool{}
		for _, t := range terms {
			ok = ok && s.termOK(t, len(terms))
			if s.skip.has(diffDuplicateVariant) {
				id := termID(t)
				ok = ok && !seen[id]
				seen[id] = true
			}
		}
		if ok {
			return renderWhere(n, true), n, terms
		}
		s.used = used
	}
}

// termID identifies a term by its factors, in any order.
func termID(t []*sfactor) string {
	fs := make([]string, len(t))
	for i, f := range t {
		fs[i] = f.key
	}
	slices.Sort(fs)
	return strings.Join(fs, "\x00")
}

// qualifier matches a column's table or alias qualifier in the outer query.
var qualifier = regexp.MustCompile(`\b(items|docs|t|x|it)\.`)

// unqualified is sql without the outer query's qualifiers.
func unqualified(sql string) string { return qualifier.ReplaceAllString(sql, "") }

// termOK reports whether an OR-ed term (of n) is inside the subset — at
// most two subqueries (or a join and a subquery), each column compared
// with nothing else — and has none of the skipped shapes.
func (s *sgen) termOK(t []*sfactor, n int) bool {
	subs, parts := 0, 0
	for _, f := range t {
		if f.partition() {
			parts++
		}
		if f.kind == sfSub {
			subs++
		}
	}
	if subs > 2 || !eachOK(t) {
		return false
	}
	for _, f := range t {
		if f.kind != sfSub && f.kind != sfArr {
			continue
		}
		for _, o := range t {
			if o == f || !o.partition() {
				continue
			}
			// A subquery's column compared with another subquery or an
			// array is drawn. With a value, PowerSync's dangerous-query
			// warning sometimes points at the subquery's value where
			// syncpipe points at the other (a known gap): not drawn.
			subEq := f.kind == sfSub && o.kind == sfEq || f.kind == sfEq && o.kind == sfSub
			if o.col == f.col && (subEq || s.skip.has(diffArrayAndValue) && f.kind != o.kind) {
				return false
			}
			if s.skip.has(diffMissingValue) {
				return false
			}
		}
	}
	if s.skip.has(diffBoolEquals) {
		for i, f := range t {
			if f.kind == sfEq && slices.ContainsFunc(t[i+1:], func(o *sfactor) bool { return o.kind == sfEq && o.col == f.col }) {
				return false
			}
		}
	}
	if s.skip.has(diffSubqueryVariantOrder) && n > 1 && len(t) == 1 && t[0].kind == sfSub {
		return false
	}
	return true
}

// sdnf is the OR-ed terms of n (negated if neg), NOT pushed down: each
// term the factors it ANDs.
func sdnf(n *snode, neg bool) [][]*sfactor {
	switch n.op {
	case "NOT":
		return sdnf(n.kids[0], !neg)
	case "AND", "OR":
		if (n.op == "OR") != neg {
			var out [][]*sfactor
			for _, k := range n.kids {
				out = append(out, sdnf(k, neg)...)
			}
			return out
		}
		out := [][]*sfactor{{}}
		for _, k := range n.kids {
			var next [][]*sfactor
			for _, a := range out {
				for _, b := range sdnf(k, neg) {
					next = append(next, append(slices.Clone(a), b...))
				}
			}
			out = next
		}
		return out
	}
	return [][]*sfactor{{n.f}}
}

// pform is a WHERE in PowerSync's disjunctive normal form while it is
// built: a factor, an AND of factors or an OR of those.
type pform struct {
	op    string // "", "AND", "OR"
	inner []*pform
	f     *sfactor
}

// psdnf is prepareToDNF of PowerSync's stream compiler (parser.js) on n
// (negated if neg): NOT pushed down, the terms of an AND's ORs
// distributed, each new term their factors first, then the AND's own.
// `a AND b AND c` is parsed as (a AND b) AND c.
func psdnf(n *snode, neg bool) *pform {
	switch n.op {
	case "NOT":
		return psdnf(n.kids[0], !neg)
	case "AND", "OR":
		l := psdnf(n.kids[0], neg)
		for _, k := range n.kids[1:] {
			r := psdnf(k, neg)
			if (n.op == "OR") != neg {
				l = psOr(l, r)
			} else {
				l = psAnd(l, r)
			}
		}
		return l
	}
	return &pform{f: n.f}
}

func psOr(kids ...*pform) *pform {
	out := &pform{op: "OR"}
	for _, k := range kids {
		if k.op == "OR" {
			out.inner = append(out.inner, k.inner...)
		} else {
			out.inner = append(out.inner, k)
		}
	}
	return out
}

func psAnd(kids ...*pform) *pform {
	var base []*pform
	var ors [][]*pform
	for _, k := range kids {
		switch k.op {
		case "AND":
			base = append(base, k.inner...)
		case "OR":
			ors = append(ors, k.inner)
		default:
			base = append(base, k)
		}
	}
	if len(ors) == 0 {
		return &pform{op: "AND", inner: base}
	}
	out := &pform{op: "OR"}
	combos := [][]*pform{{}}
	for _, o := range ors {
		var next [][]*pform
		for _, c := range combos {
			for _, t := range o {
				next = append(next, append(slices.Clone(c), t))
			}
		}
		combos = next
	}
	for _, c := range combos {
		out.inner = append(out.inner, psAnd(append(c, base...)...))
	}
	return out
}

// psTerms lists the terms of a normal form.
func psTerms(p *pform) [][]*sfactor {
	term := func(p *pform) []*sfactor {
		if p.op == "" {
			return []*sfactor{p.f}
		}
		out := make([]*sfactor, len(p.inner))
		for i, x := range p.inner {
			out[i] = x.f
		}
		return out
	}
	if p.op != "OR" {
		return [][]*sfactor{term(p)}
	}
	out := make([][]*sfactor, len(p.inner))
	for i, x := range p.inner {
		out[i] = term(x)
	}
	return out
}

// wnode draws a WHERE subtree of at most depth levels; parts allows
// partitions (not under NOT), notNot forbids a NOT here (directly under
// another).
func (s *sgen) wnode(depth int, parts, notNot bool, cols []string, ref func(string) string) *snode {
	if depth == 0 || s.chance(0.4) {
		return &snode{f: s.factor(parts, cols, ref)}
	}
	k := s.r.IntN(6)
	if notNot && k == 5 {
		k = s.r.IntN(5)
	}
	switch k {
	case 0, 1, 2:
		n := &snode{op: "AND"}
		for range 2 + s.r.IntN(2) {
			n.kids = append(n.kids, s.wnode(depth-1, parts, false, cols, ref))
		}
		return n
	case 3, 4:
		return &snode{op: "OR", kids: []*snode{s.wnode(depth-1, parts, false, cols, ref), s.wnode(depth-1, parts, false, cols, ref)}}
	}
	return &snode{op: "NOT", kids: []*snode{s.wnode(depth-1, false, true, cols, ref)}}
}

// renderWhere renders a WHERE tree, parenthesizing every operand that is
// not a factor (top: no parentheses around the whole).
func renderWhere(n *snode, top bool) string {
	switch n.op {
	case "NOT":
		k := n.kids[0]
		if k.f != nil && k.f.bare {
			return "NOT " + k.f.sql
		}
		return "NOT (" + renderWhere(k, true) + ")"
	case "AND", "OR":
		parts := make([]string, len(n.kids))
		for i, k := range n.kids {
			parts[i] = renderWhere(k, false)
		}
		out := strings.Join(parts, " "+n.op+" ")
		if !top {
			out = "(" + out + ")"
		}
		return out
	}
	return n.f.sql
}

// factor draws one factor; without parts only row and request-only ones.
func (s *sgen) factor(parts bool, cols []string, ref func(string) string) *sfactor {
	w := s.w
	if !parts {
		w[sfEq], w[sfArr], w[sfSub] = 0, 0, 0
	}
	total := 0
	for _, x := range w {
		total += x
	}
	if total == 0 {
		w[sfRow], total = 1, 1
	}
	k := s.r.IntN(total)
	kind := sfRow
	for i, x := range w {
		if k < x {
			kind = sfKind(i)
			break
		}
		k -= x
	}
	col := cols[s.r.IntN(len(cols))]
	switch kind {
	case sfEq:
		f := s.reqValue(&sfactor{kind: sfEq, col: col}, s.eqValue())
		row, _ := s.rowExprEq(f, col, ref)
		f.key = f.col + " = " + f.sql
		if s.chance(0.3) {
			f.sql += " = " + row
		} else {
			f.sql = row + " = " + f.sql
		}
		return f
	case sfArr:
		f := &sfactor{kind: sfArr, col: col}
		if s.rowArrayIn(f, col, ref) {
			return f
		}
		f = s.reqValue(f, s.arrValue())
		f.sql = ref(col) + " IN " + f.sql
		f.key = unqualified(f.sql)
		return f
	case sfSub:
		f := &sfactor{kind: sfSub, col: col}
		sub := s.subquery(f)
		if strings.HasPrefix(sub, "SELECT") {
			sub = "(" + sub + ")"
		}
		f.sql = ref(col) + " IN " + sub
		f.key = col + " IN " + f.key
		return f
	case sfReq:
		return s.reqCond(parts)
	}
	sql := s.rowPred(cols, ref, !parts)
	return &sfactor{sql: sql, kind: sfRow, key: unqualified(sql)}
}

// reqValue sets f's sql to the request value v and marks what it reads.
func (s *sgen) reqValue(f *sfactor, v string) *sfactor {
	f.sql = v
	if strings.HasPrefix(v, "auth.") {
		f.auth = true
	} else {
		f.unauth = true
	}
	return f
}

// eqValue is a request value compared with a column.
func (s *sgen) eqValue() string {
	switch s.r.IntN(8) {
	case 0, 1, 2:
		return "auth.user_id()"
	case 3:
		return s.use("auth", s.pick("team", "role"))
	case 4:
		return s.use("conn", s.pick("team", "code"))
	}
	return s.use("sub", s.pick("id", "team", "list"))
}

// arrValue is a request value holding an array, for column IN <value>.
func (s *sgen) arrValue() string {
	switch s.r.IntN(3) {
	case 0:
		return s.use("auth", "lists")
	case 1:
		return s.use("conn", "ids")
	}
	return s.use("sub", "ids")
}

// use records a request key and returns its function call.
func (s *sgen) use(src, key string) string {
	s.used[src+":"+key] = true
	switch src {
	case "auth":
		return "auth.parameter('" + key + "')"
	case "conn":
		return "connection.parameter('" + key + "')"
	}
	return "subscription.parameter('" + key + "')"
}

// subquery is `SELECT out FROM <parameter table> WHERE key = <value>
// [AND filter]`, or a CTE holding it: `cte` or `SELECT out FROM cte`, its
// value's kind and its identity (f.key) marked on f.
func (s *sgen) subquery(f *sfactor) string {
	q := ""
	if s.chance(0.15) {
		q = "p."
	}
	table, out, key, v, filter := s.lookupParts(f, q)
	from := table
	if q != "" {
		from = table + " AS p"
	}
	cond := q + key + " = " + v
	if s.chance(0.25) {
		cond = v + " = " + q + key
	}
	nested := s.chance(0.15)
	if nested { // the key from a lookup of its own, one level deeper
		inner := &sfactor{}
		itable, iout, ikey, iv, _ := s.lookupParts(inner, "")
		cond = q + key + " IN (SELECT " + iout + " FROM " + itable + " WHERE " + ikey + " = " + iv + ")"
		f.key += " nested " + inner.key
		f.auth, f.unauth = inner.auth, inner.unauth
	}
	if filter != "" {
		cond += " AND " + filter
	}
	if s.chance(0.15) { // an OR inside: a variant (and lookup) per term
		cols := s.useTable(table, paramTables)
		c := cols[s.r.IntN(len(cols))]
		cond = "(" + cond + ") OR " + q + c + s.pick(" = 'x'", " IS NULL")
		f.key += " or " + c
	}
	sql := "SELECT " + q + out + " FROM " + from + " WHERE " + cond
	if nested || !s.chance(0.35) {
		return sql
	}
	name, ok := s.cteNames[sql]
	if !ok {
		name = fmt.Sprintf("cte%d", len(s.cteNames))
		s.cteNames[sql] = name
	}
	if s.chance(0.5) {
		s.globals[name] = sql
	} else {
		s.qctes[name] = sql
	}
	switch s.r.IntN(3) {
	case 0:
		return "SELECT " + out + " FROM " + name
	case 1:
		return "SELECT c." + out + " FROM " + name + " c"
	}
	return name // written `col IN cte`, without parentheses (see factor)
}

// lookupParts draws a lookup on a parameter table: its output and key
// columns, the request value (marked on f) and, now and then, a filter
// on the table (q: its qualifier); f.key is set to its identity.
func (s *sgen) lookupParts(f *sfactor, q string) (table, out, key, v, filter string) {
	table = s.pick("members", "teams")
	cols := s.useTable(table, paramTables)
	out, key = cols[s.r.IntN(len(cols))], cols[s.r.IntN(len(cols))]
	v = s.reqValue(f, s.eqValue()).sql
	f.key = fmt.Sprintf("(%s.%s WHERE %s = %s)", table, out, key, v)
	if s.chance(0.2) {
		c := cols[s.r.IntN(len(cols))]
		filter = q + c + " IS NOT NULL"
		f.key += " filter " + c
	}
	return table, out, key, v, filter
}

// reqCond is a condition on request values alone; notNOT: it is not
// under a NOT.
func (s *sgen) reqCond(notNOT bool) *sfactor {
	f := &sfactor{kind: sfReq}
	k := s.r.IntN(10)
	if (k == 3 || k == 5) && !notNOT && s.skip.has(diffNegationSpelling) {
		k = 0
	}
	switch k {
	case 0:
		f.sql, f.bare = s.use("auth", "admin"), true
	case 1:
		f.sql = "NOT " + s.use("auth", "blocked")
	case 2:
		f.sql = s.use("auth", "role") + " = " + s.pick("'admin'", "'user'", "1")
	case 3:
		f.sql = "auth.user_id() " + s.pick("!=", "=") + " " + s.pick("'u2'", "'u1'")
	case 4:
		f.sql = s.use("conn", "on") + " = " + s.pick("1", "TRUE", "'yes'")
	case 5:
		f.sql = s.use("sub", "f") + s.pick(" IS NULL", " IS NOT NULL")
	case 6:
		f.sql = s.use("auth", "admin") + " = " + s.pick("true", "false", "1")
	case 7:
		f.sql = s.use("sub", "f") + " = " + s.pick("'x'", "1")
	case 8:
		if !s.skip.has(diffNotEqual) {
			f.sql = s.use("auth", "role") + " != " + s.pick("'admin'", "1")
			break
		}
		fallthrough
	default:
		f.sql, f.bare = s.use("conn", "on"), true
	}
	f.auth = strings.Contains(f.sql, "auth.")
	f.unauth = !f.auth
	// TRUE is 1 to both engines.
	f.key = strings.NewReplacer(" = TRUE", " = 1", " = true", " = 1", " = false", " = 0").Replace(f.sql)
	return f
}

// rowLiteral is a literal for row predicates.
func (s *sgen) rowLiteral() string {
	switch s.r.IntN(8) {
	case 0:
		return "NULL"
	case 1, 2:
		return s.pick("0", "1", "2")
	case 3:
		return s.pick("1.5", "2.0")
	}
	return s.pick("'u1'", "'u2'", "'t1'", "'l1'", "'1'", "''")
}

// rowPred is a row-only predicate; underNOT: it is under a NOT.
func (s *sgen) rowPred(cols []string, ref func(string) string, underNOT bool) string {
	col := func() string { return ref(cols[s.r.IntN(len(cols))]) }
	ne := func() string {
		if s.skip.has(diffNotEqual) || underNOT && s.skip.has(diffNegationSpelling) {
			return "="
		}
		return s.pick("=", "!=", "<>")
	}
	k := s.r.IntN(6)
	if k == 0 && underNOT && s.skip.has(diffNegationSpelling) {
		k = 3
	}
	switch k {
	case 0:
		return col() + s.pick(" IS NULL", " IS NOT NULL")
	case 1:
		return col() + " " + ne() + " " + col()
	case 2:
		return col() + " " + s.pick("<", ">", "<=", ">=") + " " + s.rowLiteral()
	}
	return col() + " " + s.pick("=", ne()) + " " + s.rowLiteral()
}

// rowValue draws a column value from a small pool, so that rows meet
// requests and partitions collide.
func (s *sgen) rowValue() [2]string {
	switch s.r.IntN(12) {
	case 0, 1:
		return [2]string{"n", ""}
	case 2:
		return [2]string{"i", s.pick("1", "2", "0")}
	case 3:
		return [2]string{"r", s.pick("1.5", "2")}
	case 4:
		return s.rowArrayValue()
	}
	return [2]string{"t", s.pick("u1", "u2", "u3", "t1", "t2", "l1", "l2", "1", "admin", "")}
}

// row draws a row of a case table.
func (s *sgen) row(table string) refRow {
	r := refRow{Table: table}
	for _, c := range s.tables[table] {
		v := s.rowValue()
		if c == "id" {
			v = [2]string{"t", s.pick("r1", "r2", "r3", "r4", "r5", "l1", "t1")}
		}
		r.Row = append(r.Row, col(c, v))
	}
	return r
}

// jsonScalar is a claim or parameter value meant to be compared.
func (s *sgen) jsonScalar() string {
	return s.pick(`"u1"`, `"u2"`, `"t1"`, `"l1"`, `"1"`, `"admin"`, `""`, `1`, `2`, `1.5`, `2.0`, `0`, `true`, `false`, `null`, `["t1"]`, `{"a":"t1"}`)
}

// jsonArray is a value meant for column IN <value>.
func (s *sgen) jsonArray() string {
	return s.pick(`["l1","l2"]`, `["t1",1,null]`, `[]`, `["u1"]`, `[1,2.0]`, `["r1","r2","u2"]`, `"l1"`, `5`, `null`,
		`{"a":"l1","b":1}`, `[["l1"]]`, `[true,1.5]`, `"[\"l1\"]"`, `["t1","t1"]`)
}

// keyValue is a value for request key k.
func (s *sgen) keyValue(k string) string {
	switch k {
	case "lists", "ids":
		if s.chance(0.85) {
			return s.jsonArray()
		}
	case "admin", "blocked", "on":
		if s.chance(0.7) {
			return s.pick("true", "false", "1", "0", `"yes"`, "null")
		}
	}
	return s.jsonScalar()
}

// object renders a JSON object of some of the keys of src the case reads
// (each present with probability p), now and then another key, and first.
func (s *sgen) object(src string, p float64, first ...string) string {
	parts := slices.Clone(first)
	var keys []string
	for k := range s.used {
		if rest, ok := strings.CutPrefix(k, src+":"); ok {
			keys = append(keys, rest)
		}
	}
	slices.Sort(keys)
	for _, k := range keys {
		if s.chance(p) {
			parts = append(parts, strconv.Quote(k)+":"+s.keyValue(k))
		}
	}
	if s.chance(0.1) {
		parts = append(parts, `"other":`+s.jsonScalar())
	}
	s.r.Shuffle(len(parts), func(i, j int) { parts[i], parts[j] = parts[j], parts[i] })
	return "{" + strings.Join(parts, ",") + "}"
}

// request draws a sync request.
func (s *sgen) request() refRequest {
	q := refRequest{
		Claims: s.object("auth", 0.75, `"sub":`+s.pick(`"u1"`, `"u1"`, `"u2"`, `"u3"`, `"t1"`, `"1"`)),
		Params: s.object("conn", 0.7),
	}
	if s.chance(0.2) {
		return q
	}
	st := &refStreams{Subscriptions: []refSubscription{}}
	switch s.r.IntN(5) {
	case 0:
	case 1, 2:
		t := true
		st.IncludeDefaults = &t
	default:
		f := false
		st.IncludeDefaults = &f
	}
	for range s.r.IntN(4) {
		sub := refSubscription{Stream: s.names[s.r.IntN(len(s.names))]}
		if s.chance(0.1) {
			sub.Stream = s.pick("nope", "Lists")
		}
		if s.chance(0.1) {
			sub.Parameters = []byte("null")
		} else {
			sub.Parameters = []byte(s.object("sub", 0.8))
		}
		if s.chance(0.35) {
			p := s.r.IntN(4)
			sub.OverridePriority = &p
		}
		st.Subscriptions = append(st.Subscriptions, sub)
	}
	q.Streams = st
	return q
}
