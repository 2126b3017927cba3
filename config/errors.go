package config

import (
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// Kind classifies a configuration problem so that callers and tests can
// react to the category without parsing message text.
type Kind string

// The kinds of configuration problems. Each has at least one golden test in
// testdata/errors.
const (
	KindSyntax        Kind = "syntax"        // the YAML (or an env value) does not parse
	KindUnknownKey    Kind = "unknown_key"   // a key that no section defines
	KindDuplicateKey  Kind = "duplicate_key" // the same key twice in one mapping
	KindType          Kind = "type"          // wrong YAML shape or unparsable scalar
	KindRequired      Kind = "required"      // a required key is missing or empty
	KindConflict      Kind = "conflict"      // keys that exclude each other are both set
	KindRange         Kind = "range"         // a number or duration outside its bounds
	KindEnum          Kind = "enum"          // a value outside its fixed set
	KindAddress       Kind = "address"       // a listen address that is not host:port
	KindDuplicate     Kind = "duplicate"     // a repeated name where names must be unique
	KindInterpolation Kind = "interpolation" // a ${VAR} that is unset or malformed
	KindURI           Kind = "uri"           // a URI with the wrong scheme or shape
	KindFile          Kind = "file"          // a referenced file that cannot be read
	KindInvalid       Kind = "invalid"       // any other malformed value (identifiers, names)
)

// Location says where a value came from: a position in the config file or
// the environment variable that overrode it. The zero Location means unknown
// (for example a Config built in Go code).
type Location struct {
	File   string // config file name as given to Load
	Line   int    // 1-based; 0 when the key is absent from the file
	Column int    // 1-based; 0 when unknown
	Env    string // set when the value came from an environment variable
}

// String renders the location as the prefix of an error line, so that
// editors and terminals can jump to it.
func (l Location) String() string {
	switch {
	case l.Env != "":
		return "env " + l.Env
	case l.File == "":
		return ""
	case l.Line == 0:
		return l.File
	case l.Column == 0:
		return l.File + ":" + strconv.Itoa(l.Line)
	default:
		return l.File + ":" + strconv.Itoa(l.Line) + ":" + strconv.Itoa(l.Column)
	}
}

// Error is one configuration problem, carrying enough position information
// for an operator to find and fix it without reading syncpipe's source.
type Error struct {
	Location
	Kind Kind
	Path string // key path such as "replication.workers_per_process" or "pipelines[1].name"
	Msg  string
	Err  error // underlying cause, if any; reachable through errors.Is/As
}

// Error formats the problem as "file:line:col: key.path: message".
func (e *Error) Error() string {
	var b strings.Builder
	if loc := e.Location.String(); loc != "" {
		b.WriteString(loc)
		b.WriteString(": ")
	}
	if e.Path != "" {
		b.WriteString(e.Path)
		b.WriteString(": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

// Unwrap exposes the underlying cause (for example fs.ErrNotExist).
func (e *Error) Unwrap() error { return e.Err }

// Errors is every problem found in one load, so that an operator fixes a
// config in one round instead of one error per run.
type Errors []*Error

// Error joins the problems one per line, in file order.
func (es Errors) Error() string {
	lines := make([]string, len(es))
	for i, e := range es {
		lines[i] = e.Error()
	}
	return strings.Join(lines, "\n")
}

// Unwrap lets errors.Is and errors.As look into every problem.
func (es Errors) Unwrap() []error {
	out := make([]error, len(es))
	for i, e := range es {
		out[i] = e
	}
	return out
}

// Sort orders problems by file position (line, then column), then problems
// without a line, then problems from environment variables by name.
func (es Errors) Sort() {
	rank := func(e *Error) int {
		switch {
		case e.Env != "":
			return 2
		case e.Line == 0:
			return 1
		default:
			return 0
		}
	}
	sort.SliceStable(es, func(i, j int) bool {
		a, b := es[i], es[j]
		if ra, rb := rank(a), rank(b); ra != rb {
			return ra < rb
		}
		if a.File != b.File {
			return a.File < b.File
		}
		if a.Line != b.Line {
			return a.Line < b.Line
		}
		if a.Column != b.Column {
			return a.Column < b.Column
		}
		if a.Env != b.Env {
			return a.Env < b.Env
		}
		return a.Path < b.Path
	})
}

// orNil converts an empty list to a nil error, avoiding the typed-nil trap.
func (es Errors) orNil() error {
	if len(es) == 0 {
		return nil
	}
	es.Sort()
	return es
}

// AsErrors extracts the problem list from an error returned by Load or
// Validate; a foreign error becomes a single positionless entry.
func AsErrors(err error) Errors {
	if err == nil {
		return nil
	}
	var es Errors
	if errors.As(err, &es) {
		return es
	}
	var e *Error
	if errors.As(err, &e) {
		return Errors{e}
	}
	return Errors{{Kind: KindInvalid, Msg: err.Error(), Err: err}}
}

// newError builds an Error with a formatted message.
func newError(loc Location, kind Kind, path, format string, args ...any) *Error {
	return &Error{Location: loc, Kind: kind, Path: path, Msg: fmt.Sprintf(format, args...)}
}
