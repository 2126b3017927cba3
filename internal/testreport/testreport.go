// Package testreport turns the event stream of `go test -json` into what
// CI's log shows (.ci/run, through .ci/testreport): a line per package
// and per top-level test as they finish, the output of every failing test
// and package, and at the end the slowest tests, each package's elapsed
// time and a closing count line ("tests: N passed, N failed, N skipped").
package testreport

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"
)

// Event is one line of `go test -json` (cmd/test2json).
type Event struct {
	Time        time.Time
	Action      string
	Package     string
	Test        string
	Elapsed     float64 // seconds
	Output      string
	ImportPath  string // build-output, build-fail
	FailedBuild string // a package's fail caused by a build failure
}

// Result is one finished test or package.
type Result struct {
	Package string
	Test    string // "" for a package
	Action  string // pass, fail, skip; "unfinished" for a test the package's end cut off
	Elapsed time.Duration
}

// Summary is what a whole stream held.
type Summary struct {
	Tests    []Result // every test and subtest
	Packages []Result
	Passed   int // tests and subtests
	Failed   int
	Skipped  int
	// Unfinished tests: started but never passed or failed (a timeout or
	// a panic ended their binary).
	Unfinished int
	// FailedPackages counts packages that failed, including those that
	// did not build.
	FailedPackages int
}

// OK reports whether nothing failed.
func (s *Summary) OK() bool { return s.Failed == 0 && s.FailedPackages == 0 && s.Unfinished == 0 }

type testState struct {
	out []string
}

// Reader consumes the stream, printing progress to Live as it goes.
type Reader struct {
	Live  io.Writer
	tests map[[2]string]*testState // package, test → output so far
	pkgs  map[string][]string      // package-level output
	order map[string][]string      // package → tests in start order, for the unfinished ones
	sum   Summary
}

// Read reads a whole `go test -json` stream. Lines that are not JSON
// events (go's own messages on a merged stderr) are printed as they are.
func Read(in io.Reader, live io.Writer) (*Summary, error) {
	r := &Reader{Live: live, tests: map[[2]string]*testState{}, pkgs: map[string][]string{}, order: map[string][]string{}}
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 64<<10), 64<<20)
	for sc.Scan() {
		line := sc.Bytes()
		var e Event
		if len(line) == 0 || line[0] != '{' || json.Unmarshal(line, &e) != nil {
			fmt.Fprintf(live, "%s\n", line)
			continue
		}
		r.event(e)
	}
	if err := sc.Err(); err != nil {
		return &r.sum, err
	}
	// A stream cut short (the pipe closed): its running tests are
	// unfinished too.
	for pkg := range r.order {
		r.unfinished(pkg)
	}
	return &r.sum, nil
}

func (r *Reader) event(e Event) {
	switch e.Action {
	case "build-output":
		fmt.Fprint(r.Live, e.Output)
		return
	case "build-fail":
		return // the package's fail event follows (FailedBuild)
	}
	if e.Test == "" {
		r.packageEvent(e)
		return
	}
	k := [2]string{e.Package, e.Test}
	st := r.tests[k]
	if st == nil {
		st = &testState{}
		r.tests[k] = st
		r.order[e.Package] = append(r.order[e.Package], e.Test)
	}
	switch e.Action {
	case "output":
		st.out = append(st.out, e.Output)
	case "pass", "fail", "skip":
		res := Result{Package: e.Package, Test: e.Test, Action: e.Action, Elapsed: seconds(e.Elapsed)}
		r.sum.Tests = append(r.sum.Tests, res)
		delete(r.tests, k)
		switch e.Action {
		case "pass":
			r.sum.Passed++
		case "fail":
			r.sum.Failed++
		case "skip":
			r.sum.Skipped++
		}
		top := !strings.Contains(e.Test, "/")
		if e.Action == "fail" {
			fmt.Fprintf(r.Live, "FAIL %s %s (%s)\n", short(e.Package), e.Test, fmtDur(res.Elapsed))
			for _, l := range st.out {
				fmt.Fprint(r.Live, Indent(l))
			}
		} else if top {
			fmt.Fprintf(r.Live, "%s %s %s (%s)\n", strings.ToUpper(e.Action), short(e.Package), e.Test, fmtDur(res.Elapsed))
		}
	}
}

func (r *Reader) packageEvent(e Event) {
	switch e.Action {
	case "output":
		r.pkgs[e.Package] = append(r.pkgs[e.Package], e.Output)
	case "pass", "fail", "skip":
		res := Result{Package: e.Package, Action: e.Action, Elapsed: seconds(e.Elapsed)}
		r.sum.Packages = append(r.sum.Packages, res)
		out := r.pkgs[e.Package]
		delete(r.pkgs, e.Package)
		n := r.unfinished(e.Package)
		switch {
		case e.Action == "fail":
			r.sum.FailedPackages++
			why := ""
			if e.FailedBuild != "" {
				why = " [build failed]"
			} else if n > 0 {
				why = fmt.Sprintf(" [%d tests unfinished]", n)
			}
			fmt.Fprintf(r.Live, "FAIL %s%s (%s)\n", e.Package, why, fmtDur(res.Elapsed))
			for _, l := range out {
				fmt.Fprint(r.Live, Indent(l))
			}
		case e.Action == "skip":
			// no test files
		default:
			fmt.Fprintf(r.Live, "ok   %s (%s)\n", e.Package, fmtDur(res.Elapsed))
		}
	}
}

// unfinished reports, and counts, the tests of pkg still running when its
// binary ended; it returns how many.
func (r *Reader) unfinished(pkg string) int {
	n := 0
	for _, name := range r.order[pkg] {
		st, ok := r.tests[[2]string{pkg, name}]
		if !ok {
			continue
		}
		n++
		r.sum.Unfinished++
		r.sum.Tests = append(r.sum.Tests, Result{Package: pkg, Test: name, Action: "unfinished"})
		fmt.Fprintf(r.Live, "UNFINISHED %s %s (its test binary ended: a timeout or a panic)\n", short(pkg), name)
		for _, l := range st.out {
			fmt.Fprint(r.Live, Indent(l))
		}
		delete(r.tests, [2]string{pkg, name})
	}
	delete(r.order, pkg)
	return n
}

// WriteSummary prints the n slowest top-level tests, every package's
// elapsed time (slowest first), and the closing count line.
func (s *Summary) WriteSummary(w io.Writer, n int) {
	var top []Result
	for _, t := range s.Tests {
		if !strings.Contains(t.Test, "/") && t.Action != "unfinished" {
			top = append(top, t)
		}
	}
	slices.SortStableFunc(top, func(a, b Result) int { return cmpDur(b.Elapsed, a.Elapsed) })
	fmt.Fprintf(w, "\nslowest %d tests:\n", min(n, len(top)))
	for _, t := range top[:min(n, len(top))] {
		fmt.Fprintf(w, "  %8s  %-4s %s %s\n", fmtDur(t.Elapsed), t.Action, short(t.Package), t.Test)
	}
	pkgs := slices.Clone(s.Packages)
	slices.SortStableFunc(pkgs, func(a, b Result) int { return cmpDur(b.Elapsed, a.Elapsed) })
	fmt.Fprintf(w, "\npackages by elapsed time:\n")
	for _, p := range pkgs {
		if p.Action == "skip" {
			continue
		}
		fmt.Fprintf(w, "  %8s  %-4s %s\n", fmtDur(p.Elapsed), p.Action, p.Package)
	}
	if s.Unfinished > 0 || s.FailedPackages > 0 {
		fmt.Fprintf(w, "\n%d packages failed, %d tests unfinished\n", s.FailedPackages, s.Unfinished)
	}
	fmt.Fprintf(w, "\ntests: %d passed, %d failed, %d skipped\n", s.Passed, s.Failed+s.Unfinished, s.Skipped)
}

// Indent prefixes each line of s with four spaces.
func Indent(s string) string {
	if s == "" {
		return s
	}
	nl := strings.HasSuffix(s, "\n")
	s = "    " + strings.ReplaceAll(strings.TrimSuffix(s, "\n"), "\n", "\n    ")
	if nl {
		s += "\n"
	}
	return s
}

func seconds(f float64) time.Duration { return time.Duration(f * float64(time.Second)) }

func cmpDur(a, b time.Duration) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func fmtDur(d time.Duration) string { return fmt.Sprintf("%.1fs", d.Seconds()) }

// short drops the module path from a package's import path.
func short(pkg string) string {
	return strings.TrimPrefix(pkg, "github.com/syncpipe/syncpipe/")
}
