package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/syncpipe/syncpipe/sources/postgres/logrepl"
)

// StreamChange is one change read from a replication slot, placed in its
// source transaction: the item the stream read stage hands to decode.
type StreamChange struct {
	*logrepl.Change
	// TxnLSN is the commit LSN of the change's transaction, Index the
	// change's position in it (from 0, RelationChanged events not counted).
	TxnLSN logrepl.LSN
	Index  int64
}

// StreamPosition is where a batch of the stream leaves off: LSN is the
// end of the last complete transaction (where a restarted stream starts);
// inside a transaction too large for one batch, TxnLSN is its commit LSN
// and TxnChanges counts its changes read so far.
type StreamPosition struct {
	LSN        logrepl.LSN
	TxnLSN     logrepl.LSN
	TxnChanges int64
}

// StreamReader is the stream read stage's logic: it turns the batches of a
// logical replication stream into changes with their positions, and, when
// it resumes inside a transaction, skips the changes the sink already holds
// (the slot delivers the transaction again from its start, with the same
// changes in the same order). One goroutine only.
type StreamReader struct {
	st  *logrepl.Stream
	lim logrepl.BatchLimits

	pos  StreamPosition
	skip StreamPosition // the partly held transaction of a resumed stream
	n    int64          // changes of the current transaction so far
}

// NewStreamReader reads st in batches bounded by lim, resuming from the
// committed position from (the stream must have been started at from.LSN).
func NewStreamReader(st *logrepl.Stream, lim logrepl.BatchLimits, from StreamPosition) *StreamReader {
	r := &StreamReader{st: st, lim: lim, pos: StreamPosition{LSN: from.LSN}}
	if from.TxnLSN != 0 {
		r.skip = from
	}
	return r
}

// Limits returns the batch limits the reader reads with.
func (r *StreamReader) Limits() logrepl.BatchLimits { return r.lim }

// Next returns the next batch of changes and the position after it, and
// the pgoutput bytes it stands for. A batch may hold no change: it then
// carries an idle position advance (worth committing so the slot moves).
func (r *StreamReader) Next(ctx context.Context) ([]StreamChange, StreamPosition, int, error) {
	lb, err := r.st.Next(ctx, r.lim)
	if err != nil {
		return nil, StreamPosition{}, 0, err
	}
	out := make([]StreamChange, 0, lb.Changes)
	for ti := range lb.Txns {
		txn := &lb.Txns[ti]
		if !txn.Continued {
			r.n = 0
		}
		if r.skip.TxnLSN != 0 && txn.CommitLSN != r.skip.TxnLSN {
			return nil, StreamPosition{}, 0, fmt.Errorf("resuming inside the transaction committed at %s (%d changes held), the slot delivered %s first: %w",
				r.skip.TxnLSN, r.skip.TxnChanges, txn.CommitLSN, ErrTxnNotRedelivered)
		}
		for i := range txn.Changes {
			c := &txn.Changes[i]
			if c.Kind == logrepl.RelationChanged {
				continue // every change points to its relation
			}
			idx := r.n
			r.n++
			if r.skip.TxnLSN != 0 && idx < r.skip.TxnChanges {
				continue // held by the sink since before the restart
			}
			out = append(out, StreamChange{Change: c, TxnLSN: txn.CommitLSN, Index: idx})
		}
		if txn.EndLSN != 0 {
			r.pos = StreamPosition{LSN: txn.EndLSN}
			r.n, r.skip = 0, StreamPosition{}
		}
	}
	if lb.Partial {
		t := lb.Txns[len(lb.Txns)-1]
		r.pos = StreamPosition{LSN: r.pos.LSN, TxnLSN: t.CommitLSN, TxnChanges: max(r.n, r.skip.TxnChanges)}
	} else if r.skip.TxnLSN != 0 && lb.EndLSN > r.skip.TxnLSN {
		return nil, StreamPosition{}, 0, fmt.Errorf("resuming inside the transaction committed at %s (%d changes held), the slot moved on to %s: %w",
			r.skip.TxnLSN, r.skip.TxnChanges, lb.EndLSN, ErrTxnNotRedelivered)
	} else if lb.EndLSN > r.pos.LSN {
		r.pos.LSN = lb.EndLSN // idle: nothing more up to here
	}
	return out, r.pos, lb.Bytes, nil
}

// ErrTxnNotRedelivered: a stream resumed inside a transaction, but the
// slot did not deliver that transaction again; the changes the sink holds
// cannot be completed, and the pipeline must snapshot afresh.
var ErrTxnNotRedelivered = errors.New("the slot no longer delivers a source transaction the sink holds part of")
