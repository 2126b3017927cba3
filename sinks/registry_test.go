package sinks_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"go.uber.org/goleak"

	"github.com/syncpipe/syncpipe/sinks"
)

// The pipelines these tests run must not leave goroutines behind. A test
// binary started by TestFileProgressSurvivesKill commits progress until it
// is killed instead of running tests (fileprogress_test.go).
func TestMain(m *testing.M) {
	if path := os.Getenv(progressChildEnv); path != "" {
		commitUntilKilled(path)
	}
	goleak.VerifyTestMain(m)
}

// The registry is process-wide and has no Unregister, so every test
// registers names of its own, made unique per run so that -count=N works.
var runs atomic.Int64

func uniq(name string) string { return fmt.Sprintf("%s-%d", name, runs.Add(1)) }

func nopFactory(context.Context, *sinks.Settings, sinks.Env) (sinks.Sink, error) {
	return &fakeSink{}, nil
}

func TestRegisterRejectsBadNames(t *testing.T) {
	for _, name := range []string{"", "Jsonl", "1sink", "_sink", "my sink", "a/b", "bücher"} {
		if err := sinks.Register(name, sinks.Spec{}, nopFactory); err == nil {
			t.Errorf("Register(%q) succeeded; want invalid name error", name)
		}
	}
	if slices.Contains(sinks.Names(), "") {
		t.Error("a rejected name was registered")
	}
	for _, name := range []string{uniq("reg-ok"), uniq("reg_ok.v2")} {
		if err := sinks.Register(name, sinks.Spec{}, nopFactory); err != nil {
			t.Errorf("Register(%q): %v", name, err)
		}
	}
}

func TestRegisterRejectsNilAndDuplicate(t *testing.T) {
	name := uniq("reg-nil")
	if err := sinks.Register(name, sinks.Spec{}, nil); err == nil || !strings.Contains(err.Error(), "nil factory") {
		t.Errorf("nil factory: err = %v", err)
	}
	if slices.Contains(sinks.Names(), name) {
		t.Error("nil factory was registered")
	}
	name = uniq("reg-dup")
	if err := sinks.Register(name, sinks.Spec{}, nopFactory); err != nil {
		t.Fatal(err)
	}
	err := sinks.Register(name, sinks.Spec{}, nopFactory)
	if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("%q: already registered", name)) {
		t.Errorf("duplicate: err = %v", err)
	}
}

func TestMustRegisterPanicsOnDuplicate(t *testing.T) {
	name := uniq("reg-must")
	sinks.MustRegister(name, sinks.Spec{}, nopFactory)
	defer func() {
		if r := recover(); r == nil {
			t.Error("second MustRegister did not panic")
		}
	}()
	sinks.MustRegister(name, sinks.Spec{}, nopFactory)
}

func TestNamesSorted(t *testing.T) {
	za, aa := uniq("names-z"), uniq("names-a")
	sinks.MustRegister(za, sinks.Spec{}, nopFactory)
	sinks.MustRegister(aa, sinks.Spec{}, nopFactory)
	names := sinks.Names()
	if !slices.IsSorted(names) {
		t.Errorf("Names not sorted: %v", names)
	}
	if !slices.Contains(names, za) || !slices.Contains(names, aa) {
		t.Errorf("Names = %v; want names-a and names-z", names)
	}
}

func TestOpenPassesSettingsAndEnv(t *testing.T) {
	var gotSettings *sinks.Settings
	var gotEnv sinks.Env
	want := &fakeSink{}
	typ := uniq("open-rec")
	spec := sinks.Spec{Fields: []sinks.Field{{Name: "dir", Type: sinks.FieldString, Required: true}}}
	sinks.MustRegister(typ, spec, func(_ context.Context, s *sinks.Settings, env sinks.Env) (sinks.Sink, error) {
		gotSettings, gotEnv = s, env
		return want, nil
	})
	c := sinks.Config{Type: typ, Settings: map[string]any{"dir": "out"}}
	s, err := sinks.Open(context.Background(), c, sinks.Env{Pipeline: "audit"})
	if err != nil {
		t.Fatal(err)
	}
	if s != want || gotSettings.String("dir") != "out" || gotEnv.Pipeline != "audit" || gotEnv.Logger == nil {
		t.Errorf("sink %p (want %p), settings %v, env %+v", s, want, gotSettings, gotEnv)
	}

	logger := slog.New(slog.DiscardHandler)
	if _, err := sinks.Open(context.Background(), c, sinks.Env{Pipeline: "other", Logger: logger}); err != nil {
		t.Fatal(err)
	}
	if gotEnv.Pipeline != "other" || gotEnv.Logger != logger {
		t.Errorf("Open replaced a given env: %+v", gotEnv)
	}
}

func TestOpenUnknownType(t *testing.T) {
	known := uniq("unknown-known")
	sinks.MustRegister(known, sinks.Spec{}, nopFactory)
	_, err := sinks.Open(context.Background(), sinks.Config{Type: "nosuch"}, sinks.Env{Pipeline: "p1"})
	if !errors.Is(err, sinks.ErrUnknownSink) {
		t.Fatalf("err = %v; want ErrUnknownSink", err)
	}
	for _, part := range []string{`pipeline "p1"`, `"nosuch"`, known} {
		if !strings.Contains(err.Error(), part) {
			t.Errorf("err %q does not mention %s", err, part)
		}
	}
	// Without a pipeline name the error names the sink alone.
	if _, err := sinks.Open(context.Background(), sinks.Config{}, sinks.Env{}); !errors.Is(err, sinks.ErrUnknownSink) ||
		!strings.HasPrefix(err.Error(), `sink "": unknown sink type`) {
		t.Errorf("empty type: err = %v; want an unknown sink error without a pipeline", err)
	}
}

func TestOpenFactoryFailure(t *testing.T) {
	bad := errors.New("settings.dir: required")
	badType, nilType := uniq("open-bad"), uniq("open-nil")
	sinks.MustRegister(badType, sinks.Spec{}, func(context.Context, *sinks.Settings, sinks.Env) (sinks.Sink, error) { return nil, bad })
	sinks.MustRegister(nilType, sinks.Spec{}, func(context.Context, *sinks.Settings, sinks.Env) (sinks.Sink, error) { return nil, nil })

	_, err := sinks.Open(context.Background(), sinks.Config{Type: badType}, sinks.Env{Pipeline: "p2"})
	if want := `pipeline "p2": sink ` + badType + `: settings.dir: required`; !errors.Is(err, bad) || err.Error() != want {
		t.Errorf("err = %v; want %s", err, want)
	}
	_, err = sinks.Open(context.Background(), sinks.Config{Type: nilType}, sinks.Env{Pipeline: "p3"})
	if err == nil || !strings.Contains(err.Error(), "no sink") {
		t.Errorf("nil sink: err = %v", err)
	}
}
