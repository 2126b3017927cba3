package syncpipe

import (
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// module is the import path every package of this repository starts with.
const module = "github.com/syncpipe/syncpipe"

// tier is one floor of the architecture. A package may import packages of
// its own tier and of the tiers below it, never of a tier above. Patterns
// are paths relative to the module root; "x/..." matches x and every
// package below it.
type tier struct {
	name     string
	patterns []string
}

// tiers is the declared order, lowest first (issue 42: data model <
// pipeline < sources / stages / sinks < replication / syncapi < cli < cmd).
var tiers = []tier{
	{"model", []string{"model/...", "internal/atomicfile", "internal/freelist", "internal/yamlpos", "internal/pgauth"}},
	{"framework", []string{"pipeline", "pipeline/otelpipeline"}},
	{"parts", []string{"sources/...", "stages/...", "sinks/..."}},
	{"assembly", []string{"replication", "syncapi", "syncapi/rsocket", "config", "internal/telemetry", "internal/pgcluster", "internal/todos"}},
	{"cli", []string{"cli"}},
	{"commands", []string{"cmd/...", "examples/..."}},
}

// testOnly are the harnesses: test harnesses, end-to-end tests and the
// benchmarks (which drive the torture harness and throwaway clusters the
// way tests do). They may import anything, and no product package imports
// them: only test files and the harnesses themselves.
var testOnly = []string{"internal/testkit/...", "e2e/...", "benchmarks/..."}

// knownViolation is a production import that breaks the order today. The
// list only shrinks: the test fails on a listed import that is gone.
type knownViolation struct {
	from, to, reason string
}

var knownViolations = []knownViolation{}

// edge is one production import between two packages of the module, as
// paths relative to the module root. Test files' imports are not edges.
type edge struct{ from, to string }

// match reports whether pkg matches the pattern p (see tier).
func match(p, pkg string) bool {
	if base, ok := strings.CutSuffix(p, "/..."); ok {
		return pkg == base || strings.HasPrefix(pkg, base+"/")
	}
	return pkg == p
}

// tierOf returns the index of pkg's tier in tiers, or -1.
func tierOf(pkg string) int {
	for i, t := range tiers {
		if slices.ContainsFunc(t.patterns, func(p string) bool { return match(p, pkg) }) {
			return i
		}
	}
	return -1
}

func isTestOnly(pkg string) bool {
	return slices.ContainsFunc(testOnly, func(p string) bool { return match(p, pkg) })
}

// checkLayering returns one line per problem in the graph of pkgs and their
// production imports: a package in no tier, a production import of a
// test-only package, an import up the order that is not a known violation,
// and a known violation that no longer exists.
func checkLayering(pkgs []string, edges []edge, known []knownViolation) []string {
	var problems []string
	for _, p := range pkgs {
		if tierOf(p) < 0 && !isTestOnly(p) {
			problems = append(problems, fmt.Sprintf("package %s is in no tier: declare its tier in layering_test.go", p))
		}
	}
	seen := make([]bool, len(known))
	for _, e := range edges {
		if isTestOnly(e.from) {
			continue // harnesses and e2e tests may import anything
		}
		if i := slices.IndexFunc(known, func(k knownViolation) bool { return k.from == e.from && k.to == e.to }); i >= 0 {
			seen[i] = true
			continue
		}
		if isTestOnly(e.to) {
			problems = append(problems, fmt.Sprintf("%s imports %s, a test-only package: only test files may", e.from, e.to))
			continue
		}
		from, to := tierOf(e.from), tierOf(e.to)
		if from < 0 || to < 0 {
			continue // reported above as a package in no tier
		}
		if to > from {
			problems = append(problems, fmt.Sprintf("%s (tier %d %q) imports %s (tier %d %q): an import up the order",
				e.from, from, tiers[from].name, e.to, to, tiers[to].name))
		}
	}
	for i, k := range known {
		if !seen[i] {
			problems = append(problems, fmt.Sprintf("known violation %s → %s is gone: delete it from knownViolations", k.from, k.to))
		}
	}
	return problems
}

// moduleGraph lists the module's packages and their production imports
// within the module with go list (Imports excludes test files' imports).
func moduleGraph(t *testing.T) ([]string, []edge) {
	t.Helper()
	out, err := exec.Command("go", "list", "-f", "{{.ImportPath}}{{range .Imports}} {{.}}{{end}}", "./...").Output()
	if err != nil {
		if ee, ok := err.(*exec.ExitError); ok {
			t.Fatalf("go list: %v\n%s", err, ee.Stderr)
		}
		t.Fatalf("go list: %v", err)
	}
	rel := func(path string) (string, bool) {
		if path == module {
			return ".", true
		}
		return strings.CutPrefix(path, module+"/")
	}
	var pkgs []string
	var edges []edge
	for line := range strings.Lines(string(out)) {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		from, ok := rel(f[0])
		if !ok || from == "." {
			continue // the root package holds only the doc and this test
		}
		pkgs = append(pkgs, from)
		for _, imp := range f[1:] {
			if to, ok := rel(imp); ok {
				edges = append(edges, edge{from, to})
			}
		}
	}
	return pkgs, edges
}

// TestLayering checks the module's import graph against the declared order.
func TestLayering(t *testing.T) {
	pkgs, edges := moduleGraph(t)
	if len(pkgs) < 10 || len(edges) < 10 {
		t.Fatalf("go list found %d packages and %d imports: too few to be this module", len(pkgs), len(edges))
	}
	for _, p := range checkLayering(pkgs, edges, knownViolations) {
		t.Error(p)
	}
}

// TestLayeringCheckerCatches runs the checker on a small graph with one
// mistake of each kind, so that TestLayering passing means something.
func TestLayeringCheckerCatches(t *testing.T) {
	pkgs := []string{"model", "pipeline", "sinks", "sinks/jsonl", "config", "cli", "cmd/syncpipe", "internal/testkit/pgtest", "brandnew"}
	good := []edge{
		{"pipeline", "model"}, {"sinks", "pipeline"}, {"sinks/jsonl", "sinks"}, {"cli", "config"},
		{"cmd/syncpipe", "cli"}, {"internal/testkit/pgtest", "cli"},
	}
	if p := checkLayering(pkgs[:len(pkgs)-1], good, nil); len(p) != 0 {
		t.Fatalf("a graph that keeps the order was refused: %q", p)
	}
	bad := append(slices.Clone(good),
		edge{"pipeline", "sinks"},              // framework → parts
		edge{"sinks", "cli"},                   // parts → cli, listed below
		edge{"cli", "internal/testkit/pgtest"}, // production → test-only
	)
	known := []knownViolation{{"sinks", "cli", "test"}, {"model", "pipeline", "test: no such import"}}
	got := checkLayering(pkgs, bad, known)
	want := []string{
		`package brandnew is in no tier: declare its tier in layering_test.go`,
		`pipeline (tier 1 "framework") imports sinks (tier 2 "parts"): an import up the order`,
		`cli imports internal/testkit/pgtest, a test-only package: only test files may`,
		`known violation model → pipeline is gone: delete it from knownViolations`,
	}
	if !slices.Equal(got, want) {
		t.Errorf("problems:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
