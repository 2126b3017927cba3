package logrepl

import (
	"context"
	"time"
)

// Next returns the next batch of whole transactions in commit order. Call it
// from one goroutine at a time; ctx bounds this call only.
//
// It returns when a limit of lim is reached, or once lim.MaxWait has passed
// since the call (with lim.Eager: once nothing more is waiting) and it holds
// something: transactions, or — when the stream is idle — a position to
// acknowledge (a Batch with no Txns and a non-zero EndLSN, from the server's
// keepalive WAL end or a syncpipe heartbeat message). A transaction larger than lim.MaxChanges or lim.MaxBytes comes in
// Partial batches (see Batch.Partial). After the last batch of a transaction
// is durable, pass Batch.EndLSN to Ack.
//
// When the stream fails, Next first returns the complete transactions it
// already received, then the error (an *Error for classified failures, such
// as ErrReceiveTimeout); the caller then discards any partial transaction,
// closes the stream and restarts from its last durable position. After
// Close, Next returns ErrClosed.
func (s *Stream) Next(ctx context.Context, lim BatchLimits) (Batch, error) {
	if s.closing.Load() {
		return Batch{}, ErrClosed
	}
	lim = lim.withDefaults()
	b := s.pending // what a cancelled call had collected
	s.pending = Batch{}
	timer := time.NewTimer(lim.MaxWait)
	defer timer.Stop()
	expired := false
	for {
		for len(s.leftover) > 0 {
			seg := s.leftover[0]
			s.leftover[0] = segment{}
			s.leftover = s.leftover[1:]
			if s.take(&b, seg, lim) {
				return s.deliver(b), nil
			}
		}
		select {
		case e := <-s.entries:
			s.leftover = e
			continue
		default:
		}
		if (expired || lim.Eager) && (len(b.Txns) > 0 || b.EndLSN > s.delivered) {
			return s.deliver(b), nil
		}
		select {
		case e := <-s.entries:
			s.leftover = e
		case <-timer.C:
			expired = true
		case <-ctx.Done():
			s.pending = b
			return Batch{}, ctx.Err()
		case <-s.done:
			if s.closing.Load() {
				return Batch{}, ErrClosed
			}
			select {
			case e := <-s.entries:
				s.leftover = e
				continue
			default:
			}
			if len(b.Txns) > 0 {
				return s.deliver(b), nil
			}
			if s.err != nil {
				return Batch{}, s.err
			}
			return Batch{}, ErrClosed
		}
	}
}

// take adds one segment to b and reports whether b must be returned now.
func (s *Stream) take(b *Batch, seg segment, lim BatchLimits) (full bool) {
	if seg.txn == nil {
		b.EndLSN = max(b.EndLSN, seg.pos)
		b.Prompt = b.Prompt || seg.prompt
		return false
	}
	if seg.first {
		h := *seg.txn
		s.cur = &h
	}
	t := s.cur
	if t.Changes == nil {
		t.Changes = seg.changes // handed over: the segment's slice is ours, no copy
	} else {
		t.Changes = append(t.Changes, seg.changes...)
	}
	t.Bytes += seg.bytes
	if seg.last {
		t.EndLSN = seg.endLSN
		b.Txns = append(b.Txns, *t)
		b.Changes += len(t.Changes)
		b.Bytes += t.Bytes
		b.EndLSN = max(b.EndLSN, t.EndLSN)
		s.cur = nil
		return len(b.Txns) >= lim.MaxTxns || b.Changes >= lim.MaxChanges || b.Bytes >= lim.MaxBytes
	}
	if b.Changes+len(t.Changes) < lim.MaxChanges && b.Bytes+t.Bytes < lim.MaxBytes {
		return false
	}
	if len(b.Txns) > 0 {
		return true // deliver the complete ones; t continues in the next call
	}
	// t alone is too large: hand out this piece, keep collecting the rest.
	*b = Batch{Txns: []Txn{*t}, Partial: true, Changes: len(t.Changes), Bytes: t.Bytes}
	s.cur = &Txn{Xid: t.Xid, BeginLSN: t.BeginLSN, CommitLSN: t.CommitLSN, CommitTime: t.CommitTime, Continued: true}
	return true
}

// deliver records what b lets the caller acknowledge and returns it.
func (s *Stream) deliver(b Batch) Batch {
	if b.Partial {
		b.EndLSN = 0
	}
	if b.EndLSN > s.delivered {
		s.delivered = b.EndLSN
		s.deliveredMax.Store(uint64(b.EndLSN))
	}
	return b
}
