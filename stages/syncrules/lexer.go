package syncrules

import (
	"fmt"
	"strings"
)

// tokKind classifies SQL tokens.
type tokKind uint8

const (
	tEOF    tokKind = iota
	tIdent          // unquoted identifier or keyword (text lower-cased)
	tQIdent         // "quoted" identifier (text exact)
	tString         // 'string' literal (text unescaped)
	tInt            // integer literal
	tFloat          // decimal literal
	tOp             // operator or punctuation
)

// token is one lexeme with its byte offset in the query text.
type token struct {
	kind tokKind
	text string // normalised text (see tokKind)
	raw  string // source text, for error messages
	pos  int
}

// is reports whether t is the keyword or operator w (keywords compare
// case-insensitively; quoted identifiers are never keywords).
func (t token) is(w string) bool {
	return (t.kind == tIdent || t.kind == tOp) && t.text == w
}

// sqlError is a problem at a byte offset of a query.
type sqlError struct {
	pos   int
	token string
	msg   string
	cause error
	// abort marks a problem that stops PowerSync's compiler on the query
	// (a parse error, a SELECT item it cannot name): for a parameter
	// query, the bucket then has no parameters for its data queries.
	abort bool
}

// Error returns the message.
func (e *sqlError) Error() string { return e.msg }

// Unwrap returns the evaluation error behind a constant-folding failure.
func (e *sqlError) Unwrap() error { return e.cause }

// lex splits a query into tokens. It supports the lexical subset of
// PostgreSQL that sync rules use, and -- and /* */ comments.
func lex(src string) ([]token, *sqlError) {
	var toks []token
	i := 0
	for {
		for i < len(src) {
			c := src[i]
			if c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v' {
				i++
			} else if strings.HasPrefix(src[i:], "--") {
				for i < len(src) && src[i] != '\n' {
					i++
				}
			} else if strings.HasPrefix(src[i:], "/*") {
				end := strings.Index(src[i+2:], "*/")
				if end < 0 {
					return nil, &sqlError{pos: i, token: "/*", msg: "unterminated comment"}
				}
				i += end + 4
			} else {
				break
			}
		}
		if i >= len(src) {
			return append(toks, token{kind: tEOF, pos: len(src)}), nil
		}
		start := i
		c := src[i]
		switch {
		case isIdentStart(c):
			for i < len(src) && isIdentPart(src[i]) {
				i++
			}
			raw := src[start:i]
			toks = append(toks, token{kind: tIdent, text: strings.ToLower(raw), raw: raw, pos: start})
		case c == '"':
			s, n, err := lexQuoted(src[i:], '"')
			if err != nil {
				return nil, &sqlError{pos: start, token: `"`, msg: "unterminated quoted identifier"}
			}
			i += n
			if s == "" {
				return nil, &sqlError{pos: start, token: `""`, msg: "zero-length quoted identifier"}
			}
			toks = append(toks, token{kind: tQIdent, text: s, raw: src[start:i], pos: start})
		case c == '\'':
			s, n, err := lexQuoted(src[i:], '\'')
			if err != nil {
				return nil, &sqlError{pos: start, token: "'", msg: "unterminated string literal"}
			}
			i += n
			toks = append(toks, token{kind: tString, text: s, raw: src[start:i], pos: start})
		case isDigit(c) || (c == '.' && i+1 < len(src) && isDigit(src[i+1])):
			kind := tInt
			for i < len(src) && isDigit(src[i]) {
				i++
			}
			if i < len(src) && src[i] == '.' {
				kind = tFloat
				i++
				for i < len(src) && isDigit(src[i]) {
					i++
				}
			}
			// No exponent notation: PowerSync's SQL parser has none, so
			// 1e3 is rejected (as an invalid number) there too.
			if i < len(src) && isIdentStart(src[i]) {
				return nil, &sqlError{pos: start, token: src[start : i+1], msg: "invalid number"}
			}
			toks = append(toks, token{kind: kind, text: src[start:i], raw: src[start:i], pos: start})
		default:
			op := lexOp(src[i:])
			if op == "" {
				r := []rune(src[i:])[0]
				return nil, &sqlError{pos: start, token: string(r), msg: fmt.Sprintf("unexpected character %q", r)}
			}
			i += len(op)
			toks = append(toks, token{kind: tOp, text: op, raw: op, pos: start})
		}
	}
}

var operators = []string{"->>", "->", "::", "||", "<=", ">=", "<>", "!=", "==",
	"=", "<", ">", "+", "-", "*", "/", "%", "(", ")", ",", ".", ";", "[", "]", "?", "$", ":", "&", "|", "~", "^", "!", "#", "@"}

func lexOp(s string) string {
	for _, op := range operators {
		if strings.HasPrefix(s, op) {
			return op
		}
	}
	return ""
}

// lexQuoted reads a q-quoted token where a doubled quote escapes itself.
func lexQuoted(s string, q byte) (string, int, error) {
	var sb strings.Builder
	i := 1
	for i < len(s) {
		if s[i] == q {
			if i+1 < len(s) && s[i+1] == q {
				sb.WriteByte(q)
				i += 2
				continue
			}
			return sb.String(), i + 1, nil
		}
		sb.WriteByte(s[i])
		i++
	}
	return "", 0, fmt.Errorf("unterminated")
}

func isDigit(c byte) bool      { return c >= '0' && c <= '9' }
func isIdentStart(c byte) bool { return c == '_' || (c|0x20 >= 'a' && c|0x20 <= 'z') || c >= 0x80 }
func isIdentPart(c byte) bool  { return isIdentStart(c) || isDigit(c) || c == '$' }
