package syncrules

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"go.yaml.in/yaml/v3"

	"github.com/syncpipe/syncpipe/internal/yamlpos"
)

// srcLoc maps byte offsets of a query to YAML line/column.
type srcLoc struct {
	line, col int
	style     yaml.Style
	indent    int // column of block scalar content (literal style)
	multiline bool
}

// at converts a byte offset in the query text to a 1-based line/column in
// the YAML file. Plain, quoted and literal-block scalars map exactly
// (quoted scalars without escapes); other styles fall back to the
// scalar's start.
func (l srcLoc) at(sql string, off int) (int, int) {
	if off < 0 || off > len(sql) {
		off = len(sql)
	}
	before := sql[:off]
	switch {
	case l.style&yaml.LiteralStyle != 0:
		nl := strings.Count(before, "\n")
		lineStart := strings.LastIndexByte(before, '\n') + 1
		return l.line + 1 + nl, l.indent + utf8.RuneCountInString(before[lineStart:])
	case l.multiline || l.style&yaml.FoldedStyle != 0:
		return l.line, l.col
	case l.style&(yaml.SingleQuotedStyle|yaml.DoubleQuotedStyle) != 0:
		return l.line, l.col + 1 + utf8.RuneCountInString(before)
	}
	return l.line, l.col + utf8.RuneCountInString(before)
}

func locOf(n *yaml.Node, src []string) srcLoc {
	l := srcLoc{line: n.Line, col: n.Column, style: n.Style}
	l.multiline = strings.Contains(strings.TrimRight(n.Value, "\n"), "\n")
	if n.Style&yaml.LiteralStyle != 0 {
		// Content starts on the next non-blank line; its indentation is
		// the block's indentation.
		for i := n.Line; i < len(src); i++ {
			if t := strings.TrimLeft(src[i], " "); t != "" {
				l.indent = len(src[i]) - len(t) + 1
				break
			}
		}
	}
	return l
}

// loader walks the YAML document, collecting every error.
type loader struct {
	opts     Options
	src      []string
	errs     RuleErrors
	warnings RuleErrors
	rules    *Rules
}

func (ld *loader) errAt(n *yaml.Node, bucket, query, token, format string, args ...any) {
	e := &RuleError{File: ld.opts.File, Bucket: bucket, Query: query, Token: token, Msg: fmt.Sprintf(format, args...)}
	if n != nil {
		e.Line, e.Column = n.Line, n.Column
	}
	ld.errs = append(ld.errs, e)
}

func (ld *loader) load(src []byte) {
	var doc yaml.Node
	if err := yaml.Unmarshal(src, &doc); err != nil {
		p := yamlpos.Locate(src, err)
		ld.errs = append(ld.errs, &RuleError{File: ld.opts.File, Line: p.Line, Column: p.Column, Msg: "invalid YAML: " + p.Msg})
		return
	}
	if len(doc.Content) == 0 {
		ld.errAt(nil, "", "", "", "empty sync rules: bucket_definitions is required")
		return
	}
	root := doc.Content[0]
	if root.Kind != yaml.MappingNode {
		ld.errAt(root, "", "", "", "sync rules must be a YAML mapping")
		return
	}
	var buckets, streams, with *yaml.Node
	edition := 1
	ld.rules.compat = ld.compatibility(1, nil, nil)
	for i := 0; i+1 < len(root.Content); i += 2 {
		k, v := root.Content[i], root.Content[i+1]
		switch k.Value {
		case "bucket_definitions":
			buckets = v
		case "config":
			ld.rules.compat = ld.config(v)
			edition = ld.rules.compat.Edition
		case "streams":
			streams = v
			ld.rules.streamsAt = k.Line
		case "with":
			with = v
		case "event_definitions":
			ld.errAt(k, "", "", k.Value, "event_definitions are not supported")
		default:
			ld.errAt(k, "", "", k.Value, "unknown key %q", k.Value)
		}
	}
	if edition >= 3 {
		ld.edition3(root, buckets, streams, with)
		return
	}
	if with != nil {
		ld.errAt(with, "", "", "with", "Common table expressions are not supported without the `sync_config_compiler` option.")
	}
	if streams != nil && edition < 2 {
		ld.streamsNeedEdition(streams)
	}
	if edition == 2 && streams != nil {
		// Streams come after the bucket definitions, whose names they
		// may not take.
		defer ld.loadStreams2(streams)
	}
	if buckets == nil {
		if streams == nil {
			ld.errAt(root, "", "", "", "bucket_definitions is required")
		}
		return
	}
	if buckets.Kind != yaml.MappingNode {
		ld.errAt(buckets, "", "", "", "bucket_definitions must be a mapping of bucket names to definitions")
		return
	}
	seen := map[string]bool{}
	for i := 0; i+1 < len(buckets.Content); i += 2 {
		k, v := buckets.Content[i], buckets.Content[i+1]
		if seen[k.Value] {
			ld.errAt(k, k.Value, "", k.Value, "duplicate bucket definition")
			continue
		}
		seen[k.Value] = true
		ld.definition(k, v)
	}
}

// config reads the config section: the edition, 1 (bucket definitions),
// 2 (the alpha of Sync Streams, beside bucket definitions: streams_ed2.go)
// or 3 (Sync Streams), and the compatibility options.
func (ld *loader) config(v *yaml.Node) Compatibility {
	if v.Kind != yaml.MappingNode {
		ld.errAt(v, "", "", "config", "config must be a mapping")
		return ld.compatibility(1, nil, nil)
	}
	edition := 1
	overrides := map[string]bool{}
	var precision *yaml.Node
	for i := 0; i+1 < len(v.Content); i += 2 {
		k, val := v.Content[i], v.Content[i+1]
		switch k.Value {
		case "edition":
			n, err := strconv.Atoi(val.Value)
			switch {
			case err == nil && n >= 1 && n <= 3:
				edition = n
			default:
				ld.errAt(val, "", "", val.Value, "edition must be 1 (bucket_definitions), 2 (the alpha of streams) or 3 (streams)")
			}
		case "timestamp_max_precision":
			precision = val
		default:
			if _, ok := compatOptions[k.Value]; !ok {
				ld.errAt(k, "", "", k.Value, "config option %q is not supported", k.Value)
				continue
			}
			b, err := strconv.ParseBool(val.Value)
			if val.Kind != yaml.ScalarNode || err != nil {
				ld.errAt(val, "", "", val.Value, "%s must be true or false", k.Value)
				continue
			}
			overrides[k.Value] = b
		}
	}
	return ld.compatibility(edition, overrides, precision)
}

// edition3 loads an edition-3 file: streams and their CTEs only.
func (ld *loader) edition3(root, buckets, streams, with *yaml.Node) {
	if buckets != nil {
		ld.errAt(buckets, "", "", "bucket_definitions", "'bucket_definitions' are not supported by the new compiler. "+
			"Consider using https://powersync-community.github.io/bucket-definitions-to-sync-streams/ to translate them to streams.")
	}
	if streams == nil {
		ld.errAt(root, "", "", "", "'streams' are required.")
		return
	}
	ld.loadStreams(streams, with)
}

// streamsNeedEdition reports streams in a file of an edition before 2, at
// each stream's query as PowerSync does.
func (ld *loader) streamsNeedEdition(streams *yaml.Node) {
	const msg = "Sync streams require edition 2 or later: add `config: {edition: 3}` to the file"
	if streams.Kind != yaml.MappingNode {
		ld.errAt(streams, "", "", "streams", msg)
		return
	}
	for i := 0; i+1 < len(streams.Content); i += 2 {
		k, v := streams.Content[i], streams.Content[i+1]
		at := v
		if v.Kind == yaml.MappingNode {
			for j := 0; j+1 < len(v.Content); j += 2 {
				if v.Content[j].Value == "query" {
					at = v.Content[j+1]
				}
			}
		}
		ld.errAt(at, k.Value, "query", "", msg)
	}
}

func (ld *loader) definition(k, v *yaml.Node) {
	name := k.Value
	def := &definition{name: name, priority: 3}
	def.prefix = name
	if ld.opts.GroupID != "" {
		def.prefix = ld.opts.GroupID + "#" + name
	}
	def.globalID = def.prefix + "[]"
	if v.Kind != yaml.MappingNode {
		ld.errAt(v, name, "", "", "a bucket definition must be a mapping with parameters and data")
		return
	}
	var params, data *yaml.Node
	for i := 0; i+1 < len(v.Content); i += 2 {
		key, val := v.Content[i], v.Content[i+1]
		switch key.Value {
		case "parameters":
			params = val
		case "data":
			data = val
		case "priority":
			if p, ok := ld.priority(val, name, "priority must be an integer from 0 to 3"); ok {
				def.priority, def.prioritySet = p, true
			}
		case "accept_potentially_dangerous_queries":
			def.acceptDangerous = ld.boolean(val, name, key.Value)
		default:
			ld.errAt(key, name, "", key.Value, "unknown key %q in bucket definition", key.Value)
		}
	}
	ld.paramQueries(def, params)
	if data == nil {
		ld.errAt(k, name, "", "", "data is required")
	} else if data.Kind != yaml.SequenceNode {
		ld.errAt(data, name, "data", "", "data must be a list of queries")
	} else {
		for i, n := range data.Content {
			label := fmt.Sprintf("data[%d]", i)
			sql, ok := ld.queryText(def, label, n)
			if !ok {
				continue
			}
			if def.paramsAborted {
				ld.errAt(n, name, label, "", "not compiled: the bucket's parameters are unknown because its parameter query failed")
				continue
			}
			q := &dataQuery{queryBase: queryBase{def: def, label: label, sql: sql, loc: locOf(n, ld.src)}}
			if errs := compileDataQuery(def, q, ld.opts.defaultSchema()); len(errs) > 0 {
				ld.sqlErrors(&q.queryBase, errs)
				continue
			}
			ld.queryWarnings(&q.queryBase)
			def.data = append(def.data, q)
		}
	}
	ld.rules.defs = append(ld.rules.defs, def)
}

// priority reads a bucket or stream priority (0 to 3); a bad one is
// reported with msg.
func (ld *loader) priority(val *yaml.Node, owner, msg string) (int, bool) {
	p, err := strconv.Atoi(val.Value)
	if val.Kind != yaml.ScalarNode || err != nil || p < 0 || p > 3 {
		ld.errAt(val, owner, "priority", val.Value, "%s", msg)
		return 0, false
	}
	return p, true
}

// boolean reads a true/false option of a bucket or stream.
func (ld *loader) boolean(val *yaml.Node, owner, key string) bool {
	if val.Kind != yaml.ScalarNode || (val.Value != "true" && val.Value != "false") {
		ld.errAt(val, owner, "", val.Value, "%s must be true or false", key)
	}
	return val.Value == "true"
}

func (ld *loader) queryText(def *definition, label string, n *yaml.Node) (string, bool) {
	if n.Kind != yaml.ScalarNode || n.Tag == "!!null" || strings.TrimSpace(n.Value) == "" {
		ld.errAt(n, def.name, label, "", "expected an SQL query string")
		return "", false
	}
	return n.Value, true
}

func (ld *loader) paramQueries(def *definition, params *yaml.Node) {
	if params == nil {
		return
	}
	var nodes []*yaml.Node
	labels := []string{"parameters"}
	switch params.Kind {
	case yaml.ScalarNode:
		nodes = []*yaml.Node{params}
	case yaml.SequenceNode:
		nodes = params.Content
		labels = labels[:0]
		for i := range nodes {
			labels = append(labels, fmt.Sprintf("parameters[%d]", i))
		}
	default:
		ld.errAt(params, def.name, "parameters", "", "parameters must be a query or a list of queries")
		return
	}
	def.hasParams = true
	var first []string
	firstSet := false
	for i, n := range nodes {
		sql, ok := ld.queryText(def, labels[i], n)
		if !ok {
			continue
		}
		base := queryBase{def: def, label: labels[i], sql: sql, loc: locOf(n, ld.src)}
		q, errs := compileParamQuery(def, base, strconv.Itoa(i+1), ld.opts.defaultSchema())
		ld.sqlErrors(&base, errs)
		if q == nil || slices.ContainsFunc(errs, func(e *sqlError) bool { return e.abort }) {
			// As in PowerSync, the bucket's data queries then fail too.
			def.paramsAborted = true
			continue
		}
		var names []string
		switch q := q.(type) {
		case *staticParamQuery:
			names = q.outNames
			if len(errs) == 0 {
				def.static = append(def.static, q)
				ld.queryWarnings(&q.queryBase)
			}
		case *funcParamQuery:
			names = q.outNames
			if len(errs) == 0 {
				def.funcs = append(def.funcs, q)
				ld.queryWarnings(&q.queryBase)
			}
		case *tableParamQuery:
			names = q.outNames
			if len(errs) == 0 {
				def.tables = append(def.tables, q)
				ld.queryWarnings(&q.queryBase)
			}
		}
		if !firstSet {
			first, firstSet = names, true
			def.bucketParams = names
		} else if !sameSet(first, names) {
			ld.errAt(n, def.name, labels[i], "", "all parameter queries of a bucket must select the same bucket parameters: %s vs %s",
				jsonList(first), jsonList(names))
		}
		if dup := duplicate(names); dup != "" {
			ld.errAt(n, def.name, labels[i], dup, "bucket parameter %q is selected twice", dup)
		}
	}
	// Any parameter query that got as far as naming its columns defines
	// the bucket parameters.
	def.paramsAborted = def.paramsAborted && !firstSet
}

func duplicate(names []string) string {
	seen := map[string]bool{}
	for _, n := range names {
		if seen[n] {
			return n
		}
		seen[n] = true
	}
	return ""
}

func (ld *loader) sqlErrors(q *queryBase, errs []*sqlError) {
	for _, e := range errs {
		ld.errs = append(ld.errs, q.errorAt(ld.opts.File, e.pos, e.token, e.msg))
	}
}

// queryWarnings records the warnings of a compiled query.
func (ld *loader) queryWarnings(q *queryBase) {
	for _, w := range q.warns {
		e := q.errorAt(ld.opts.File, w.pos, w.token, w.msg)
		e.Level = LevelWarning
		ld.warnings = append(ld.warnings, e)
	}
}

// errorAt builds a RuleError for a byte offset of the query.
func (q *queryBase) errorAt(file string, pos int, token, msg string) *RuleError {
	line, col := q.loc.at(q.sql, pos)
	return &RuleError{File: file, Line: line, Column: col, Bucket: q.def.name, Query: q.label, Token: token, Msg: msg}
}
