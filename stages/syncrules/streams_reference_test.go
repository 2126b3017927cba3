package syncrules

import (
	"strings"
	"testing"
)

// TestReferenceStreams is the differential test for Sync Streams (edition 3
// `streams:`): every case of testdata/reference/streams.jsonl is evaluated
// by syncpipe and by the reference compiler (see TestReferenceCompiler), and
// each case whose normalized answers differ is reported with both answers.
// The corpus covers the first slice of streams syncpipe compiles: one query
// per stream, SELECT * or aliased columns from one table, and WHERE factors
// that are row-only, column = request value, or column IN a one-table
// subquery on a request value; plus the YAML errors around them.
func TestReferenceStreams(t *testing.T) {
	ref := requireReference(t)
	cases := loadRefCases(t, "streams.jsonl")
	want := ref.run(t, cases)
	differ, byCategory := compareWithReference(t, cases, want, streamCategory, len(cases))
	t.Logf("%d stream cases, %d differ %v", len(cases), differ, byCategory)
}

// streamCategory is a stream case's category: its name up to the colon.
func streamCategory(name string) string {
	c, _, _ := strings.Cut(name, ":")
	return c
}
