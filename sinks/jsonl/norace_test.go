//go:build !race

package jsonl_test

// raceEnabled is set when the tests run with -race, whose instrumentation
// allocates and would fail allocation counts.
const raceEnabled = false
