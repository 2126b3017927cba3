package syncrules

import (
	"strings"
	"testing"
)

// TestReferenceStreams is the differential test for Sync Streams (edition 3
// `streams:`): every case of testdata/reference/streams.jsonl is evaluated
// by syncpipe and by the reference compiler (see TestReferenceCompiler), and
// each case whose normalized answers differ is reported with both answers.
// The corpus covers the forms syncpipe compiles (streams.go): query and
// queries (merged and shared buckets), SELECT * or aliased columns from
// one table, WHERE in any AND/OR/NOT shape whose factors are row-only,
// column = request value, a column IN a one-table subquery on a request
// value, or conditions on request values alone; subscriptions, defaults
// and priorities; and the YAML errors around them.
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
