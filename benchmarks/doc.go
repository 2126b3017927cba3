// Package benchmarks holds the performance harness for SPEC §9.
package benchmarks
