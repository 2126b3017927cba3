package replication

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/syncpipe/syncpipe/config"
	"github.com/syncpipe/syncpipe/sinks"
)

// The sink registry is process-wide and has no Unregister: each test
// registers names of its own, unique per run so that -count=N works.
var sinkConfigRuns atomic.Int64

func uniqSink(name string) string {
	return fmt.Sprintf("%s-%d", name, sinkConfigRuns.Add(1))
}

var checkedSpec = sinks.Spec{Summary: "test", Fields: []sinks.Field{
	{Name: "endpoint", Type: sinks.FieldString, Required: true},
	{Name: "retries", Type: sinks.FieldInt, Default: 3},
	{Name: "timeout", Type: sinks.FieldDuration, Default: 10 * time.Second},
}}

// recordingSink is a factory's sink that remembers what Open passed.
type recordingSink struct {
	sinks.Sink
	settings *sinks.Settings
	env      sinks.Env
}

func recordingFactory(_ context.Context, s *sinks.Settings, env sinks.Env) (sinks.Sink, error) {
	return &recordingSink{settings: s, env: env}, nil
}

// TestCheckSinksNamesLines checks that sink problems — an unregistered
// type, settings a spec refuses — point at the key's line in the file.
func TestCheckSinksNamesLines(t *testing.T) {
	name := uniqSink("checked")
	sinks.MustRegister(name, checkedSpec, recordingFactory)
	cfg, err := config.LoadBytes("c.yaml", []byte(`source: {uri: "postgres://a@h/db"}
storage: {uri: "postgres://a@h/st"}
sync_rules: {content: "bucket_definitions: {}"}
pipelines:
  - name: out
    sink:
      type: `+name+`
      settings:
        retries: lots
        endpont: x
  - name: other
    sink: {type: check-unknown}
`))
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for _, e := range config.AsErrors(CheckSinks(cfg)) {
		lines = append(lines, e.Error())
	}
	joined := strings.Join(lines, "\n")
	for _, want := range []string{
		"c.yaml:9:9: pipelines[0].sink.settings.retries: want an integer",
		"c.yaml:10:9: pipelines[0].sink.settings.endpont: unknown setting (did you mean \"endpoint\"?",
		"c.yaml:8:7: pipelines[0].sink.settings.endpoint: required (sink " + name + ")",
		`c.yaml:12:12: pipelines[1].sink.type: unknown sink type "check-unknown"`,
	} {
		if !strings.Contains(joined, want) {
			t.Errorf("problems lack %q:\n%s", want, joined)
		}
	}
	if len(lines) != 4 {
		t.Errorf("%d problems; want 4:\n%s", len(lines), joined)
	}
}

// TestOpenSinkPassesPipeline checks what a factory gets from a configured
// pipeline: its checked settings, the pipeline's name, and the storage
// section.
func TestOpenSinkPassesPipeline(t *testing.T) {
	name := uniqSink("opened")
	sinks.MustRegister(name, checkedSpec, recordingFactory)
	cfg, err := config.LoadBytes("c.yaml", []byte(`source: {uri: "postgres://a@h/db"}
storage: {uri: "postgres://a@h/st", schema: sp}
sync_rules: {content: "bucket_definitions: {}"}
pipelines:
  - name: audit
    sink: {type: `+name+`, settings: {endpoint: "http://x", retries: 5}}
`))
	if err != nil {
		t.Fatal(err)
	}
	s, err := OpenSink(context.Background(), cfg, cfg.EffectivePipelines()[0], nil)
	if err != nil {
		t.Fatal(err)
	}
	rs := s.(*recordingSink)
	if rs.settings.String("endpoint") != "http://x" || rs.settings.Int("retries") != 5 || rs.settings.Duration("timeout") != 10*time.Second {
		t.Errorf("settings %+v", rs.settings)
	}
	if rs.env.Pipeline != "audit" || rs.env.Logger == nil || rs.env.Storage.URI != "postgres://a@h/st" || rs.env.Storage.Schema != "sp" {
		t.Errorf("env %+v", rs.env)
	}
}

// TestRunPipelinesRefusesBadRules checks that RunPipelines reports sync
// rules that do not parse at once, before it connects anywhere, rather
// than retrying them in every pipeline.
func TestRunPipelinesRefusesBadRules(t *testing.T) {
	cfg, err := config.LoadBytes("c.yaml", []byte(`source: {uri: "postgres://a@127.0.0.1:1/db"}
state_dir: state
sync_rules: {content: "bucket_definitions: {global: {data: [SELECT FROM]}}"}
pipelines:
  - name: out
    sink: {type: jsonl, settings: {dir: out}}
`))
	if err != nil {
		t.Fatal(err)
	}
	err = RunPipelines(context.Background(), Options{Config: cfg})
	if err == nil || !strings.Contains(err.Error(), "run pipelines: sync rules") {
		t.Errorf("err = %v; want the rules' error", err)
	}
}
