package cli

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

	"github.com/syncpipe/syncpipe/config"
)

// manifests parses every YAML document under deploy/kubernetes.
func manifests(t *testing.T) map[string][]map[string]any {
	t.Helper()
	files, err := filepath.Glob("../deploy/kubernetes/*/*.yaml")
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
func TestKubernetesManifests(t *testing.T) {
	if testing.Short() {
		t.Skip("starts PostgreSQL and a syncpipe process")
	}
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
	t.Setenv("SOURCE_URI", "postgres://app@db:5432/app")
	t.Setenv("STORAGE_URI", "postgres://app@db:5432/syncpipe")
	t.Setenv("JWT_SECRET", "a-long-random-secret-for-the-manifest-check")
	if _, err := config.LoadBytes("syncpipe-config/syncpipe.yaml",
		[]byte(strings.ReplaceAll(text, "/etc/syncpipe/rules.yaml", filepath.Join(dir, "rules.yaml")))); err != nil {
		t.Fatalf("the ConfigMap's config does not validate: %v", err)
	}

	// Every HPA metric is on a real process's /metrics.
	metrics := freeAddr(t)
	e := newStreamEnv(t, envOptions{rules: "bucket_definitions: {}\n", env: []string{"SYNCPIPE_TELEMETRY__METRICS_LISTEN=" + metrics}})
	e.startWith(nil, "--role", "api")
	e.waitFor(ctx, "/metrics with the HPA metrics", func() bool {
		g := unitGauges(ctx, metrics)
		for _, m := range hpaMetrics {
			if _, ok := g[m]; !ok {
				return false
			}
		}
		return true
	})
}
