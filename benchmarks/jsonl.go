package benchmarks

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
)

// P7 runs the P1 snapshot into the jsonl sink instead of bucket storage:
// the same source, rules, chunks, workers and stages (read → eval → build
// → flush → commit), with a sink that only encodes and appends lines. The
// difference from P1 is what bucket storage costs; what P7 itself costs is
// the framework, the rules and the encoding.

// p7Name names the P7 row of the snapshot table.
const p7Name = "P7: syncpipe → jsonl sink, 2 worker(s)"

// jsonlPipeline is the pipelines section of a P7 run: one pipeline over
// every rule table into a jsonl sink (fsync on, as bucket storage's
// commits are durable too), or nothing.
func jsonlPipeline(dir string) string {
	if dir == "" {
		return ""
	}
	return fmt.Sprintf("pipelines:\n  - name: p7\n    sink: {type: jsonl, settings: {dir: %q, fsync: true}}\n", dir)
}

// jsonlWritten counts the lines (one per change) and the bytes of the
// jsonl files in dir.
func jsonlWritten(dir string) (lines, size int64, err error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.jsonl"))
	if err != nil {
		return 0, 0, err
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return 0, 0, fmt.Errorf("count jsonl lines: %w", err)
		}
		lines += int64(bytes.Count(b, []byte{'\n'}))
		size += int64(len(b))
	}
	return lines, size, nil
}
