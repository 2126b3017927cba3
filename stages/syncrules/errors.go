package syncrules

import (
	"fmt"
	"strings"
)

// Level grades a RuleError the way PowerSync's compiler does.
type Level uint8

// LevelWarning is reported, and the rules still load and run as they are
// (PowerSync's "warning" errors, e.g. a column the source lacks). The zero
// Level is fatal: it rejects the rules.
const LevelWarning Level = 1

// String returns "fatal" or "warning", PowerSync's names.
func (l Level) String() string {
	if l == LevelWarning {
		return "warning"
	}
	return "fatal"
}

// RuleError is one problem found while loading or checking sync rules. It
// names the place precisely enough for `syncpipe validate` to print
//
//	rules.yaml:12:18: bucket "by_list" data[0]: unknown function "foo"
//	rules.yaml:14:20: bucket "by_list" data[1]: warning: column "x" does not exist in table public.todos
type RuleError struct {
	Level  Level
	File   string // rules file name, if known
	Line   int    // 1-based line in the YAML document (0 if unknown)
	Column int    // 1-based column (0 if unknown)
	Bucket string // bucket definition name ("" for document-level errors)
	Query  string // "data[0]", "parameters[1]", "parameters" or ""
	Token  string // offending token or column, if any
	Msg    string
}

// Error formats file:line:col: bucket "b" query: message.
func (e *RuleError) Error() string {
	var sb strings.Builder
	if e.File != "" {
		sb.WriteString(e.File)
		sb.WriteByte(':')
	}
	if e.Line > 0 {
		fmt.Fprintf(&sb, "%d:", e.Line)
		if e.Column > 0 {
			fmt.Fprintf(&sb, "%d:", e.Column)
		}
	}
	if sb.Len() > 0 {
		sb.WriteByte(' ')
	}
	if e.Bucket != "" {
		fmt.Fprintf(&sb, "bucket %q ", e.Bucket)
	}
	if e.Query != "" {
		sb.WriteString(e.Query)
		sb.WriteByte(' ')
	}
	if e.Bucket != "" || e.Query != "" {
		s := strings.TrimSuffix(sb.String(), " ")
		sb.Reset()
		sb.WriteString(s)
		sb.WriteString(": ")
	}
	if e.Level == LevelWarning {
		sb.WriteString("warning: ")
	}
	sb.WriteString(e.Msg)
	return sb.String()
}

// RuleErrors is every problem found in one load or check, in document
// order, so a user can fix them all in one go.
type RuleErrors []*RuleError

// Error joins the individual errors, one per line.
func (es RuleErrors) Error() string {
	lines := make([]string, len(es))
	for i, e := range es {
		lines[i] = e.Error()
	}
	return strings.Join(lines, "\n")
}

// Unwrap exposes the individual errors to errors.Is / errors.As.
func (es RuleErrors) Unwrap() []error {
	out := make([]error, len(es))
	for i, e := range es {
		out[i] = e
	}
	return out
}

// EvalError reports that one query failed on one row or request. Other
// queries are unaffected: PowerSync likewise turns such failures into a
// per-query evaluation error and places the row in none of that query's
// buckets.
type EvalError struct {
	Bucket string // bucket definition
	Query  string // "data[0]", "parameters[1]", ...
	Err    error
}

// Error describes the failing query and the cause.
func (e *EvalError) Error() string {
	return fmt.Sprintf("bucket %q %s: %v", e.Bucket, e.Query, e.Err)
}

// Unwrap returns the cause.
func (e *EvalError) Unwrap() error { return e.Err }
