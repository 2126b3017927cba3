package config

import (
	"fmt"
	"strings"
	"testing"
)

// TestEveryFieldHasShapeAndDoc keeps Reference complete: every key needs a
// supported type (shapeOf panics otherwise) and a `doc` tag.
func TestEveryFieldHasShapeAndDoc(t *testing.T) {
	seen := make(map[string]bool)
	for _, k := range schemaKeys() {
		_ = shapeOf(k.field.typ)
		if strings.TrimSpace(k.field.doc) == "" {
			t.Errorf("%s has no doc tag", k.path)
		}
		if seen[k.path] {
			t.Errorf("%s appears twice", k.path)
		}
		seen[k.path] = true
	}
	// The keys that tools around syncpipe rely on (SPEC §7).
	for _, p := range []string{"source.uri", "storage.uri", "sync_rules.path", "sync_rules.content",
		"replication.workers_per_process", "api.listen", "api.auth.audience", "api.auth.hs256_secrets",
		"api.auth.jwks_uri", "api.auth.jwks.keys", "api.max_buckets_per_connection",
		"telemetry.metrics_listen", "telemetry.tracing.exporter", "telemetry.tracing.sample_ratio",
		"log.level", "log.format", "pipelines[].name", "pipelines[].sink.type", "pipelines[].sink.settings"} {
		if !seen[p] {
			t.Errorf("missing key %s", p)
		}
	}
}

func TestReferenceRows(t *testing.T) {
	ref := Reference()
	for _, want := range []string{
		"| `replication.stream.batch_max_bytes` | byte size | `16MiB` | `SYNCPIPE_REPLICATION__STREAM__BATCH_MAX_BYTES` |",
		"| `source.snapshot_socket_timeout` | duration | `5m` |",
		"| `pipelines[].stages.channel_depth` | integer | `2` | — |",
		"| `pipelines[].stages.chunk_rows` | integer | inherits `replication.snapshot.chunk_rows` | — |",
		"| `telemetry.tracing.exporter` | string | `\"none\"` |",
	} {
		if !strings.Contains(ref, want) {
			t.Errorf("reference lacks %q", want)
		}
	}
	if n := strings.Count(ref, "\n"); n != len(schemaKeys())+2 {
		t.Errorf("reference has %d lines for %d keys", n, len(schemaKeys()))
	}
}

func TestSuggest(t *testing.T) {
	for _, c := range []struct{ section, key, want string }{
		{"source", "url", ` (did you mean "uri"?)`},
		{"source", "URI", ` (did you mean "uri"?)`},
		{"replication", "worker_per_process", ` (did you mean "workers_per_process"?)`},
		{"api", "workers_per_process", " (did you mean replication.workers_per_process?)"},
		{"api", "zzz", ""},
	} {
		f, _ := lookupField(configType, c.section)
		if got := suggest(f.typ, c.key); got != c.want {
			t.Errorf("suggest(%s, %s) = %q, want %q", c.section, c.key, got, c.want)
		}
	}
}

func TestPaths(t *testing.T) {
	for _, c := range []struct{ in, parent string }{
		{"a.b[2].c", "a.b[2]"}, {"a.b[2]", "a.b"}, {"a", ""}, {"", ""},
	} {
		if got := parentPath(c.in); got != c.parent {
			t.Errorf("parentPath(%q) = %q, want %q", c.in, got, c.parent)
		}
	}
	if !within("a.b[1].c", "a.b") || !within("a.b", "a.b") || within("a.bc", "a.b") || !within("x", "") {
		t.Error("within is wrong")
	}
}

func TestInterpolateUnit(t *testing.T) {
	lookup := func(k string) (string, bool) {
		v, ok := map[string]string{"A": "1", "E": ""}[k]
		return v, ok
	}
	for _, c := range []struct{ in, out, err string }{
		{"k: ${A}\n", "k: 1\n", ""},
		{"k: ${E:-d}${E}\n", "k: d\n", ""},
		{"k: ${Z:-}\n", "k: \n", ""},
		{"k: $${A} $A $$\n", "k: ${A} $A $$\n", ""},
		{"  # ${Z}\n", "  # ${Z}\n", ""},
		{"k: ${Z}\n", "k: \n", "1:4 ${Z} is not set"},
		{"k: x ${A\n", "k: x ${A\n", "1:6 unterminated"},
		{"a: 1\nk: ${a-b}\n", "a: 1\nk: \n", "2:4 invalid variable reference"},
	} {
		out, hits := interpolate([]byte(c.in), lookup)
		if string(out) != c.out {
			t.Errorf("%q -> %q, want %q", c.in, out, c.out)
		}
		var got string
		if len(hits) > 0 {
			got = fmt.Sprintf("%d:%d %s", hits[0].line, hits[0].col, hits[0].msg)
		}
		if c.err == "" && got != "" || c.err != "" && !strings.HasPrefix(got, c.err) {
			t.Errorf("%q: error %q, want prefix %q", c.in, got, c.err)
		}
	}
}
