// Package yamlpos finds where a YAML syntax error is, for config and sync
// rules errors that name file, line and column. go-yaml's own line
// numbers are often off by one or point at the enclosing block, and it
// reports no column.
package yamlpos

import (
	"strings"
	"unicode/utf8"

	yaml "go.yaml.in/yaml/v3"
)

// Pos is a syntax error's place and message.
type Pos struct {
	Line, Column int    // 1-based; 0 when not found
	Msg          string // go-yaml's message without its "yaml: line N: " prefix
}

// Locate places err, the error go-yaml returned for text. The line is the
// last one of the shortest prefix of text that fails with the same
// message (for an unclosed bracket or quote: the line opening it); the
// column is found in that line (Column).
func Locate(text []byte, err error) Pos {
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	if i := strings.Index(msg, ": "); strings.HasPrefix(msg, "line ") && i > 0 {
		msg = msg[i+2:]
	}
	p := Pos{Msg: msg}
	var prefix strings.Builder
	for n, line := range strings.SplitAfter(string(text), "\n") {
		prefix.WriteString(line)
		var probe yaml.Node
		if perr := yaml.Unmarshal([]byte(prefix.String()), &probe); perr != nil && strings.HasSuffix(perr.Error(), msg) {
			p.Line, p.Column = n+1, Column(strings.TrimRight(line, "\r\n"))
			break
		}
	}
	return p
}

// Column points into the line a syntax error was found on: at a quote the
// line leaves open, else at the last bracket or brace it leaves open —
// where the missing close belongs — else at the line's first character
// that is not a space. 1-based, in characters.
func Column(line string) int {
	var open []int // byte offsets of unclosed [ and {
	quote, at := byte(0), 0
	for i := 0; i < len(line); i++ {
		c := line[i]
		switch {
		case quote != 0:
			if c == '\\' && quote == '"' {
				i++
			} else if c == quote {
				quote = 0
			}
		case (c == '"' || c == '\'') && startsScalar(line[:i]):
			quote, at = c, i
		case c == '#' && (i == 0 || line[i-1] == ' '):
			i = len(line) // a comment runs to the end of the line
		case c == '[' || c == '{':
			open = append(open, i)
		case (c == ']' || c == '}') && len(open) > 0:
			open = open[:len(open)-1]
		}
	}
	col := func(off int) int { return utf8.RuneCountInString(line[:off]) + 1 }
	switch {
	case quote != 0:
		return col(at)
	case len(open) > 0:
		return col(open[len(open)-1])
	}
	return col(len(line) - len(strings.TrimLeft(line, " \t")))
}

// startsScalar says whether a quote after before opens a quoted scalar
// (an apostrophe inside a plain one, as in it's, does not).
func startsScalar(before string) bool {
	before = strings.TrimRight(before, " \t")
	return before == "" || strings.ContainsAny(before[len(before)-1:], ":,[{-?")
}
