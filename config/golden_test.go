package config

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

// goldenCases maps each testdata/errors/<name>.yaml to the kinds of error it
// must produce. The golden text itself is <name>.golden; environment
// variables, if any, come from <name>.env.
var goldenCases = map[string][]Kind{
	"syntax":              {KindSyntax},
	"unknown_key":         {KindUnknownKey},
	"type_string_for_int": {KindType},
	"type_list_for_map":   {KindType},
	"type_bad_duration":   {KindType},
	"required":            {KindRequired},
	"empty":               {KindRequired},
	"conflict":            {KindConflict},
	"range":               {KindRange},
	"enum":                {KindEnum},
	"address":             {KindAddress},
	"duplicate_pipeline":  {KindDuplicate, KindRequired},
	"duplicate_key":       {KindDuplicateKey, KindRange},
	"interpolation":       {KindInterpolation},
	"uri":                 {KindURI},
	"file":                {KindFile},
	"env":                 {KindRange, KindAddress, KindUnknownKey, KindEnum, KindType, KindSyntax},
	"top_level":           {KindType},
}

func TestGoldenErrors(t *testing.T) {
	files, err := filepath.Glob("testdata/errors/*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != len(goldenCases) {
		t.Errorf("%d yaml files in testdata/errors but %d goldenCases; keep them in sync", len(files), len(goldenCases))
	}
	for _, file := range files {
		name := strings.TrimSuffix(filepath.Base(file), ".yaml")
		t.Run(name, func(t *testing.T) {
			kinds, ok := goldenCases[name]
			if !ok {
				t.Fatalf("no goldenCases entry for %s", file)
			}
			env := readEnvFile(t, strings.TrimSuffix(file, ".yaml")+".env")
			_, err := Loader{Environ: func() []string { return env }}.Load(file)
			if err == nil {
				t.Fatalf("%s loaded without error", file)
			}
			errs := AsErrors(err)
			got := countKinds(errs)
			for _, k := range kinds {
				if got[k] == 0 {
					t.Errorf("want an error of kind %s, got kinds %v", k, got)
				}
			}
			checkGolden(t, strings.TrimSuffix(file, ".yaml")+".golden", err.Error()+"\n")
		})
	}
}

// TestBadYAML is the many-errors-at-once file the CLI test prints.
func TestBadYAML(t *testing.T) {
	_, err := Loader{Environ: func() []string { return nil }}.Load("testdata/bad.yaml")
	if err == nil {
		t.Fatal("bad.yaml loaded without error")
	}
	errs := AsErrors(err)
	if len(errs) < 20 {
		t.Errorf("want at least 20 problems from bad.yaml, got %d", len(errs))
	}
	if n := len(countKinds(errs)); n < 10 {
		t.Errorf("want at least 10 different kinds in bad.yaml, got %d: %v", n, countKinds(errs))
	}
	for _, e := range errs {
		if e.File != "testdata/bad.yaml" || e.Line == 0 || e.Path == "" {
			t.Errorf("problem without file, line or path: %#v", e)
		}
	}
	checkGolden(t, "testdata/bad.golden", err.Error()+"\n")
}

// TestReferenceGolden keeps the README's config table reviewable in diffs.
func TestReferenceGolden(t *testing.T) {
	checkGolden(t, "testdata/reference.md", Reference())
}

func checkGolden(t *testing.T, path, got string) {
	t.Helper()
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test ./config -run %s -update)", err, t.Name())
	}
	if got != string(want) {
		t.Errorf("output differs from %s (rerun with -update after checking):\n--- got\n%s--- want\n%s", path, got, want)
	}
}

// readEnvFile reads KEY=VALUE lines; a missing file is an empty environment.
func readEnvFile(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	var env []string
	for _, line := range strings.Split(string(b), "\n") {
		if line = strings.TrimSpace(line); line != "" && !strings.HasPrefix(line, "#") {
			env = append(env, line)
		}
	}
	return env
}

// countKinds counts the errors of each kind in es.
func countKinds(es Errors) map[Kind]int {
	m := make(map[Kind]int)
	for _, e := range es {
		m[e.Kind]++
	}
	return m
}
