package sinks_test

import (
	"strings"
	"testing"
	"time"

	"github.com/syncpipe/syncpipe/config"
	"github.com/syncpipe/syncpipe/sinks"
)

var testSpec = sinks.Spec{Summary: "test", Fields: []sinks.Field{
	{Name: "endpoint", Type: sinks.FieldString, Required: true, Doc: "URL"},
	{Name: "retries", Type: sinks.FieldInt, Default: 3},
	{Name: "gzip", Type: sinks.FieldBool, Default: true},
	{Name: "timeout", Type: sinks.FieldDuration, Default: 10 * time.Second},
}}

func TestSpecParse(t *testing.T) {
	s, err := testSpec.Parse(map[string]any{"endpoint": "http://x", "gzip": "false", "retries": "5", "timeout": "2s"})
	if err != nil {
		t.Fatal(err)
	}
	if s.String("endpoint") != "http://x" || s.Bool("gzip") || s.Int("retries") != 5 || s.Duration("timeout") != 2*time.Second {
		t.Errorf("parsed %+v", s)
	}
	s, err = testSpec.Parse(map[string]any{"endpoint": "e"})
	if err != nil {
		t.Fatal(err)
	}
	if !s.Bool("gzip") || s.Int("retries") != 3 || s.Duration("timeout") != 10*time.Second {
		t.Errorf("defaults not filled in: %+v", s)
	}
	_, err = testSpec.Parse(map[string]any{"retries": 1.5, "gzp": true, "timeout": "soon", "gzip": 1})
	for _, want := range []string{
		`settings.endpoint: required`,
		`settings.retries: want an integer, got the number 1.5`,
		`settings.gzp: unknown setting (did you mean "gzip"? known: endpoint, retries, gzip, timeout)`,
		`settings.timeout: want a duration such as 30s or 5m, got "soon"`,
		`settings.gzip: want a boolean, got the number 1`,
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v lacks %q", err, want)
		}
	}
	if _, err := (sinks.Spec{}).Parse(map[string]any{"x": 1}); err == nil || !strings.Contains(err.Error(), "takes no settings") {
		t.Errorf("settings of a sink without any: %v", err)
	}
}

// TestCheckSettingsNamesLines checks that sink settings problems point at
// the line of the setting in the file.
func TestCheckSettingsNamesLines(t *testing.T) {
	name := uniq("checked")
	sinks.MustRegister(name, testSpec, nopFactory)
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
`))
	if err != nil {
		t.Fatal(err)
	}
	got := config.AsErrors(sinks.CheckSettings(cfg))
	var lines []string
	for _, e := range got {
		lines = append(lines, e.Error())
	}
	joined := strings.Join(lines, "\n")
	for _, want := range []string{
		"c.yaml:9:9: pipelines[0].sink.settings.retries: want an integer",
		"c.yaml:10:9: pipelines[0].sink.settings.endpont: unknown setting (did you mean \"endpoint\"?",
		"c.yaml:8:7: pipelines[0].sink.settings.endpoint: required",
	} {
		if !strings.Contains(joined, want) {
			t.Errorf("problems lack %q:\n%s", want, joined)
		}
	}
}
