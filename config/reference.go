package config

import (
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"time"
)

// Reference renders every config key as a Markdown table (key, type,
// default, env variable, description) for the README. It is derived from the
// structs, their `doc` tags and Default(), so it cannot drift from the code;
// testdata/reference.md is its golden copy.
func Reference() string {
	var b strings.Builder
	b.WriteString("| Key | Type | Default | Env | Description |\n")
	b.WriteString("| --- | --- | --- | --- | --- |\n")
	defaults := reflect.ValueOf(Default()).Elem()
	for _, k := range schemaKeys() {
		sh := shapeOf(k.field.typ)
		typ := shapeName(sh)
		if sh == shapeStruct {
			typ = "section"
		}
		env := "—"
		if !k.inList {
			env = "`" + envName(k.path) + "`"
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s | %s | %s |\n", k.path, typ, referenceDefault(k, sh, defaults), env,
			strings.ReplaceAll(k.field.doc, "|", `\|`))
	}
	return b.String()
}

// referenceDefault renders the default of one key.
func referenceDefault(k schemaKey, sh shape, defaults reflect.Value) string {
	if sh == shapeStruct {
		return ""
	}
	if k.field.def != "" {
		if strings.Contains(k.field.def, ".") {
			return "inherits `" + k.field.def + "`"
		}
		return "`" + k.field.def + "`"
	}
	if k.inList {
		return "—"
	}
	v := defaults
	for _, key := range strings.Split(k.path, ".") {
		f, _ := lookupField(v.Type(), key)
		v = v.Field(f.index)
	}
	return formatDefault(v, sh)
}

// formatDefault prints a default value as an operator would write it in YAML.
func formatDefault(v reflect.Value, sh shape) string {
	switch sh {
	case shapeString:
		if v.String() == "" {
			return "—"
		}
		return "`" + strconv.Quote(v.String()) + "`"
	case shapeDuration:
		return "`" + fmtDuration(time.Duration(v.Int())) + "`"
	case shapeBytes:
		return "`" + ByteSize(v.Int()).String() + "`"
	case shapeInt:
		return "`" + strconv.FormatInt(v.Int(), 10) + "`"
	case shapeFloat:
		return "`" + strconv.FormatFloat(v.Float(), 'g', -1, 64) + "`"
	case shapeBool:
		return "`" + strconv.FormatBool(v.Bool()) + "`"
	default:
		if v.Len() == 0 {
			return "—"
		}
		return fmt.Sprintf("`%v`", v.Interface())
	}
}
