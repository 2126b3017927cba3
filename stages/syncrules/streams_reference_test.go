package syncrules

import (
	"flag"
	"slices"
	"strconv"
	"strings"
	"testing"
)

var (
	refStreamSeeds = flag.String("reference.streamseeds", "", "comma-separated extra generator seeds for TestReferenceStreams (each adds streamCasesPerSeed generated cases)")
	refStreamsAll  = flag.Bool("reference.streamsall", false, "TestReferenceStreams: generate the shapes of the known differences too (streamKnownDiffs in streams_gen_test.go)")
)

// streamDefaultSeeds are the stream generator's seeds every run uses.
var streamDefaultSeeds = []uint64{1, 2, 3, 4, 5, 6, 7, 8}

// streamCasesPerSeed is how many stream cases one seed generates.
const streamCasesPerSeed = 50

// TestReferenceStreams is the differential test for Sync Streams (edition 3
// `streams:`, and edition 2's, streams_ed2.go): every case of testdata/reference/streams.jsonl, and the
// cases generateStreamCases (streams_gen_test.go) makes from the seeds
// above and -reference.streamseeds, is evaluated by syncpipe and by the
// reference compiler (see TestReferenceCompiler), and each case whose
// normalized answers differ is reported with both answers. The generator
// leaves out the shapes of the differences it found and syncpipe still has
// (streamKnownDiffs); -reference.streamsall draws them too.
// The corpus covers the forms syncpipe compiles (streams.go): query and
// queries (merged and shared buckets), SELECT * or aliased columns from
// one table, WHERE in any AND/OR/NOT shape whose factors are row-only,
// column = request value, a column IN a one-table subquery on a request
// value (or a CTE: x IN cte, x IN (SELECT col FROM cte)), inner joins of
// one more table (JOIN … ON, comma joins), or conditions on request
// values alone; subscriptions, defaults and priorities; and the YAML
// errors around them.
func TestReferenceStreams(t *testing.T) {
	ref := requireReference(t)
	cases := loadRefCases(t, "streams.jsonl")
	fixed := len(cases)
	seeds := slices.Clone(streamDefaultSeeds)
	if *refStreamSeeds != "" {
		for _, s := range strings.Split(*refStreamSeeds, ",") {
			n, err := strconv.ParseUint(strings.TrimSpace(s), 10, 64)
			if err != nil {
				t.Fatalf("-reference.streamseeds: %v", err)
			}
			seeds = append(seeds, n)
		}
	}
	skip := streamKnownDiffs
	if *refStreamsAll {
		skip = 0
	}
	for _, s := range seeds {
		cases = append(cases, generateStreamCases(s, streamCasesPerSeed, skip)...)
	}
	want := ref.run(t, cases)
	differ, byCategory := compareWithReference(t, cases, want, streamCategory, fixed+refMaxReported)
	t.Logf("%d stream cases (%d from streams.jsonl, %d generated from seeds %v), %d differ %v", len(cases), fixed, len(cases)-fixed, seeds, differ, byCategory)
	if len(cases)-fixed < 200 {
		t.Errorf("%d generated stream cases, want at least 200", len(cases)-fixed)
	}
}

// streamCategory is a stream case's category: its name up to the colon,
// or a generated case's family (its last word).
func streamCategory(name string) string {
	if strings.HasPrefix(name, "streams seed ") {
		return "gen " + lastWord(name)
	}
	c, _, _ := strings.Cut(name, ":")
	return c
}
