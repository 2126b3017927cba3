package config

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strings"

	"github.com/knadh/koanf/parsers/yaml"
	"github.com/knadh/koanf/providers/env/v2"
	"github.com/knadh/koanf/providers/rawbytes"
	"github.com/knadh/koanf/v2"
	yamlv3 "go.yaml.in/yaml/v3"

	"github.com/syncpipe/syncpipe/internal/yamlpos"
)

// EnvPrefix starts every environment override: SYNCPIPE_<SECTION>__<KEY>,
// with a double underscore for each level of nesting.
const EnvPrefix = "SYNCPIPE_"

// Loader loads configuration with an injectable environment, so tests need
// not mutate the process environment. The zero Loader uses os.Environ.
type Loader struct {
	// Environ returns the environment as KEY=VALUE pairs; nil means os.Environ.
	// It feeds both ${VAR} interpolation and SYNCPIPE_ overrides.
	Environ func() []string
}

// meta remembers where each key came from, for positions in Validate errors.
type meta struct {
	file    string
	idx     map[string]Location
	tainted []string
}

// Load reads, interpolates, overrides from the process environment, decodes
// and validates the config file at path. On any problem it returns nil and
// an Errors listing all of them.
func Load(path string) (*Config, error) { return Loader{}.Load(path) }

// LoadBytes is Load for a config held in memory; name is used in error
// positions and its directory anchors a relative sync_rules.path.
func LoadBytes(name string, data []byte) (*Config, error) { return Loader{}.LoadBytes(name, data) }

// Load is the package-level Load with l's environment.
func (l Loader) Load(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		cause := err
		var pe *fs.PathError
		if errors.As(err, &pe) {
			cause = pe.Err // the path is already the error's location
		}
		return nil, Errors{{Location: Location{File: path}, Kind: KindFile, Msg: fmt.Sprintf("cannot read config: %v", cause), Err: err}}
	}
	return l.LoadBytes(path, data)
}

// LoadBytes is the package-level LoadBytes with l's environment.
func (l Loader) LoadBytes(name string, data []byte) (*Config, error) {
	environ := l.Environ
	if environ == nil {
		environ = os.Environ
	}
	envMap := make(map[string]string)
	for _, kv := range environ() {
		if k, v, ok := strings.Cut(kv, "="); ok {
			envMap[k] = v
		}
	}
	lookup := func(k string) (string, bool) { v, ok := envMap[k]; return v, ok }

	text, hits := interpolate(data, lookup)
	w := newWalker(name)
	var doc yamlv3.Node
	if err := yamlv3.Unmarshal(text, &doc); err != nil {
		w.errs = append(w.errs, syntaxError(name, text, err))
		w.addInterpErrors(hits)
		return nil, w.errs.orNil()
	}
	w.walkRoot(&doc)
	w.addInterpErrors(hits)

	k := koanf.New(".")
	if len(doc.Content) > 0 {
		pruned, err := yamlv3.Marshal(&doc)
		if err == nil {
			err = k.Load(rawbytes.Provider(pruned), yaml.Parser())
		}
		if err != nil {
			w.errs = append(w.errs, &Error{Location: Location{File: name}, Kind: KindSyntax, Msg: err.Error(), Err: err})
			return nil, w.errs.orNil()
		}
	}
	ov := &envOverlay{w: w}
	if err := k.Load(env.Provider(".", env.Opt{Prefix: EnvPrefix, TransformFunc: ov.transform, EnvironFunc: environ}), nil); err != nil {
		return nil, fmt.Errorf("config: reading environment: %w", err)
	}

	cfg := Default()
	if err := k.UnmarshalWithConf("", cfg, koanf.UnmarshalConf{Tag: "koanf"}); err != nil {
		// The walker rejects what would fail here; reaching this is a bug.
		w.errs = append(w.errs, &Error{Location: Location{File: name}, Kind: KindType, Msg: fmt.Sprintf("decoding: %v", err), Err: err})
		return nil, w.errs.orNil()
	}
	cfg.meta = &meta{file: name, idx: w.idx, tainted: w.tainted}
	if p := cfg.SyncRules.Path; p != "" && !filepath.IsAbs(p) && cfg.Location("sync_rules.path").Env == "" {
		cfg.SyncRules.Path = filepath.Join(filepath.Dir(name), p)
	}
	if d := cfg.StateDir; d != "" && !filepath.IsAbs(d) && cfg.Location("state_dir").Env == "" {
		cfg.StateDir = filepath.Join(filepath.Dir(name), d)
	}
	errs := w.errs
	if verr := cfg.Validate(); verr != nil {
		errs = append(errs, AsErrors(verr)...)
	}
	if err := errs.orNil(); err != nil {
		return nil, err
	}
	return cfg, nil
}

// syntaxError turns a go-yaml parse error into a positioned Error (see
// yamlpos.Locate).
func syntaxError(file string, text []byte, err error) *Error {
	p := yamlpos.Locate(text, err)
	return &Error{Location: Location{File: file, Line: p.Line, Column: p.Column}, Kind: KindSyntax, Msg: "YAML syntax error: " + p.Msg, Err: err}
}

// addInterpErrors reports ${VAR} problems under the key whose value held them.
func (w *walker) addInterpErrors(hits []interpHit) {
	for _, h := range hits {
		path, bestCol := "", 0
		for _, s := range w.scalars {
			inside := h.line > s.line && h.line <= s.endLine || h.line == s.line && s.col <= h.outCol
			if inside && s.col >= bestCol {
				path, bestCol = s.path, s.col
			}
		}
		w.errs = append(w.errs, &Error{Location: Location{File: w.file, Line: h.line, Column: h.col}, Kind: KindInterpolation, Path: path, Msg: h.msg})
		if path != "" {
			w.tainted = append(w.tainted, path)
		}
	}
}

// envName is the environment variable that overrides the key at path.
func envName(path string) string {
	return EnvPrefix + strings.ToUpper(strings.ReplaceAll(path, ".", "__"))
}

// envOverlay validates SYNCPIPE_ variables as koanf's env provider reads them.
type envOverlay struct{ w *walker }

// transform maps SYNCPIPE_API__AUTH__AUDIENCE to api.auth.audience and its
// value to what koanf should merge; it returns "" to skip a variable.
// Variables with no "__" that do not name a section (SYNCPIPE_CONFIG, ...)
// are left to other tools; every other SYNCPIPE_ variable must be a key.
func (o *envOverlay) transform(name, value string) (string, any) {
	segs := strings.Split(strings.ToLower(strings.TrimPrefix(name, EnvPrefix)), "__")
	if len(segs) == 1 {
		if _, ok := lookupField(configType, segs[0]); !ok {
			return "", nil
		}
	}
	w := o.w
	w.env = name
	defer func() { w.env = "" }()
	at := &yamlv3.Node{}
	t, path := configType, ""
	for _, s := range segs {
		if shapeOf(t) != shapeStruct {
			w.fail(at, KindUnknownKey, path, "cannot be set key by key from the environment; set %s to a YAML/JSON value instead", envName(path))
			return "", nil
		}
		f, ok := lookupField(t, s)
		if !ok {
			w.errs = append(w.errs, newError(w.loc(at), KindUnknownKey, joinPath(path, s), "unknown key%s", suggest(t, s)))
			return "", nil
		}
		t, path = f.typ, joinPath(path, s)
	}
	node, ok := o.node(path, t, value)
	if !ok || !w.walk(path, t, node, node) {
		return "", nil
	}
	w.idx[path] = w.loc(node)
	switch shapeOf(t) {
	case shapeStruct, shapeStructList, shapeMapList, shapeMap, shapeStringList:
		var v any
		if err := node.Decode(&v); err != nil {
			w.fail(node, KindType, path, "%v", err)
			return "", nil
		}
		if v == nil {
			return "", nil
		}
		return path, v
	}
	return path, value
}

// node turns an env value into a YAML node of the field's shape: scalars stay
// strings, string lists are comma-separated (or a YAML flow list), and
// mappings or lists of mappings are YAML/JSON.
func (o *envOverlay) node(path string, t reflect.Type, value string) (*yamlv3.Node, bool) {
	sh := shapeOf(t)
	trimmed := strings.TrimSpace(value)
	switch {
	case sh == shapeStringList && !strings.HasPrefix(trimmed, "["):
		seq := &yamlv3.Node{Kind: yamlv3.SequenceNode, Tag: "!!seq"}
		for _, part := range strings.Split(value, ",") {
			if part = strings.TrimSpace(part); part != "" {
				seq.Content = append(seq.Content, &yamlv3.Node{Kind: yamlv3.ScalarNode, Tag: "!!str", Value: part})
			}
		}
		return seq, true
	case sh == shapeStringList || sh == shapeStruct || sh == shapeStructList || sh == shapeMapList || sh == shapeMap:
		var doc yamlv3.Node
		if err := yamlv3.Unmarshal([]byte(value), &doc); err != nil {
			o.w.fail(&yamlv3.Node{}, KindSyntax, path, "value is not valid YAML/JSON: %s", strings.TrimPrefix(err.Error(), "yaml: "))
			return nil, false
		}
		if len(doc.Content) == 0 {
			return &yamlv3.Node{Kind: yamlv3.ScalarNode, Tag: "!!null", Value: "null"}, true
		}
		return doc.Content[0], true
	default:
		return &yamlv3.Node{Kind: yamlv3.ScalarNode, Tag: "!!str", Value: value}, true
	}
}
