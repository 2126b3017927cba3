package config

import (
	"fmt"
	"reflect"
	"strings"
	"sync"
	"time"
)

// This file derives the config schema (keys, shapes, docs) from the Go
// structs by reflection, so the walker, the env overlay and Reference can
// never disagree with the structs koanf decodes into.

// shape is how a Go field type looks in YAML.
type shape int

const (
	shapeStruct     shape = iota // mapping with known keys
	shapeString                  // any scalar
	shapeInt                     // integer scalar
	shapeFloat                   // number scalar
	shapeBool                    // boolean scalar
	shapeDuration                // Go duration string ("30s")
	shapeBytes                   // integer or "16MiB"
	shapeStringList              // list of scalars (or one scalar)
	shapeStructList              // list of mappings with known keys
	shapeMapList                 // list of free-form mappings
	shapeMap                     // free-form mapping
)

var (
	configType   = reflect.TypeFor[Config]()
	durationType = reflect.TypeFor[time.Duration]()
	byteSizeType = reflect.TypeFor[ByteSize]()
)

// shapeOf classifies a field type; the config structs use only these types,
// and TestEveryFieldHasShapeAndDoc keeps it that way.
func shapeOf(t reflect.Type) shape {
	switch {
	case t == durationType:
		return shapeDuration
	case t == byteSizeType:
		return shapeBytes
	}
	switch t.Kind() {
	case reflect.Struct:
		return shapeStruct
	case reflect.String:
		return shapeString
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return shapeInt
	case reflect.Float32, reflect.Float64:
		return shapeFloat
	case reflect.Bool:
		return shapeBool
	case reflect.Map:
		return shapeMap
	case reflect.Slice:
		switch t.Elem().Kind() {
		case reflect.String:
			return shapeStringList
		case reflect.Struct:
			return shapeStructList
		case reflect.Map:
			return shapeMapList
		}
	}
	panic(fmt.Sprintf("config: unsupported field type %s", t))
}

// shapeName is the type column of Reference and the "expected ..." part of
// type errors.
func shapeName(s shape) string {
	return [...]string{
		shapeStruct:     "mapping",
		shapeString:     "string",
		shapeInt:        "integer",
		shapeFloat:      "number",
		shapeBool:       "boolean",
		shapeDuration:   "duration",
		shapeBytes:      "byte size",
		shapeStringList: "list of strings",
		shapeStructList: "list of mappings",
		shapeMapList:    "list of mappings",
		shapeMap:        "mapping",
	}[s]
}

// field is one koanf-tagged struct field.
type field struct {
	key   string // YAML key
	index int    // struct field index
	typ   reflect.Type
	doc   string // `doc` tag
	def   string // `default` tag (display override for Reference)
}

var fieldCache sync.Map // reflect.Type -> []field

// fieldsOf lists the koanf-tagged fields of a struct type, in declaration order.
func fieldsOf(t reflect.Type) []field {
	if v, ok := fieldCache.Load(t); ok {
		return v.([]field)
	}
	var out []field
	for i := range t.NumField() {
		sf := t.Field(i)
		key := sf.Tag.Get("koanf")
		if key == "" || !sf.IsExported() {
			continue
		}
		out = append(out, field{key: key, index: i, typ: sf.Type, doc: sf.Tag.Get("doc"), def: sf.Tag.Get("default")})
	}
	fieldCache.Store(t, out)
	return out
}

// lookupField finds the field of struct type t with YAML key key.
func lookupField(t reflect.Type, key string) (field, bool) {
	for _, f := range fieldsOf(t) {
		if f.key == key {
			return f, true
		}
	}
	return field{}, false
}

// schemaKey is one key of the schema, for Reference and "did you mean".
type schemaKey struct {
	path   string // "api.auth.audience", "pipelines[].name"
	field  field
	inList bool // below a list of mappings: no env variable of its own
}

// schemaKeys lists every key depth-first, sections before their children.
var schemaKeys = sync.OnceValue(func() []schemaKey {
	var out []schemaKey
	var visit func(prefix string, t reflect.Type, inList bool)
	visit = func(prefix string, t reflect.Type, inList bool) {
		for _, f := range fieldsOf(t) {
			p := joinPath(prefix, f.key)
			out = append(out, schemaKey{path: p, field: f, inList: inList})
			switch shapeOf(f.typ) {
			case shapeStruct:
				visit(p, f.typ, inList)
			case shapeStructList:
				visit(p+"[]", f.typ.Elem(), true)
			}
		}
	}
	visit("", configType, false)
	return out
})

// joinPath appends a key to a key path.
func joinPath(prefix, key string) string {
	if prefix == "" {
		return key
	}
	return prefix + "." + key
}

// parentPath strips the last key or index: "a.b[2].c" -> "a.b[2]" -> "a.b".
func parentPath(p string) string {
	i := strings.LastIndexAny(p, ".[")
	if i < 0 {
		return ""
	}
	return p[:i]
}

// within reports whether path p is at or below path root.
func within(p, root string) bool {
	if root == "" || p == root {
		return true
	}
	return strings.HasPrefix(p, root) && (p[len(root)] == '.' || p[len(root)] == '[')
}

// suggest returns a ` (did you mean "x"?)` hint for an unknown key: a close
// sibling key, else the same key in another section.
func suggest(t reflect.Type, name string) string {
	best, bestD := "", maxTypos(name)+1
	for _, f := range fieldsOf(t) {
		if d := editDistance(strings.ToLower(name), f.key); d < bestD {
			best, bestD = f.key, d
		}
	}
	if best != "" {
		return fmt.Sprintf(" (did you mean %q?)", best)
	}
	for _, k := range schemaKeys() {
		if k.field.key == name {
			return fmt.Sprintf(" (did you mean %s?)", k.path)
		}
	}
	return ""
}

// maxTypos is how many edits still count as a typo for a key of this length.
func maxTypos(s string) int {
	switch n := len(s); {
	case n <= 4:
		return 1
	case n <= 10:
		return 2
	default:
		return 3
	}
}

// editDistance is the Levenshtein distance between a and b.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
