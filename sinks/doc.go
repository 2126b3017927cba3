// Package sinks defines the Sink interface that a flush stage writes to and
// the registry that maps sink names used in YAML pipelines to constructors.
package sinks
