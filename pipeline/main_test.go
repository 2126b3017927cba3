package pipeline_test

import (
	"testing"

	"go.uber.org/goleak"
)

// Every test in the package must leave no goroutine behind: the framework
// promises that Run and Scheduler.Run only return once all their goroutines
// have exited.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
