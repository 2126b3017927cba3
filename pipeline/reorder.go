package pipeline

import "fmt"

// reorder restores sequence order for values that arrive out of order. It is
// a ring indexed by seq, so steady-state operation allocates nothing; it
// grows (doubling) only if a straggler is further behind than the ring is
// long, which the bounded channels keep rare.
type reorder[T any] struct {
	next  uint64 // the seq pop returns next
	slots []reorderSlot[T]
	held  int
}

type reorderSlot[T any] struct {
	v  T
	ok bool
}

func newReorder[T any](capacity int) *reorder[T] {
	n := 8
	for n < capacity {
		n <<= 1
	}
	return &reorder[T]{slots: make([]reorderSlot[T], n)}
}

// put stores v under seq. A seq that was already popped or is already held
// means a batch was duplicated, which is a framework bug worth failing loudly.
func (r *reorder[T]) put(seq uint64, v T) error {
	if seq < r.next {
		return fmt.Errorf("reorder: seq %d already released (next %d)", seq, r.next)
	}
	for seq-r.next >= uint64(len(r.slots)) {
		r.grow()
	}
	s := &r.slots[seq&uint64(len(r.slots)-1)]
	if s.ok {
		return fmt.Errorf("reorder: seq %d received twice", seq)
	}
	s.v, s.ok = v, true
	r.held++
	return nil
}

// pop returns the value for the next seq if it has arrived.
func (r *reorder[T]) pop() (T, bool) {
	s := &r.slots[r.next&uint64(len(r.slots)-1)]
	if !s.ok {
		var zero T
		return zero, false
	}
	v := s.v
	*s = reorderSlot[T]{}
	r.next++
	r.held--
	return v, true
}

func (r *reorder[T]) grow() {
	old := r.slots
	oldMask := uint64(len(old) - 1)
	r.slots = make([]reorderSlot[T], 2*len(old))
	newMask := uint64(len(r.slots) - 1)
	for i := range uint64(len(old)) {
		seq := r.next + i
		if s := old[seq&oldMask]; s.ok {
			r.slots[seq&newMask] = s
		}
	}
}
