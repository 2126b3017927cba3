package config

import (
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// The walker checks a YAML node tree against the config structs before koanf
// decodes it. koanf (mapstructure) stops at the first problem and knows no
// positions; the walker finds every unknown key, duplicate key and type
// mismatch with its line and column, records where each key was set, and
// replaces bad values with null so that decoding the rest still succeeds.

// walker accumulates findings for one load.
type walker struct {
	file    string
	env     string              // set while walking a value from an env var
	idx     map[string]Location // key path -> where it was set
	scalars []scalarPos         // value scalars, to attribute ${VAR} errors to keys
	errs    Errors
	tainted []string // paths whose value was dropped; later errors there are noise
}

// scalarPos records the lines a scalar value spans.
type scalarPos struct {
	line, endLine, col int
	path               string
}

func newWalker(file string) *walker {
	return &walker{file: file, idx: make(map[string]Location)}
}

func (w *walker) loc(n *yaml.Node) Location {
	if w.env != "" {
		return Location{File: w.file, Env: w.env}
	}
	return Location{File: w.file, Line: n.Line, Column: n.Column}
}

// fail records a problem that drops the value at path.
func (w *walker) fail(at *yaml.Node, kind Kind, path, format string, args ...any) {
	w.errs = append(w.errs, newError(w.loc(at), kind, path, format, args...))
	w.tainted = append(w.tainted, path)
}

// walkRoot checks a parsed document against Config.
func (w *walker) walkRoot(doc *yaml.Node) {
	if doc.Kind != yaml.DocumentNode || len(doc.Content) == 0 {
		return // empty file: every key keeps its default
	}
	root := doc.Content[0]
	if !w.walk("", configType, root, root) {
		doc.Content = nil
	}
}

// walk checks n (positioned at at, usually the key) against type t and
// reports whether n may be passed on to koanf.
func (w *walker) walk(path string, t reflect.Type, n, at *yaml.Node) bool {
	n = deref(n)
	if n.Kind == yaml.ScalarNode && n.Line > 0 && w.env == "" {
		end := n.Line
		if n.Style&(yaml.LiteralStyle|yaml.FoldedStyle) != 0 {
			end += strings.Count(n.Value, "\n")
		}
		w.scalars = append(w.scalars, scalarPos{line: n.Line, endLine: end, col: n.Column, path: path})
	}
	if isNull(n) {
		return true // null or empty value: keep the default
	}
	switch sh := shapeOf(t); sh {
	case shapeStruct:
		return w.walkStruct(path, t, n, at)
	case shapeStringList, shapeStructList, shapeMapList:
		if n.Kind == yaml.ScalarNode && sh == shapeStringList {
			return w.walkScalar(path, shapeString, n, at) // one value = a list of one
		}
		if n.Kind != yaml.SequenceNode {
			w.fail(at, KindType, path, "expected a list, got %s", describe(n))
			return false
		}
		for i, e := range n.Content {
			ep := fmt.Sprintf("%s[%d]", path, i)
			w.idx[ep] = w.loc(e)
			if !w.walk(ep, t.Elem(), e, e) {
				n.Content[i] = nullNode(e)
			}
		}
		return true
	case shapeMap:
		if n.Kind != yaml.MappingNode {
			w.fail(at, KindType, path, "expected a mapping, got %s", describe(n))
			return false
		}
		// Free-form keys are checked elsewhere (a sink's settings by its
		// spec); their positions let those checks name the line.
		for i := 0; i+1 < len(n.Content); i += 2 {
			w.idx[path+"."+n.Content[i].Value] = w.loc(n.Content[i])
		}
		return true
	default:
		return w.walkScalar(path, sh, n, at)
	}
}

// walkStruct checks a mapping against the keys of struct type t.
func (w *walker) walkStruct(path string, t reflect.Type, n, at *yaml.Node) bool {
	if n.Kind != yaml.MappingNode {
		what := "a mapping"
		if path == "" {
			what = "a mapping of sections (source, storage, ...)"
		}
		w.fail(at, KindType, path, "expected %s, got %s", what, describe(n))
		return false
	}
	seen := make(map[string]*yaml.Node)
	kept := make([]*yaml.Node, 0, len(n.Content))
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if k.Kind == yaml.ScalarNode && k.ShortTag() == "!!merge" {
			w.walkMerge(path, t, v)
			kept = append(kept, k, v)
			continue
		}
		child := joinPath(path, k.Value)
		if first, dup := seen[k.Value]; dup {
			// Drop it (koanf's YAML parser rejects duplicates); the first
			// value is still checked, so the path is not tainted.
			w.errs = append(w.errs, newError(w.loc(k), KindDuplicateKey, child, "duplicate key (first set at line %d)", first.Line))
			continue
		}
		seen[k.Value] = k
		f, ok := lookupField(t, k.Value)
		if !ok {
			if path == "" && strings.HasPrefix(k.Value, "x-") {
				kept = append(kept, k, v) // extension key, e.g. to hold YAML anchors
				continue
			}
			w.errs = append(w.errs, newError(w.loc(k), KindUnknownKey, child, "unknown key%s", suggest(t, k.Value)))
			kept = append(kept, k, v) // harmless: decoding ignores unknown keys
			continue
		}
		w.idx[child] = w.loc(k)
		if !w.walk(child, f.typ, v, k) {
			v = nullNode(v)
		}
		kept = append(kept, k, v)
	}
	n.Content = kept
	return true
}

// walkMerge checks the mappings merged in with "<<: *anchor".
func (w *walker) walkMerge(path string, t reflect.Type, v *yaml.Node) {
	v = deref(v)
	if v.Kind == yaml.SequenceNode {
		for _, e := range v.Content {
			w.walkStruct(path, t, deref(e), e)
		}
		return
	}
	w.walkStruct(path, t, v, v)
}

// walkScalar checks a scalar against a scalar shape, mirroring what the
// weakly typed koanf decode accepts (numeric strings for numbers) but
// rejecting unit-less durations, which koanf would read as nanoseconds.
func (w *walker) walkScalar(path string, sh shape, n, at *yaml.Node) bool {
	if n.Kind != yaml.ScalarNode {
		w.fail(at, KindType, path, "expected %s, got %s", article(shapeName(sh)), describe(n))
		return false
	}
	tag, v := n.ShortTag(), n.Value
	var err error
	switch sh {
	case shapeString:
		n.Tag = "!!str" // keep 123 or 2024-01-01 a string through decoding
		return true
	case shapeInt:
		if tag == "!!int" {
			var x int64
			err = n.Decode(&x)
		} else if tag == "!!str" {
			_, err = strconv.ParseInt(v, 0, 64)
		} else {
			err = errWrongTag
		}
	case shapeFloat:
		if tag == "!!int" || tag == "!!float" {
			var x float64
			err = n.Decode(&x)
		} else if tag == "!!str" {
			_, err = strconv.ParseFloat(v, 64)
		} else {
			err = errWrongTag
		}
	case shapeBool:
		if tag != "!!bool" {
			_, err = strconv.ParseBool(v)
		}
	case shapeDuration:
		return w.checkDuration(path, tag, n, at)
	case shapeBytes:
		if tag == "!!int" {
			var x int64
			err = n.Decode(&x)
		} else if _, perr := ParseByteSize(v); perr != nil {
			w.fail(at, KindType, path, "%v", perr)
			return false
		}
	}
	if err != nil {
		w.fail(at, KindType, path, "expected %s, got %s", article(shapeName(sh)), describe(n))
		return false
	}
	return true
}

var errWrongTag = fmt.Errorf("wrong YAML type")

func (w *walker) checkDuration(path, tag string, n, at *yaml.Node) bool {
	v := n.Value
	if tag == "!!int" && strings.Trim(v, "0") == "" {
		return true // a bare 0 is unambiguous
	}
	if _, err := strconv.ParseFloat(v, 64); err == nil && (tag != "!!str" || v != "0") {
		w.fail(at, KindType, path, "duration %s has no unit (write e.g. \"%ss\")", v, v)
		return false
	}
	if _, err := time.ParseDuration(v); err != nil {
		w.fail(at, KindType, path, "invalid duration %s (use e.g. 500ms, 30s, 5m, 1h)", describe(n))
		return false
	}
	return true
}

// deref follows YAML aliases to the anchored node.
func deref(n *yaml.Node) *yaml.Node {
	for n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	return n
}

func isNull(n *yaml.Node) bool {
	return n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null"
}

// nullNode replaces a rejected value, keeping its anchor so aliases still resolve.
func nullNode(old *yaml.Node) *yaml.Node {
	return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!null", Value: "null", Anchor: old.Anchor, Line: old.Line, Column: old.Column}
}

// describe names what was found, for "expected X, got Y" messages.
func describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		v := n.Value
		if len(v) > 40 {
			v = v[:37] + "..."
		}
		return strconv.Quote(v)
	}
	return "an unsupported YAML node"
}

// article prefixes a type name with "a" or "an".
func article(s string) string {
	if strings.IndexByte("aeiou", s[0]) >= 0 {
		return "an " + s
	}
	return "a " + s
}
