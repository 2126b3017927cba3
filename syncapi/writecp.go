package syncapi

import (
	"context"
	"errors"
	"sync"

	"github.com/jackc/pglogrepl"

	"github.com/syncpipe/syncpipe/sinks/bucketstore"
)

// maxWCRounds is how many recent checkpoint LSNs' reads are kept for
// streams that get to a checkpoint late.
const maxWCRounds = 4

// writeCheckpoints reads the write checkpoints of every open stream in one
// query per storage checkpoint instead of one per stream: streams register
// their client while they run; the first to ask at a checkpoint LSN reads
// those of all registered clients, the others wait for that read. A
// client that registered after the read began gets a query of its own.
// Safe for concurrent use.
type writeCheckpoints struct {
	store WriteCheckpointStore

	mu      sync.Mutex
	clients map[bucketstore.WriteCheckpointClient]int // open streams per client
	rounds  map[pglogrepl.LSN]*wcRound
	order   []pglogrepl.LSN // of rounds, oldest first
}

// wcRound is one read at a checkpoint LSN; done closes when res or err is
// set.
type wcRound struct {
	done     chan struct{}
	included map[bucketstore.WriteCheckpointClient]struct{}
	clients  []bucketstore.WriteCheckpointClient // included, as the query's list
	res      map[bucketstore.WriteCheckpointClient]int64
	err      error
}

func newWriteCheckpoints(store WriteCheckpointStore) *writeCheckpoints {
	return &writeCheckpoints{store: store, clients: map[bucketstore.WriteCheckpointClient]int{},
		rounds: map[pglogrepl.LSN]*wcRound{}}
}

// register adds a stream's client to the reads until the returned func is
// called.
func (w *writeCheckpoints) register(c bucketstore.WriteCheckpointClient) (unregister func()) {
	w.mu.Lock()
	w.clients[c]++
	w.mu.Unlock()
	return func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		if w.clients[c]--; w.clients[c] <= 0 {
			delete(w.clients, c)
		}
	}
}

// get returns the client's newest write checkpoint covered by the
// checkpoint at lsn, as Reader.WriteCheckpointFor does.
func (w *writeCheckpoints) get(ctx context.Context, c bucketstore.WriteCheckpointClient, lsn pglogrepl.LSN) (int64, bool, error) {
	for {
		w.mu.Lock()
		r := w.rounds[lsn]
		if r == nil {
			r = w.start(lsn)
			w.mu.Unlock()
			r.res, r.err = w.store.WriteCheckpointsFor(ctx, r.clients, lsn)
			if r.err != nil {
				// Let the next caller read again.
				w.mu.Lock()
				if w.rounds[lsn] == r {
					delete(w.rounds, lsn)
				}
				w.mu.Unlock()
			}
			close(r.done)
		} else {
			w.mu.Unlock()
		}
		select {
		case <-r.done:
		case <-ctx.Done():
			return 0, false, ctx.Err()
		}
		if r.err != nil {
			if ctx.Err() != nil {
				return 0, false, ctx.Err()
			}
			if errors.Is(r.err, context.Canceled) || errors.Is(r.err, context.DeadlineExceeded) {
				continue // the reader's stream ended: read again
			}
			return 0, false, r.err
		}
		if _, ok := r.included[c]; !ok {
			return w.store.WriteCheckpointFor(ctx, c.UserID, c.ClientID, lsn)
		}
		n, ok := r.res[c]
		return n, ok, nil
	}
}

// peek is get without waiting: ok is false unless the read at lsn is
// done, succeeded and included the client. Most streams reach a
// checkpoint after its read: they then need no goroutine to wait for it.
func (w *writeCheckpoints) peek(c bucketstore.WriteCheckpointClient, lsn pglogrepl.LSN) (n int64, due, ok bool) {
	w.mu.Lock()
	r := w.rounds[lsn]
	w.mu.Unlock()
	if r == nil {
		return 0, false, false
	}
	select {
	case <-r.done:
	default:
		return 0, false, false
	}
	if r.err != nil {
		return 0, false, false
	}
	if _, in := r.included[c]; !in {
		return 0, false, false
	}
	n, due = r.res[c]
	return n, due, true
}

// start registers a new round at lsn over the registered clients. w.mu
// must be held.
func (w *writeCheckpoints) start(lsn pglogrepl.LSN) *wcRound {
	r := &wcRound{done: make(chan struct{}), included: make(map[bucketstore.WriteCheckpointClient]struct{}, len(w.clients)),
		clients: make([]bucketstore.WriteCheckpointClient, 0, len(w.clients))}
	for k := range w.clients {
		r.included[k] = struct{}{}
		r.clients = append(r.clients, k)
	}
	w.rounds[lsn] = r
	w.order = append(w.order, lsn)
	for len(w.order) > maxWCRounds {
		if w.order[0] != lsn {
			delete(w.rounds, w.order[0])
		}
		w.order = w.order[1:]
	}
	return r
}
