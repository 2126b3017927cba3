package syncrules

import (
	"bufio"
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/syncpipe/syncpipe/internal/testkit/nodedeps"
	"github.com/syncpipe/syncpipe/model"
)

// The differential test: every case (rules, source rows, sync requests) is
// evaluated by syncpipe and by PowerSync's published compiler
// @powersync/service-sync-rules (testdata/client/syncrules.mjs, run on the
// Node that testdata/client installs), and the two answers must be equal
// byte for byte: rule errors and warnings (level and line), bucket ids,
// object types and ids, row data, lookup keys and stored parameter rows,
// request buckets with priorities, the lookups they need and the Sync
// Streams subscriptions that failed (requests may carry a streams object:
// include_defaults and subscriptions). The corpus is
// testdata/reference/fixed.jsonl (cases that once differed, kept forever)
// plus cases generated from the seeds below; -reference.seeds adds more.

var refSeeds = flag.String("reference.seeds", "", "comma-separated extra generator seeds for TestReferenceCompiler (each adds refCasesPerSeed cases)")

// refDefaultSeeds are the generator seeds every run uses.
var refDefaultSeeds = []uint64{1, 2, 3, 4, 5, 6, 7, 8}

// refCasesPerSeed is how many cases one seed generates.
const refCasesPerSeed = 120

// refCase is one differential case, in the driver's input format.
type refCase struct {
	Name     string       `json:"name,omitempty"`
	Rules    string       `json:"rules"`
	Schema   []refTable   `json:"schema,omitempty"`
	Rows     []refRow     `json:"rows,omitempty"`
	Requests []refRequest `json:"requests,omitempty"`
}

type refTable struct {
	Table   string   `json:"table"`
	Columns []string `json:"columns"`
}

// refRow is a source row: [column, tag, value] triples (see syncrules.mjs).
type refRow struct {
	Table string      `json:"table"`
	Row   [][3]string `json:"row"`
}

// refRequest is a sync request: JWT claims, client parameters and, for
// Sync Streams, the request's streams object (nil: none sent).
type refRequest struct {
	Claims  string      `json:"claims"`
	Params  string      `json:"params"`
	Streams *refStreams `json:"streams,omitempty"`
}

// refStreams is a request's streams object. IncludeDefaults nil means true,
// as in the service.
type refStreams struct {
	IncludeDefaults *bool             `json:"include_defaults,omitempty"`
	Subscriptions   []refSubscription `json:"subscriptions"`
}

// refSubscription is one explicit stream subscription; Parameters is a JSON
// object or null (the service reads null as {}), OverridePriority nil for
// none.
type refSubscription struct {
	Stream           string          `json:"stream"`
	Parameters       json.RawMessage `json:"parameters"`
	OverridePriority *int            `json:"override_priority"`
}

// streamsRequest converts a case's streams object to the engine's.
func (s *refStreams) streamsRequest() *StreamsRequest {
	if s == nil {
		return nil
	}
	r := &StreamsRequest{IncludeDefaults: s.IncludeDefaults == nil || *s.IncludeDefaults}
	for _, sub := range s.Subscriptions {
		ss := StreamSubscription{Stream: sub.Stream, OverridePriority: -1}
		if p := bytes.TrimSpace(sub.Parameters); len(p) > 0 && !bytes.Equal(p, []byte("null")) {
			ss.Parameters = p
		}
		if sub.OverridePriority != nil {
			ss.OverridePriority = *sub.OverridePriority
		}
		r.Subscriptions = append(r.Subscriptions, ss)
	}
	return r
}

// refResult is what both engines answer for a case.
type refResult struct {
	Crash    string         `json:"crash,omitempty"`
	Errors   []refError     `json:"errors"`
	Rows     []refRowResult `json:"rows"`
	Requests []refReqResult `json:"requests"`
}

type refError struct {
	Level   string `json:"level"`
	Line    int    `json:"line"`
	Message string `json:"message,omitempty"`
}

type refRowResult struct {
	Outputs      []refOutput `json:"outputs"`
	Errors       int         `json:"errors"`
	Lookups      []refLookup `json:"lookups"`
	LookupErrors int         `json:"lookup_errors"`
}

type refOutput struct {
	Bucket string `json:"bucket"`
	Table  string `json:"table"`
	ID     string `json:"id"`
	Data   string `json:"data"`
}

type refLookup struct {
	Key  string `json:"key"`
	Rows string `json:"rows"`
}

// refReqResult is a request's buckets, the lookups they took and the
// stream subscriptions that could not be evaluated, or Failed: the request
// is refused (a parameter query failed for it).
type refReqResult struct {
	Buckets      []refBucket      `json:"buckets"`
	Lookups      []string         `json:"lookups"`
	StreamErrors []refStreamError `json:"stream_errors,omitempty"`
	Failed       bool             `json:"failed,omitempty"`
}

// refStreamError is a stream subscription that failed for a request;
// Subscription is its index in the request's subscriptions, -1 for the
// stream's default subscription.
type refStreamError struct {
	Stream       string `json:"stream"`
	Subscription int    `json:"subscription"`
	Message      string `json:"message,omitempty"`
}

type refBucket struct {
	Bucket   string `json:"bucket"`
	Priority int    `json:"priority"`
}

// normalize puts a result in comparable form: messages dropped (their
// wording is syncpipe's own, see doc.go) and each (level, line) or failing
// (stream, subscription) once, outputs, lookups, buckets and stream errors
// sorted (their order carries no meaning), and the evaluation of rules that
// have errors dropped.
func (r *refResult) normalize() {
	if r.Errors == nil {
		r.Errors = []refError{}
	}
	if r.Rows == nil {
		r.Rows = []refRowResult{}
	}
	if r.Requests == nil {
		r.Requests = []refReqResult{}
	}
	for i := range r.Errors {
		r.Errors[i].Message = ""
	}
	slices.SortFunc(r.Errors, func(a, b refError) int {
		if a.Line != b.Line {
			return a.Line - b.Line
		}
		return strings.Compare(a.Level, b.Level)
	})
	r.Errors = slices.Compact(r.Errors)
	if slices.ContainsFunc(r.Errors, func(e refError) bool { return e.Level == "fatal" }) {
		// Rejected rules: syncpipe reports the fatal problems only (doc.go).
		r.Errors = slices.DeleteFunc(r.Errors, func(e refError) bool { return e.Level != "fatal" })
	}
	for i := range r.Rows {
		rr := &r.Rows[i]
		slices.SortFunc(rr.Outputs, func(a, b refOutput) int {
			return strings.Compare(a.Bucket+"\x00"+a.Table+"\x00"+a.ID+"\x00"+a.Data, b.Bucket+"\x00"+b.Table+"\x00"+b.ID+"\x00"+b.Data)
		})
		// A query reaching one bucket twice for a row (OR, a repeated
		// array element) puts the row there once in syncpipe (doc.go).
		rr.Outputs = slices.Compact(rr.Outputs)
		slices.SortFunc(rr.Lookups, func(a, b refLookup) int { return strings.Compare(a.Key, b.Key) })
	}
	for i := range r.Requests {
		q := &r.Requests[i]
		if q.Failed {
			q.Buckets, q.Lookups, q.StreamErrors = nil, nil, nil
			continue
		}
		slices.SortFunc(q.Buckets, func(a, b refBucket) int { return strings.Compare(a.Bucket, b.Bucket) })
		slices.Sort(q.Lookups)
		q.Lookups = slices.Compact(q.Lookups)
		q.StreamErrors = normalizeStreamErrors(q.StreamErrors)
	}
}

// normalizeStreamErrors drops the messages (syncpipe's own wording, like
// rule errors') and keeps each failing (stream, subscription) once, sorted;
// nil when there are none.
func normalizeStreamErrors(es []refStreamError) []refStreamError {
	if len(es) == 0 {
		return nil
	}
	for i := range es {
		es[i].Message = ""
	}
	slices.SortFunc(es, func(a, b refStreamError) int {
		if c := strings.Compare(a.Stream, b.Stream); c != 0 {
			return c
		}
		return a.Subscription - b.Subscription
	})
	return slices.Compact(es)
}

// nodeRunner runs the reference driver.
type nodeRunner struct{ node, script, dir string }

// requireReference installs testdata/client's Node packages when needed
// (internal/testkit/nodedeps: npm ci on first use) and finds its Node and the
// pinned reference compiler. It fails (never skips) when they are missing.
func requireReference(t *testing.T) *nodeRunner {
	t.Helper()
	dir := nodedeps.Ensure(t)
	r := &nodeRunner{node: nodedeps.Node(dir), script: filepath.Join(dir, "syncrules.mjs"), dir: dir}
	var pkg struct {
		Dependencies map[string]string `json:"dependencies"`
	}
	b, err := os.ReadFile(filepath.Join(dir, "package.json"))
	if err == nil {
		err = json.Unmarshal(b, &pkg)
	}
	if err != nil {
		t.Fatalf("read %s/package.json: %v", dir, err)
	}
	want := pkg.Dependencies["@powersync/service-sync-rules"]
	var installed struct {
		Version string `json:"version"`
	}
	b, err = os.ReadFile(filepath.Join(dir, "node_modules", "@powersync", "service-sync-rules", "package.json"))
	if err == nil {
		err = json.Unmarshal(b, &installed)
	}
	if _, serr := os.Stat(r.node); err != nil || serr != nil || installed.Version != want {
		t.Fatalf("the reference compiler @powersync/service-sync-rules %s (and Node) is not installed in %s after npm ci (found %q)",
			want, dir, installed.Version)
	}
	return r
}

// run evaluates cases with the reference compiler, one process for all.
func (r *nodeRunner) run(t *testing.T, cases []refCase) []refResult {
	t.Helper()
	var in bytes.Buffer
	enc := json.NewEncoder(&in)
	for i := range cases {
		if err := enc.Encode(&cases[i]); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, r.node, r.script)
	cmd.Dir = r.dir
	cmd.Stdin = &in
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", r.node, r.script, err, stderr.String())
	}
	var res []refResult
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		var rr refResult
		if err := json.Unmarshal(sc.Bytes(), &rr); err != nil {
			t.Fatalf("driver output %q: %v", sc.Text(), err)
		}
		res = append(res, rr)
	}
	if len(res) != len(cases) {
		t.Fatalf("driver answered %d of %d cases\n%s", len(res), len(cases), stderr.String())
	}
	return res
}

// decodeRefValue converts a driver value triple into a column name and Value.
func decodeRefValue(c [3]string) (string, model.Value, error) {
	switch c[1] {
	case "n":
		return c[0], model.Null(), nil
	case "i":
		n, err := strconv.ParseInt(c[2], 10, 64)
		return c[0], model.Int(n), err
	case "r":
		switch c[2] {
		case "NaN":
			return c[0], model.Real(math.NaN()), nil
		case "+Inf":
			return c[0], model.Real(math.Inf(1)), nil
		case "-Inf":
			return c[0], model.Real(math.Inf(-1)), nil
		}
		f, err := strconv.ParseFloat(c[2], 64)
		return c[0], model.Real(f), err
	case "t":
		return c[0], model.Text(c[2]), nil
	case "b":
		b, err := hex.DecodeString(c[2])
		return c[0], model.Blob(b), err
	}
	return "", model.Value{}, fmt.Errorf("unknown value tag %q", c[1])
}

// countEvalErrors counts the failing queries behind a joined error.
func countEvalErrors(err error) int {
	if err == nil {
		return 0
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return len(j.Unwrap())
	}
	return 1
}

// syncpipeEvaluate answers a case with syncpipe, as its pipeline and sync
// API use the package: Parse (and CheckSchema with a schema), Bind and the
// evaluators per row, Request and Lookup.Buckets against the lookup entries
// the case's rows produced (the parameter storage).
func syncpipeEvaluate(c *refCase) refResult {
	res := refResult{}
	rules, err := Parse([]byte(c.Rules), Options{GroupID: "1"})
	var perr RuleErrors
	if errors.As(err, &perr) {
		for _, e := range perr {
			res.Errors = append(res.Errors, refError{Level: e.Level.String(), Line: e.Line, Message: e.Msg})
		}
	} else if err != nil {
		return refResult{Crash: err.Error()}
	}
	if rules != nil {
		for _, w := range rules.Warnings() {
			res.Errors = append(res.Errors, refError{Level: w.Level.String(), Line: w.Line, Message: w.Msg})
		}
		if c.Schema != nil {
			s := Schema{}
			for _, t := range c.Schema {
				s[t.Table] = t.Columns
			}
			for _, w := range rules.CheckSchema(s) {
				res.Errors = append(res.Errors, refError{Level: w.Level.String(), Line: w.Line, Message: w.Msg})
			}
		}
	}
	if err != nil {
		return res
	}
	stored := map[string][]string{}
	for _, r := range c.Rows {
		cols := make([]string, len(r.Row))
		vals := make([]model.Value, len(r.Row))
		for i, cv := range r.Row {
			var err error
			if cols[i], vals[i], err = decodeRefValue(cv); err != nil {
				return refResult{Crash: err.Error()}
			}
		}
		bt, err := rules.Bind(r.Table, cols)
		if err != nil {
			return refResult{Crash: err.Error()}
		}
		ev := bt.NewEvaluator()
		outs, _, derr := ev.EvaluateRow(vals, nil, nil)
		les, _, lerr := ev.EvaluateParameterRow(vals, nil, nil)
		rr := refRowResult{Outputs: []refOutput{}, Lookups: []refLookup{}, Errors: countEvalErrors(derr), LookupErrors: countEvalErrors(lerr)}
		for _, o := range outs {
			rr.Outputs = append(rr.Outputs, refOutput{Bucket: o.Bucket, Table: o.ObjectType, ID: o.ObjectID, Data: string(o.Data)})
		}
		for _, l := range les {
			rr.Lookups = append(rr.Lookups, refLookup{Key: string(l.Key), Rows: string(l.Rows)})
			stored[string(l.Key)] = append(stored[string(l.Key)], string(l.Rows))
		}
		res.Rows = append(res.Rows, rr)
	}
	for _, q := range c.Requests {
		var claims struct {
			Sub string `json:"sub"`
		}
		_ = json.Unmarshal([]byte(q.Claims), &claims)
		qr := refReqResult{Buckets: []refBucket{}, Lookups: []string{}}
		plan, err := rules.Request(Request{UserID: claims.Sub, Claims: []byte(q.Claims), Parameters: []byte(q.Params), Streams: q.Streams.streamsRequest()})
		if err != nil {
			res.Requests = append(res.Requests, refReqResult{Failed: true})
			continue
		}
		for _, e := range plan.StreamErrors {
			qr.StreamErrors = append(qr.StreamErrors, refStreamError{Stream: e.Stream, Subscription: e.Subscription, Message: e.Message})
		}
		refs := append([]BucketRef(nil), plan.Static...)
		for i := range plan.Lookups {
			l := &plan.Lookups[i]
			qr.Lookups = append(qr.Lookups, string(l.Key))
			for _, rows := range stored[string(l.Key)] {
				var err error
				if refs, err = l.Buckets([]byte(rows), refs); err != nil {
					qr.Failed = true
				}
			}
		}
		refs, bad, err := plan.ResolveStaged(func(keys [][]byte) ([][][]byte, error) {
			sets := make([][][]byte, len(keys))
			for i, k := range keys {
				qr.Lookups = append(qr.Lookups, string(k))
				for _, rows := range stored[string(k)] {
					sets[i] = append(sets[i], []byte(rows))
				}
			}
			return sets, nil
		}, refs)
		if bad != nil || err != nil {
			qr.Failed = true
		}
		for _, b := range MergeBuckets(refs) {
			qr.Buckets = append(qr.Buckets, refBucket{Bucket: b.ID, Priority: b.Priority})
		}
		res.Requests = append(res.Requests, qr)
	}
	return res
}

// loadFixedCases reads testdata/reference/fixed.jsonl: one case a line.
func loadFixedCases(t *testing.T) []refCase {
	t.Helper()
	return loadRefCases(t, "fixed.jsonl")
}

// loadRefCases reads a corpus in testdata/reference: one case a line.
func loadRefCases(t *testing.T, name string) []refCase {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "reference", name))
	if err != nil {
		t.Fatal(err)
	}
	var out []refCase
	for i, line := range bytes.Split(b, []byte("\n")) {
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		var c refCase
		if err := json.Unmarshal(line, &c); err != nil {
			t.Fatalf("%s:%d: %v", name, i+1, err)
		}
		out = append(out, c)
	}
	return out
}

func TestReferenceCompiler(t *testing.T) {
	ref := requireReference(t)
	cases := loadFixedCases(t)
	fixed := len(cases)
	seeds := slices.Clone(refDefaultSeeds)
	if *refSeeds != "" {
		for _, s := range strings.Split(*refSeeds, ",") {
			n, err := strconv.ParseUint(strings.TrimSpace(s), 10, 64)
			if err != nil {
				t.Fatalf("-reference.seeds: %v", err)
			}
			seeds = append(seeds, n)
		}
	}
	for _, s := range seeds {
		cases = append(cases, generateCases(s, refCasesPerSeed)...)
	}
	want := ref.run(t, cases)
	differ, byFamily := compareWithReference(t, cases, want, lastWord, refMaxReported)
	t.Logf("%d cases (%d fixed, %d generated from seeds %v), %d differ %v", len(cases), fixed, len(cases)-fixed, seeds, differ, byFamily)
	if len(cases) < 500 {
		t.Errorf("corpus has %d cases, want at least 500", len(cases))
	}
}

// refMaxReported bounds the differences reported in detail.
const refMaxReported = 15

// lastWord is a generated case's family: the last word of its name.
func lastWord(name string) string { return name[strings.LastIndexByte(name, ' ')+1:] }

// compareWithReference answers each case with syncpipe and compares the
// normalized answer with the reference's (want, in case order). It fails
// the test for each case the driver could not evaluate and each that
// differs, showing the first maxReported differences in detail, and
// returns how many differ, also counted by family(case name).
func compareWithReference(t *testing.T, cases []refCase, want []refResult, family func(string) string, maxReported int) (int, map[string]int) {
	t.Helper()
	differ := 0
	byFamily := map[string]int{}
	for i := range cases {
		c := &cases[i]
		w := want[i]
		if w.Crash != "" {
			t.Errorf("case %d (%s): reference driver failed: %s\nrules:\n%s", i, c.Name, w.Crash, c.Rules)
			continue
		}
		got := syncpipeEvaluate(c)
		wantMsgs, gotMsgs := messages(w.Errors), messages(got.Errors)
		w.normalize()
		got.normalize()
		wj, _ := json.Marshal(w)
		gj, _ := json.Marshal(got)
		if bytes.Equal(wj, gj) {
			continue
		}
		differ++
		byFamily[family(c.Name)]++
		if differ <= maxReported {
			t.Errorf("case %d (%s) differs from the reference compiler:\n%s", i, c.Name, describeDiff(c, &w, &got, wantMsgs, gotMsgs))
		}
	}
	return differ, byFamily
}

// describeDiff shows the rules and, for each part that differs, the
// input and both answers.
func describeDiff(c *refCase, w, g *refResult, wantMsgs, gotMsgs string) string {
	var b strings.Builder
	js := func(v any) string {
		x, _ := json.Marshal(v)
		return string(x)
	}
	fmt.Fprintf(&b, "rules:\n%s", c.Rules)
	if c.Schema != nil {
		fmt.Fprintf(&b, "schema: %s\n", js(c.Schema))
	}
	if js(w.Errors) != js(g.Errors) {
		fmt.Fprintf(&b, "errors:\n  reference: %s\n  syncpipe:  %s\n", wantMsgs, gotMsgs)
	}
	for i := range max(len(w.Rows), len(g.Rows)) {
		var a, o any
		if i < len(w.Rows) {
			a = w.Rows[i]
		}
		if i < len(g.Rows) {
			o = g.Rows[i]
		}
		if js(a) != js(o) {
			fmt.Fprintf(&b, "row %d %s:\n  reference: %s\n  syncpipe:  %s\n", i, js(c.Rows[i]), js(a), js(o))
		}
	}
	for i := range max(len(w.Requests), len(g.Requests)) {
		var a, o any
		if i < len(w.Requests) {
			a = w.Requests[i]
		}
		if i < len(g.Requests) {
			o = g.Requests[i]
		}
		if js(a) != js(o) {
			fmt.Fprintf(&b, "request %d %s:\n  reference: %s\n  syncpipe:  %s\n", i, js(c.Requests[i]), js(a), js(o))
		}
	}
	return b.String()
}

func messages(es []refError) string {
	var parts []string
	for _, e := range es {
		parts = append(parts, fmt.Sprintf("%s@%d: %s", e.Level, e.Line, e.Message))
	}
	return strings.Join(parts, "; ")
}
