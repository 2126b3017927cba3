// Command vulnverdict reads `govulncheck -format json` on stdin and decides
// the supply-chain step (issue #17): it fails (exit 3) when the code calls
// a vulnerable function, unless the advisory is listed in the known file —
// standard-library advisories that only a newer Go toolchain fixes, each
// listed with the version that fixes it, so raising the toolchain is a
// tracked decision rather than a red CI. A listed advisory that is no
// longer found is reported, so the list shrinks as the toolchain moves on.
package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
)

// frame is one frame of a finding's trace; the first is the vulnerable
// symbol, and it names a function only when the code calls it.
type frame struct {
	Module   string `json:"module"`
	Package  string `json:"package"`
	Function string `json:"function"`
	Receiver string `json:"receiver"`
}

type message struct {
	Finding *struct {
		OSV          string  `json:"osv"`
		FixedVersion string  `json:"fixed_version"`
		Trace        []frame `json:"trace"`
	} `json:"finding"`
}

func main() {
	known := flag.String("known", "", "file of advisories allowed while the toolchain lacks their fix: lines 'GO-YYYY-NNNN <reason>'")
	flag.Parse()
	allowed, err := readKnown(*known)
	if err != nil {
		fmt.Fprintln(os.Stderr, "vulnverdict:", err)
		os.Exit(1)
	}
	called, err := calledFindings(os.Stdin)
	if err != nil {
		fmt.Fprintln(os.Stderr, "vulnverdict:", err)
		os.Exit(1)
	}
	os.Exit(verdict(os.Stdout, called, allowed))
}

// readKnown reads the allowed advisories: the first word of each line that
// is not blank or a # comment.
func readKnown(path string) (map[string]string, error) {
	out := map[string]string{}
	if path == "" {
		return out, nil
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("read the known advisories: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		id, reason, _ := strings.Cut(line, " ")
		out[id] = strings.TrimSpace(reason)
	}
	return out, sc.Err()
}

// calledFindings maps each advisory whose vulnerable function the code
// calls to a line describing it.
func calledFindings(r io.Reader) (map[string]string, error) {
	dec := json.NewDecoder(r)
	called := map[string]string{}
	for {
		var m message
		err := dec.Decode(&m)
		if errors.Is(err, io.EOF) {
			return called, nil
		}
		if err != nil {
			return nil, fmt.Errorf("read govulncheck's JSON: %w", err)
		}
		f := m.Finding
		if f == nil || len(f.Trace) == 0 || f.Trace[0].Function == "" {
			continue
		}
		top := f.Trace[0]
		sym := top.Function
		if top.Receiver != "" {
			sym = top.Receiver + "." + sym
		}
		called[f.OSV] = fmt.Sprintf("%s: %s %s.%s (fixed in %s)", f.OSV, top.Module, top.Package, sym, f.FixedVersion)
	}
}

// verdict prints the findings and returns the exit code: 3 when a called
// advisory is not allowed, else 0.
func verdict(w io.Writer, called, allowed map[string]string) int {
	ids := make([]string, 0, len(called))
	for id := range called {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	rc := 0
	for _, id := range ids {
		if reason, ok := allowed[id]; ok {
			fmt.Fprintf(w, "known, allowed until the toolchain is raised: %s — %s\n", called[id], reason)
			continue
		}
		fmt.Fprintf(w, "CALLED VULNERABLE FUNCTION: %s\n", called[id])
		rc = 3
	}
	for id := range allowed {
		if _, ok := called[id]; !ok {
			fmt.Fprintf(w, "listed as known but no longer found (remove it from the list): %s\n", id)
		}
	}
	return rc
}
