// Package jsonl is an example sink that writes one JSON-lines file per
// table, proving the sinks library.
package jsonl
