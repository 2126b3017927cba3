package sinks_test

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

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

// TestCheckSettingsOfRegisteredType checks a sink's settings against the
// spec of its registered type, and leaves unknown types to the caller.
func TestCheckSettingsOfRegisteredType(t *testing.T) {
	name := uniq("checked")
	sinks.MustRegister(name, testSpec, nopFactory)
	err := sinks.CheckSettings(sinks.Config{Type: name, Settings: map[string]any{"retries": "lots", "endpont": "x"}})
	var keys []string
	for _, e := range err.(interface{ Unwrap() []error }).Unwrap() {
		var se *sinks.SettingError
		if !errors.As(e, &se) {
			t.Fatalf("%v is no *SettingError", e)
		}
		keys = append(keys, se.Key)
	}
	if want := []string{"endpont", "retries", "endpoint"}; !slices.Equal(keys, want) {
		t.Errorf("problems at %v; want %v (%v)", keys, want, err)
	}
	if err := sinks.CheckSettings(sinks.Config{Type: name, Settings: map[string]any{"endpoint": "e"}}); err != nil {
		t.Errorf("good settings: %v", err)
	}
	if err := sinks.CheckSettings(sinks.Config{Type: "check-unregistered"}); err != nil {
		t.Errorf("unregistered type: %v; want nil (not CheckSettings' to report)", err)
	}
}
