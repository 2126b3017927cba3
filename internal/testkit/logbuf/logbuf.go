// Package logbuf is a buffer several goroutines may write to while a test
// reads it: the log of a store, a replicator or a running Main, or a
// child's stderr.
package logbuf

import (
	"bytes"
	"sync"
)

// Buffer is a bytes.Buffer safe for concurrent use. The zero value is
// ready to use.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write appends p.
func (l *Buffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// String returns everything written so far.
func (l *Buffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
