// Package pipelines holds the end-to-end tests of declared pipelines
// through the real binary: a bucketstore pipeline's own settings taking
// effect, a jsonl sink beside bucket storage getting every change exactly
// once across SIGKILLs, and a sink's new version when its settings change.
package pipelines

import (
	"testing"

	"github.com/syncpipe/syncpipe/internal/testkit/harness"
)

func TestMain(m *testing.M) { harness.Main(m) }
