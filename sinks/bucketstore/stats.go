package bucketstore

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"
)

// Stats are storage-side counters since the store was opened, for metrics.
type Stats struct {
	// Rows, Ops, Params and Bytes count what writers persisted.
	Rows, Ops, Params, Bytes int64
	// Writes is the number of committed write transactions and WriteTime
	// their total duration (flush latency = WriteTime / Writes).
	Writes    int64
	WriteTime time.Duration
	// Retries counts write transactions retried after a serialization
	// failure or deadlock.
	Retries int64
	// ParameterQueries counts parameter lookup queries (ParameterRows
	// calls that reached storage).
	ParameterQueries int64
	// StateReadAhead counts stream rows written with their stored state
	// read ahead (StreamWriter.Prepare), StateReadAgain those of them a
	// write read again because a write in between may have changed them.
	StateReadAhead, StateReadAgain int64
}

type counters struct {
	rows, ops, params, bytes, writes, writeNanos, retries, paramQueries atomic.Int64
	readAhead, readAgain                                                atomic.Int64
}

func (c *counters) record(r Result, d time.Duration) {
	c.rows.Add(int64(r.Rows))
	c.ops.Add(int64(r.Ops))
	c.params.Add(int64(r.Params))
	c.bytes.Add(r.Bytes)
	c.writes.Add(1)
	c.writeNanos.Add(int64(d))
}

// Stats returns a snapshot of the store's counters.
func (s *Writes) Stats() Stats {
	c := &s.counters
	return Stats{
		Rows: c.rows.Load(), Ops: c.ops.Load(), Params: c.params.Load(), Bytes: c.bytes.Load(),
		Writes: c.writes.Load(), WriteTime: time.Duration(c.writeNanos.Load()), Retries: c.retries.Load(),
		ParameterQueries: c.paramQueries.Load(),
		StateReadAhead:   c.readAhead.Load(), StateReadAgain: c.readAgain.Load(),
	}
}

// Size counts the ops and distinct buckets storage holds (all groups).
func (s *Compactor) Size(ctx context.Context) (ops, buckets int64, err error) {
	if err := s.pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM bucket_data) + (SELECT count(*) FROM bucket_data2),
		(SELECT count(DISTINCT bucket_name) FROM bucket_data) + (SELECT count(DISTINCT (group_id, bucket)) FROM bucket_data2)`).Scan(&ops, &buckets); err != nil {
		return 0, 0, fmt.Errorf("count ops: %w", err)
	}
	return ops, buckets, nil
}
