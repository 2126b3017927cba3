package sinks

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"
)

// FieldType is the type of a sink setting's value in YAML.
type FieldType int

// Setting types.
const (
	FieldString   FieldType = iota + 1 // text (quote numbers: "5")
	FieldBool                          // true or false
	FieldInt                           // an integer
	FieldDuration                      // a Go duration string: "30s", "5m"
)

// String is the type's name in docs and errors.
func (t FieldType) String() string {
	switch t {
	case FieldString:
		return "string"
	case FieldBool:
		return "boolean"
	case FieldInt:
		return "integer"
	case FieldDuration:
		return "duration"
	}
	return fmt.Sprintf("FieldType(%d)", int(t))
}

// Field declares one setting of a sink (pipelines[].sink.settings.<Name>).
type Field struct {
	Name string
	Type FieldType
	// Default is the value when the setting is absent (of the Go type
	// Settings returns for Type); nil means none.
	Default any
	// Required settings have no default and must be given.
	Required bool
	// Doc says what the setting does, for the README reference.
	Doc string
}

// Spec declares a sink's settings, so that they are checked the same way
// everywhere — `syncpipe validate` (offline, with file and line), Open and
// the generated README reference — and a factory only reads typed values.
type Spec struct {
	// Summary is one sentence on what the sink does, for the reference.
	Summary string
	Fields  []Field
}

// Settings are a sink's settings checked against its Spec, defaults
// filled in.
type Settings struct {
	values map[string]any
}

// SettingError is one problem of a sink's settings; Key is the setting's
// name ("" for the settings as a whole).
type SettingError struct {
	Key string
	Msg string
}

func (e *SettingError) Error() string {
	if e.Key == "" {
		return "settings: " + e.Msg
	}
	return "settings." + e.Key + ": " + e.Msg
}

// Parse checks raw settings (as decoded from YAML; nil for none) against
// the spec: every setting known, of its type, the required ones present.
// It returns every problem at once, each a *SettingError (errors.Join).
func (sp Spec) Parse(raw map[string]any) (*Settings, error) {
	s := &Settings{values: make(map[string]any, len(sp.Fields))}
	var errs []error
	for _, k := range slices.Sorted(maps.Keys(raw)) {
		f, ok := sp.field(k)
		if !ok {
			errs = append(errs, &SettingError{Key: k, Msg: "unknown setting" + sp.hint(k)})
			continue
		}
		v, err := f.convert(raw[k])
		if err != nil {
			errs = append(errs, &SettingError{Key: k, Msg: err.Error()})
			continue
		}
		s.values[k] = v
	}
	for _, f := range sp.Fields {
		if _, set := s.values[f.Name]; set {
			continue
		}
		if _, given := raw[f.Name]; given {
			continue // wrong type, reported above
		}
		if f.Required {
			errs = append(errs, &SettingError{Key: f.Name, Msg: "required"})
		} else if f.Default != nil {
			s.values[f.Name] = f.Default
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return s, nil
}

func (sp Spec) field(name string) (Field, bool) {
	for _, f := range sp.Fields {
		if f.Name == name {
			return f, true
		}
	}
	return Field{}, false
}

// hint lists the known settings, naming the closest one first.
func (sp Spec) hint(name string) string {
	if len(sp.Fields) == 0 {
		return " (this sink takes no settings)"
	}
	names := make([]string, len(sp.Fields))
	best, bestD := "", 3
	for i, f := range sp.Fields {
		names[i] = f.Name
		if d := distance(name, f.Name); d < bestD {
			best, bestD = f.Name, d
		}
	}
	if best != "" {
		return fmt.Sprintf(" (did you mean %q? known: %s)", best, strings.Join(names, ", "))
	}
	return " (known: " + strings.Join(names, ", ") + ")"
}

// convert checks a YAML value against the field's type.
func (f Field) convert(v any) (any, error) {
	switch f.Type {
	case FieldString:
		if x, ok := v.(string); ok {
			return x, nil
		}
	// Text forms of booleans and integers are accepted too: environment
	// overrides deliver every value as a string.
	case FieldBool:
		switch x := v.(type) {
		case bool:
			return x, nil
		case string:
			if b, err := strconv.ParseBool(x); err == nil {
				return b, nil
			}
		}
	case FieldInt:
		switch x := v.(type) {
		case int:
			return x, nil
		case int64:
			return int(x), nil
		case float64:
			if x == float64(int(x)) {
				return int(x), nil
			}
		case string:
			if n, err := strconv.Atoi(x); err == nil {
				return n, nil
			}
		}
	case FieldDuration:
		if s, ok := v.(string); ok {
			d, err := time.ParseDuration(s)
			if err != nil || d < 0 {
				return nil, fmt.Errorf("want a duration such as 30s or 5m, got %q", s)
			}
			return d, nil
		}
	}
	article := "a"
	if f.Type == FieldInt {
		article = "an"
	}
	return nil, fmt.Errorf("want %s %s, got %s", article, f.Type, describe(v))
}

func describe(v any) string {
	switch x := v.(type) {
	case nil:
		return "nothing"
	case string:
		return fmt.Sprintf("the string %q", x)
	case bool:
		return fmt.Sprintf("the boolean %v", x)
	case int, int64, float64:
		return fmt.Sprintf("the number %v", x)
	case map[string]any:
		return "a mapping"
	case []any:
		return "a list"
	}
	return fmt.Sprintf("%T", v)
}

// distance is the edit distance of a and b (for "did you mean").
func distance(a, b string) int {
	prev := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur := make([]int, len(b)+1)
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev = cur
	}
	return prev[len(b)]
}

// Has reports whether the setting has a value (given or defaulted).
func (s *Settings) Has(name string) bool {
	_, ok := s.values[name]
	return ok
}

// String returns a FieldString setting ("" when absent).
func (s *Settings) String(name string) string { v, _ := s.values[name].(string); return v }

// Bool returns a FieldBool setting (false when absent).
func (s *Settings) Bool(name string) bool { v, _ := s.values[name].(bool); return v }

// Int returns a FieldInt setting (0 when absent).
func (s *Settings) Int(name string) int { v, _ := s.values[name].(int); return v }

// Duration returns a FieldDuration setting (0 when absent).
func (s *Settings) Duration(name string) time.Duration {
	v, _ := s.values[name].(time.Duration)
	return v
}

// CheckSettings checks c.Settings against the Spec its type was
// registered with, offline, and returns every problem as a *SettingError
// (errors.Join), or nil; a type that is not registered is not its to
// report (nil). The config-aware check that adds file positions lives with
// the assembly (replication.CheckSinks).
func CheckSettings(c Config) error {
	spec, ok := SpecOf(c.Type)
	if !ok {
		return nil
	}
	_, err := spec.Parse(c.Settings)
	return err
}

// Reference renders the settings of every registered sink as Markdown,
// for the README (generated like the config reference).
func Reference() string {
	var b strings.Builder
	for _, name := range Names() {
		spec, _ := SpecOf(name)
		fmt.Fprintf(&b, "**`%s`** — %s\n\n", name, spec.Summary)
		if len(spec.Fields) == 0 {
			b.WriteString("No settings.\n\n")
			continue
		}
		b.WriteString("| Setting | Type | Default | Description |\n| --- | --- | --- | --- |\n")
		for _, f := range spec.Fields {
			def := "—"
			switch {
			case f.Required:
				def = "required"
			case f.Default != nil:
				def = fmt.Sprintf("`%v`", f.Default)
			}
			fmt.Fprintf(&b, "| `%s` | %s | %s | %s |\n", f.Name, f.Type, def, strings.ReplaceAll(f.Doc, "|", `\|`))
		}
		b.WriteString("\n")
	}
	return strings.TrimRight(b.String(), "\n") + "\n"
}
