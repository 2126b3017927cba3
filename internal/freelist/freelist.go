// Package freelist keeps released values for reuse: buffers grown for one
// batch serve the next one instead of being grown again from nothing.
// Unlike a sync.Pool it is not emptied by the GC, which in a process with
// a small heap runs often enough to throw the buffers away all the time.
package freelist

import "sync"

// List is a LIFO of free values, safe for concurrent use. The zero List
// keeps any number of values; Max > 0 bounds them.
type List[T any] struct {
	// Max is how many values List keeps at most; 0 is no bound.
	Max int

	mu   sync.Mutex
	free []T
}

// Get takes the most recently put value; ok is false when there is none.
func (l *List[T]) Get() (v T, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := len(l.free)
	if n == 0 {
		return v, false
	}
	v = l.free[n-1]
	var zero T
	l.free[n-1] = zero // the slot must not keep v alive
	l.free = l.free[:n-1]
	return v, true
}

// Put keeps v for a later Get, unless the list holds Max values already
// (v is dropped).
func (l *List[T]) Put(v T) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.Max > 0 && len(l.free) >= l.Max {
		return
	}
	l.free = append(l.free, v)
}

// Len is how many values the list holds.
func (l *List[T]) Len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.free)
}
