//go:build race

package benchmarks

// raceEnabled: the smoke tests build syncpipe with -race too, so the build
// reuses the packages this test binary was compiled from.
const raceEnabled = true
