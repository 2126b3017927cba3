// Command vulndb turns the OSV files that the golang.org/x/vulndb module
// ships (data/osv/GO-*.json) into a local Go vulnerability database in the
// "v1" layout that `govulncheck -db file:///dir` reads:
//
//	index/db.json       {"modified": ...}
//	index/modules.json  [{"path": ..., "vulns": [{"id": ..., "modified": ...}]}]
//	ID/GO-YYYY-NNNN.json the OSV entries, copied unchanged
//
// It is what the vulndb repository's own cmd/indexdb does, without that
// module's hundreds of megabytes of dependencies: it uses the standard
// library only and is run by .ci/govulncheck.sh as `go run .ci/vulndb/main.go`.
// It lives under .ci/, which `go build/vet/test ./...` do not match.
//
// The OSV files in the module carry a zero "modified" time (the hosted
// database fills it in from git history), so the database's date is taken
// from the module's pseudo-version (-version), which is the date of the
// vulndb commit it was cut from.
//
// The per-module "fixed" hint is left out: govulncheck treats it as an
// optional shortcut and, without it, reads every entry of a module it
// uses and checks the entry's ranges itself, so results are the same.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"time"
)

type entry struct {
	ID       string    `json:"id"`
	Modified time.Time `json:"modified"`
	Affected []struct {
		Package struct {
			Name      string `json:"name"`
			Ecosystem string `json:"ecosystem"`
		} `json:"package"`
	} `json:"affected"`
}

type moduleVuln struct {
	ID       string    `json:"id"`
	Modified time.Time `json:"modified"`
}

type moduleMeta struct {
	Path  string       `json:"path"`
	Vulns []moduleVuln `json:"vulns"`
}

var (
	osvDir  = flag.String("osv", "", "directory of OSV files (the vulndb module's data/osv)")
	outDir  = flag.String("out", "", "directory to write the database to (created; must not exist)")
	version = flag.String("version", "", "the vulndb module's pseudo-version (v0.0.0-YYYYMMDDHHMMSS-commit); gives the database's date")
)

var pseudo = regexp.MustCompile(`^v0\.0\.0-(\d{14})-[0-9a-f]{12}$`)

func main() {
	log.SetFlags(0)
	log.SetPrefix("vulndb: ")
	flag.Parse()
	if *osvDir == "" || *outDir == "" || *version == "" {
		log.Fatal("-osv, -out and -version are required")
	}
	m := pseudo.FindStringSubmatch(*version)
	if m == nil {
		log.Fatalf("-version %q is not a pseudo-version", *version)
	}
	dbDate, err := time.Parse("20060102150405", m[1])
	if err != nil {
		log.Fatal(err)
	}
	n, modules, err := build(*osvDir, *outDir, dbDate)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("vulndb: %d entries for %d modules (stdlib: %d, toolchain: %d), dated %s\n",
		n, modules["all"], modules["stdlib"], modules["toolchain"], dbDate.Format(time.RFC3339))
}

// build writes the database and returns the number of entries and, for the
// summary line, the number of modules ("all") and of stdlib and toolchain
// entries.
func build(src, out string, dbDate time.Time) (int, map[string]int, error) {
	files, err := filepath.Glob(filepath.Join(src, "*.json"))
	if err != nil {
		return 0, nil, err
	}
	if err := os.Mkdir(out, 0o755); err != nil {
		return 0, nil, err
	}
	for _, d := range []string{"ID", "index"} {
		if err := os.Mkdir(filepath.Join(out, d), 0o755); err != nil {
			return 0, nil, err
		}
	}
	index := map[string]*moduleMeta{}
	seen := map[string]bool{}
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			return 0, nil, err
		}
		var e entry
		if err := json.Unmarshal(raw, &e); err != nil {
			return 0, nil, fmt.Errorf("%s: %v", f, err)
		}
		if filepath.Base(f) != e.ID+".json" || !strings.HasPrefix(e.ID, "GO-") {
			return 0, nil, fmt.Errorf("%s: entry id %q does not match the file name", f, e.ID)
		}
		if seen[e.ID] {
			return 0, nil, fmt.Errorf("%s: id %s appears twice", f, e.ID)
		}
		seen[e.ID] = true
		mod := e.Modified
		if mod.IsZero() {
			mod = dbDate
		}
		for _, a := range e.Affected {
			p := a.Package.Name
			if p == "" || a.Package.Ecosystem != "Go" {
				return 0, nil, fmt.Errorf("%s: affected package %q in ecosystem %q", f, p, a.Package.Ecosystem)
			}
			mm := index[p]
			if mm == nil {
				mm = &moduleMeta{Path: p}
				index[p] = mm
			}
			// One line per entry and module, even if the entry lists the
			// module twice (as it does for several packages).
			if n := len(mm.Vulns); n == 0 || mm.Vulns[n-1].ID != e.ID {
				mm.Vulns = append(mm.Vulns, moduleVuln{ID: e.ID, Modified: mod})
			}
		}
		if err := os.WriteFile(filepath.Join(out, "ID", e.ID+".json"), raw, 0o644); err != nil {
			return 0, nil, err
		}
	}
	// An empty or half-read database would make govulncheck pass without
	// checking anything: refuse it.
	if len(seen) < 1000 || index["stdlib"] == nil || index["toolchain"] == nil {
		return 0, nil, fmt.Errorf("%s: only %d entries (stdlib %t, toolchain %t): not a full vulndb data/osv",
			src, len(seen), index["stdlib"] != nil, index["toolchain"] != nil)
	}
	mods := make([]*moduleMeta, 0, len(index))
	for _, mm := range index {
		sort.Slice(mm.Vulns, func(i, j int) bool { return mm.Vulns[i].ID < mm.Vulns[j].ID })
		mods = append(mods, mm)
	}
	sort.Slice(mods, func(i, j int) bool { return mods[i].Path < mods[j].Path })
	if err := writeJSON(filepath.Join(out, "index", "modules.json"), mods); err != nil {
		return 0, nil, err
	}
	db := struct {
		Modified time.Time `json:"modified"`
	}{dbDate}
	if err := writeJSON(filepath.Join(out, "index", "db.json"), db); err != nil {
		return 0, nil, err
	}
	counts := map[string]int{
		"all":       len(mods),
		"stdlib":    len(index["stdlib"].Vulns),
		"toolchain": len(index["toolchain"].Vulns),
	}
	return len(seen), counts, nil
}

func writeJSON(path string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o644)
}
