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
	"time"
)

// Env is what a Factory gets besides its settings: the context a sink lives
// in, which a sink's settings alone do not say.
type Env struct {
	// Pipeline is the name of the pipeline the sink serves, for log lines,
	// errors and sinks that keep per-pipeline state; empty when the sink
	// serves no named pipeline.
	Pipeline string
	// Logger is where the sink logs; Open sets slog.Default() when nil, so
	// a factory never has to check.
	Logger *slog.Logger
	// Storage is the bucket storage database of the config's storage
	// section, which the built-in bucketstore sink writes to; zero when
	// the config has none. Custom sinks rely on their settings only.
	Storage StorageConn
}

// StorageConn says how to reach the bucket storage database (the config's
// storage section). It is spelled out here, rather than the whole config
// passed, so that a sink sees only what it uses and this package does not
// depend on the config package.
type StorageConn struct {
	URI               string
	Schema            string
	MaxConns          int
	SynchronousCommit string
	ConnectTimeout    time.Duration
}

// Config names a sink type and gives its settings, as a YAML pipeline
// does in pipelines[].sink: Open builds a sink from it.
type Config struct {
	// Type is the registered sink type name.
	Type string
	// Settings are the raw settings as decoded from YAML (nil for none);
	// Open checks them against the type's Spec.
	Settings map[string]any
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

// Names returns the registered sink types, sorted, for validating the
// sink types a config names (config.CheckSinks) and for error messages.
func Names() []string {
	registryMu.RLock()
	defer registryMu.RUnlock()
	return slices.Sorted(maps.Keys(registry))
}

// ErrUnknownSink is matched (errors.Is) by Open's error when the pipeline
// names a sink type that is not registered, typically because the program
// lacks the blank import that registers it.
var ErrUnknownSink = errors.New("unknown sink type")

// Open builds a sink of type c.Type with the factory registered for it,
// passing it c.Settings checked against the type's Spec, and env. Errors
// name the sink type, and the pipeline when env.Pipeline is set; an
// unknown type also lists the registered ones. The caller owns the
// returned sink and must Close it.
func Open(ctx context.Context, c Config, env Env) (Sink, error) {
	who := ""
	if env.Pipeline != "" {
		who = fmt.Sprintf("pipeline %q: ", env.Pipeline)
	}
	registryMu.RLock()
	pl, ok := registry[c.Type]
	registryMu.RUnlock()
	if !ok {
		return nil, fmt.Errorf("%ssink %q: %w; registered: %s", who, c.Type, ErrUnknownSink, strings.Join(Names(), ", "))
	}
	if env.Logger == nil {
		env.Logger = slog.Default()
	}
	settings, err := pl.spec.Parse(c.Settings)
	if err != nil {
		return nil, fmt.Errorf("%ssink %s: %w", who, c.Type, err)
	}
	s, err := pl.factory(ctx, settings, env)
	if err != nil {
		return nil, fmt.Errorf("%ssink %s: %w", who, c.Type, err)
	}
	if s == nil {
		return nil, fmt.Errorf("%ssink %s: factory returned no sink", who, c.Type)
	}
	return s, nil
}
