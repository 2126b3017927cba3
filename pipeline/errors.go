package pipeline

import (
	"errors"
	"fmt"
	"time"
)

// ErrEndOfInput is returned by a Source when it has nothing more to read. It
// ends the run normally: in-flight batches finish and commit.
var ErrEndOfInput = errors.New("end of input")

// ErrYielded is returned by Pipeline.Run when the scheduler asked the unit
// running it to yield (see Scheduler) and the pipeline drained: every
// batch read so far was committed, so the unit can resume later from its
// committed progress. A unit's Run function returns it (possibly wrapped) to
// be re-queued.
var ErrYielded = errors.New("yielded to higher-priority work")

// ErrAlreadyRun is returned by a second call to Pipeline.Run: a pipeline's
// channels and sequence numbers belong to one run, so build a new one.
var ErrAlreadyRun = errors.New("pipeline already run")

// StageError is the error Run returns when a stage fails: it names where the
// failure happened so a log line alone is enough to find the batch.
type StageError struct {
	Pipeline string
	Stage    string
	Seq      uint64 // the batch being processed (for a source: being produced)
	Err      error
}

// Error formats the location followed by the cause.
func (e *StageError) Error() string {
	return fmt.Sprintf("pipeline %s: stage %s: batch %d: %v", e.Pipeline, e.Stage, e.Seq, e.Err)
}

// Unwrap returns the stage's own error, so errors.Is and errors.As see it.
func (e *StageError) Unwrap() error { return e.Err }

// PanicError is the cause recorded when a stage function panics: the panic is
// recovered so it never crosses the package boundary, and Stack keeps the
// trace for the log.
type PanicError struct {
	Value any
	Stack []byte
}

// Error reports the panic value.
func (e *PanicError) Error() string { return fmt.Sprintf("panic: %v", e.Value) }

// Unwrap returns the panic value if it is an error, so errors.Is sees through
// a panic(err).
func (e *PanicError) Unwrap() error {
	err, _ := e.Value.(error)
	return err
}

// ErrDeferred is matched by the error of Defer.
var ErrDeferred = errors.New("deferred")

// Defer returns the error a scheduler Unit's Run returns when the unit
// cannot run now — another process holds its work unit — so that its
// worker takes other work: the unit is re-queued at its place and not
// started again before after has passed. cause says why (for logs).
func Defer(after time.Duration, cause error) error { return &deferError{after: after, cause: cause} }

type deferError struct {
	after time.Duration
	cause error
}

func (e *deferError) Error() string { return fmt.Sprintf("deferred for %s: %v", e.after, e.cause) }

func (e *deferError) Is(target error) bool { return target == ErrDeferred }

func (e *deferError) Unwrap() error { return e.cause }
