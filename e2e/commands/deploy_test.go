package commands

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/syncpipe/syncpipe/cli"
	"github.com/syncpipe/syncpipe/internal/testkit/harness"
)

// manifests parses every YAML document under deploy/kubernetes.
func manifests(t *testing.T) map[string][]map[string]any {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(harness.Root(t), "deploy/kubernetes/*/*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no manifests: %v", err)
	}
	out := map[string][]map[string]any{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		dec := yaml.NewDecoder(bytes.NewReader(b))
		for {
			var doc map[string]any
			err := dec.Decode(&doc)
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			if doc["apiVersion"] == nil || doc["kind"] == nil {
				t.Fatalf("%s: a document without apiVersion and kind", f)
			}
			out[f] = append(out[f], doc)
		}
	}
	return out
}

// dig follows keys (and list indexes given as ints) through a parsed
// document.
func dig(v any, path ...any) any {
	for _, p := range path {
		switch k := p.(type) {
		case string:
			m, _ := v.(map[string]any)
			v = m[k]
		case int:
			l, _ := v.([]any)
			if k >= len(l) {
				return nil
			}
			v = l[k]
		}
	}
	return v
}

// TestKubernetesManifests parses every manifest, checks that each
// container runs a role syncpipe knows, that the shared config validates,
// and that every metric an HPA scales on is exported by a real syncpipe
// process's /metrics.
//
// (In cli the config was loaded in-process with its secrets set by
// t.Setenv; here `syncpipe validate --offline` judges it with them in its
// environment, which checks at least as much and lets the test run in
// parallel.)
func TestKubernetesManifests(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	roles := map[string]bool{"all": true, "api": true, "replication": true, "replication:streaming": true, "replication:snapshot": true}
	var hpaMetrics []string
	var cfgMap map[string]any
	for f, docs := range manifests(t) {
		for _, d := range docs {
			switch d["kind"] {
			case "Deployment":
				args, _ := dig(d, "spec", "template", "spec", "containers", 0, "args").([]any)
				if len(args) < 5 || args[0] != "run" || args[3] != "--role" || !roles[args[4].(string)] {
					t.Errorf("%s: deployment %v runs %v, want run --config F --role <role>", f, dig(d, "metadata", "name"), args)
				}
			case "HorizontalPodAutoscaler":
				ms, _ := dig(d, "spec", "metrics").([]any)
				for i := range ms {
					if name, ok := dig(ms, i, "external", "metric", "name").(string); ok {
						hpaMetrics = append(hpaMetrics, name)
					}
				}
			case "ConfigMap":
				if dig(d, "metadata", "name") == "syncpipe-config" {
					cfgMap = d
				}
			}
		}
	}
	if len(hpaMetrics) == 0 || cfgMap == nil {
		t.Fatalf("want an HPA on an external metric and the syncpipe-config ConfigMap (got %v, %v)", hpaMetrics, cfgMap != nil)
	}

	// The config of the ConfigMap, with its secrets and the rules path.
	dir := t.TempDir()
	rules, _ := dig(cfgMap, "data", "rules.yaml").(string)
	if err := os.WriteFile(filepath.Join(dir, "rules.yaml"), []byte(rules), 0o644); err != nil {
		t.Fatal(err)
	}
	text, _ := dig(cfgMap, "data", "syncpipe.yaml").(string)
	cfgPath := filepath.Join(dir, "syncpipe.yaml")
	if err := os.WriteFile(cfgPath, []byte(strings.ReplaceAll(text, "/etc/syncpipe/rules.yaml", filepath.Join(dir, "rules.yaml"))), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, stdout, stderr := harness.RunWith(t, ctx, harness.ProcConfig{
		Args: []string{"validate", "--offline", "--config", cfgPath},
		Env: []string{"SOURCE_URI=postgres://app@db:5432/app", "STORAGE_URI=postgres://app@db:5432/syncpipe",
			"JWT_SECRET=a-long-random-secret-for-the-manifest-check"},
	}); code != cli.ExitOK {
		t.Fatalf("the ConfigMap's config does not validate: exit %d\n%s%s", code, stdout, stderr)
	}

	// Every HPA metric is on a real process's /metrics.
	metrics := harness.FreeAddr(t)
	e := harness.New(t, harness.Options{Rules: "bucket_definitions: {}\n", Env: []string{"SYNCPIPE_TELEMETRY__METRICS_LISTEN=" + metrics}})
	e.StartRole("api")
	e.WaitFor(ctx, "/metrics with the HPA metrics", func() bool {
		ss := harness.Scrape(ctx, metrics)
		for _, m := range hpaMetrics {
			if _, ok := harness.Sample(ss, m); !ok {
				return false
			}
		}
		return true
	})
}
