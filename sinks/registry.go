package sinks

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"regexp"
	"slices"
	"strings"
	"sync"

	"github.com/syncpipe/syncpipe/config"
)

// Env is what a Factory gets besides its settings: the context a sink lives
// in, which a sink's settings alone do not say.
type Env struct {
	// Pipeline is the name of the pipeline the sink serves, for log lines
	// and for sinks that keep per-pipeline state. Open fills it in from
	// the pipeline when empty.
	Pipeline string
	// Logger is where the sink logs; Open sets slog.Default() when nil, so
	// a factory never has to check.
	Logger *slog.Logger
	// Config is the whole loaded configuration, for built-in sinks that
	// read a shared section (bucketstore uses the storage section). Nil
	// when a program builds a sink without a config file; custom sinks
	// should rely on their settings only.
	Config *config.Config
}

// Factory builds a sink from its settings (pipelines[].sink.settings),
// already checked against the Spec it was registered with: every key known,
// values of their declared types, defaults filled in. A factory checks only
// what a spec cannot say (a directory that must be writable, a group that
// must exist) and names the key in its errors (for example
// `settings.dir: permission denied`), because the user fixes the YAML from
// that message. Open adds the pipeline and sink type to the error. A
// factory is called from whatever goroutine calls Open, and ctx bounds the
// construction only (connecting, creating directories), not the sink's
// life.
type Factory func(ctx context.Context, settings *Settings, env Env) (Sink, error)

// sinkTypeRE is the config package's rule for pipelines[].sink.type, so
// that every registered name can also be written in YAML.
var sinkTypeRE = regexp.MustCompile(`^[a-z][a-z0-9_.-]*$`)

// plugin is one registered sink type.
type plugin struct {
	spec    Spec
	factory Factory
}

var (
	registryMu sync.RWMutex
	registry   = map[string]plugin{}
)

// Register makes a sink type available to YAML pipelines under name, with
// the settings spec validate, Open and the README reference use. It fails
// when name is already registered, is not a valid sink type name (a
// lowercase letter, then lowercase letters, digits, '_', '.' or '-'), or f
// is nil. It is safe for concurrent use, but sinks are normally registered
// before the config is loaded and checked, typically in main or an init
// function.
func Register(name string, spec Spec, f Factory) error {
	if !sinkTypeRE.MatchString(name) {
		return fmt.Errorf("register sink %q: invalid name: want a lowercase letter followed by lowercase letters, digits, _ . or -", name)
	}
	if f == nil {
		return fmt.Errorf("register sink %q: nil factory", name)
	}
	registryMu.Lock()
	defer registryMu.Unlock()
	if _, dup := registry[name]; dup {
		return fmt.Errorf("register sink %q: already registered", name)
	}
	registry[name] = plugin{spec: spec, factory: f}
	return nil
}

// MustRegister is Register for the init function of a built-in sink, where
// a failure is a programming error: it panics instead of returning it.
func MustRegister(name string, spec Spec, f Factory) {
	if err := Register(name, spec, f); err != nil {
		panic(err)
	}
}

// SpecOf returns the settings spec a sink type was registered with.
func SpecOf(name string) (Spec, bool) {
	registryMu.RLock()
	defer registryMu.RUnlock()
	p, ok := registry[name]
	return p.spec, ok
}

// Names returns the registered sink types, sorted; pass it to
// config.CheckSinks to reject unknown types while validating a config.
func Names() []string {
	registryMu.RLock()
	defer registryMu.RUnlock()
	return slices.Sorted(maps.Keys(registry))
}

// ErrUnknownSink is matched (errors.Is) by Open's error when the pipeline
// names a sink type that is not registered, typically because the program
// lacks the blank import that registers it.
var ErrUnknownSink = errors.New("unknown sink type")

// Open builds the sink of pipeline p with the factory registered for
// p.Sink.Type (config.SinkBucketstore when empty), passing it p.Sink.Settings
// and env. Errors name the pipeline and the sink type; an unknown type also
// lists the registered ones. The caller owns the returned sink and must
// Close it.
func Open(ctx context.Context, p config.Pipeline, env Env) (Sink, error) {
	typ := p.Sink.Type
	if typ == "" {
		typ = config.SinkBucketstore
	}
	registryMu.RLock()
	pl, ok := registry[typ]
	registryMu.RUnlock()
	if !ok {
		return nil, fmt.Errorf("pipeline %q: sink %q: %w; registered: %s", p.Name, typ, ErrUnknownSink, strings.Join(Names(), ", "))
	}
	if env.Pipeline == "" {
		env.Pipeline = p.Name
	}
	if env.Logger == nil {
		env.Logger = slog.Default()
	}
	settings, err := pl.spec.Parse(p.Sink.Settings)
	if err != nil {
		return nil, fmt.Errorf("pipeline %q: sink %s: %w", p.Name, typ, err)
	}
	s, err := pl.factory(ctx, settings, env)
	if err != nil {
		return nil, fmt.Errorf("pipeline %q: sink %s: %w", p.Name, typ, err)
	}
	if s == nil {
		return nil, fmt.Errorf("pipeline %q: sink %s: factory returned no sink", p.Name, typ)
	}
	return s, nil
}
