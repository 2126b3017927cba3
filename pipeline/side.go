package pipeline

// Key names one kind of per-batch side data of type V: state that belongs
// to a batch but is not its payload, such as what a sink read ahead for
// the batch, or table records a source changed with it. A package that
// attaches side data declares its key once, as a package variable, and
// keys are compared by identity, so two packages never read each other's
// data by accident.
//
// Why on the batch and not in a map keyed by Seq next to the pipeline:
// the batch is what every stage already hands to the next, in order and
// exactly once, so data attached to it needs no locking, cannot leak when a
// run fails half-way (it goes with the batch), and reaches the Writer and
// the CommitFunc of exactly that batch. Why not in the progress token P:
// progress is set by the source and cannot be changed by stages (the
// ordered commit relies on it), while side data may be attached by any
// stage to its output.
type Key[V any] struct{ name string }

// NewKey returns a new key for side data of type V; name appears only in
// debugging output.
func NewKey[V any](name string) *Key[V] { return &Key[V]{name: name} }

// String returns the key's name.
func (k *Key[V]) String() string { return k.name }

// side is one attached value; the key is a *Key[V] and the value a V.
type side struct {
	key, val any
}

// Attach sets the side data of b under key k to v, replacing what b held
// under k. It copies b's (short) list of side data rather than writing
// into it, so a batch derived from b earlier keeps what it had. Side data
// travels with the batch: Derive carries it, and the framework carries it
// onto the output of a stage whose function returned a batch without side
// data of its own (build the output with Derive to add to it). Cost: one
// small allocation per call, per batch, never per item.
func Attach[V, T, P any](b *Batch[T, P], k *Key[V], v V) {
	out := make([]side, 0, len(b.side)+1)
	for _, s := range b.side {
		if s.key != any(k) {
			out = append(out, s)
		}
	}
	b.side = append(out, side{key: k, val: v})
}

// Attached returns the side data of b under key k, and whether there is
// any.
func Attached[V, T, P any](b Batch[T, P], k *Key[V]) (V, bool) {
	for _, s := range b.side {
		if s.key == any(k) {
			v, ok := s.val.(V)
			return v, ok
		}
	}
	var zero V
	return zero, false
}
