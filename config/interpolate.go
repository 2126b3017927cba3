package config

import (
	"bytes"
	"strings"
)

// interpHit is a ${...} reference that could not be substituted.
type interpHit struct {
	line, col int // 1-based position of "$" in the original text
	outCol    int // 1-based position of the substitution in the output line
	msg       string
}

// interpolate replaces ${VAR} and ${VAR:-default} in the YAML text before it
// is parsed, so secrets and per-environment values need not be in the file.
//
//   - ${VAR} is the value of VAR; unset is an error (reported, replaced by "").
//   - ${VAR:-default} uses default when VAR is unset or empty.
//   - $${ is a literal "${"; a "$" not followed by "{" is kept as is, so
//     passwords containing "$" need no escaping.
//   - Lines whose first non-blank character is "#" (comments) are left alone,
//     so commented-out examples do not need their variables set.
//
// Line numbers are preserved as long as values contain no newlines.
func interpolate(data []byte, lookup func(string) (string, bool)) ([]byte, []interpHit) {
	var out bytes.Buffer
	var hits []interpHit
	lines := strings.SplitAfter(string(data), "\n")
	for ln, line := range lines {
		if t := strings.TrimLeft(line, " \t"); strings.HasPrefix(t, "#") || !strings.Contains(line, "${") {
			out.WriteString(line)
			continue
		}
		var b strings.Builder
		for i := 0; i < len(line); {
			switch {
			case strings.HasPrefix(line[i:], "$${"):
				b.WriteString("${")
				i += 3
			case strings.HasPrefix(line[i:], "${"):
				end := strings.IndexByte(line[i:], '}')
				if end < 0 {
					hits = append(hits, interpHit{line: ln + 1, col: i + 1, outCol: b.Len() + 1,
						msg: "unterminated ${ (write $${ for a literal ${)"})
					b.WriteString(line[i:])
					i = len(line)
					continue
				}
				expr := line[i+2 : i+end]
				val, msg := expand(expr, lookup)
				if msg != "" {
					hits = append(hits, interpHit{line: ln + 1, col: i + 1, outCol: b.Len() + 1, msg: msg})
				}
				b.WriteString(val)
				i += end + 1
			default:
				b.WriteByte(line[i])
				i++
			}
		}
		out.WriteString(b.String())
	}
	return out.Bytes(), hits
}

// expand evaluates the inside of one ${...}; msg is non-empty on error.
func expand(expr string, lookup func(string) (string, bool)) (val, msg string) {
	name, def, hasDef := strings.Cut(expr, ":-")
	if !validVarName(name) {
		return "", "invalid variable reference ${" + expr + "} (want ${NAME} or ${NAME:-default})"
	}
	v, ok := lookup(name)
	switch {
	case ok && (v != "" || !hasDef):
		return v, ""
	case hasDef:
		return def, ""
	default:
		return "", "${" + name + "} is not set (set it, or give a default: ${" + name + ":-value})"
	}
}

// validVarName accepts shell-style names: a letter or _, then letters,
// digits or _.
func validVarName(s string) bool {
	if s == "" {
		return false
	}
	for i, c := range s {
		letter := c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
		if !letter && (i == 0 || c < '0' || c > '9') {
			return false
		}
	}
	return true
}
