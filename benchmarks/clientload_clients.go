package benchmarks

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// loadClient is one sync client of the load scenario: it follows its
// user's stream, keeps the seq of every todo it holds, and at each
// checkpoint_complete records which load transactions (seqs) the
// checkpoint brought it, so that the harness can compute commit →
// checkpoint_complete per client and transaction.
type loadClient struct {
	user string

	mu       sync.Mutex
	rows     map[string]int64 // todo id → seq held
	pending  map[int64]bool   // seqs seen in data lines since the last checkpoint_complete
	arrivals []loadArrival    // one per (checkpoint, seq) brought
	synced   bool             // a first checkpoint_complete was read
	resync   bool             // the stream (re)started: its first checkpoint is a full sync, not an arrival
	ops      int64            // data ops read
}

// loadArrival is a transaction's first appearance at one client.
type loadArrival struct {
	seq int64
	op  int64 // the checkpoint's last_op_id
	at  time.Time
}

// loadLine is the part of a sync line the client reads.
type loadLine struct {
	Data               *loadBucketData `json:"data"`
	CheckpointComplete json.RawMessage `json:"checkpoint_complete"`
	Error              json.RawMessage `json:"error"`
}

// loadBucketData is a data line's bucket data.
type loadBucketData struct {
	Data []loadOp `json:"data" bson:"data"`
}

// loadOp is one op of a data line; Data is the row as a JSON string
// (raw_data).
type loadOp struct {
	Op       string  `json:"op" bson:"op"`
	ObjectID string  `json:"object_id" bson:"object_id"`
	Data     *string `json:"data" bson:"data"`
}

// loadClients are the scenario's clients and what they share.
type loadClients struct {
	list   []*loadClient
	http   *http.Client
	ws     bool         // over WebSocket (clientload_ws.go), else HTTP streams
	failed atomic.Int64 // streams that ended with an error
	synced atomic.Int64 // clients past their first checkpoint_complete
	mu     sync.Mutex
	errs   []string // the first few errors, for the report
}

func newLoadClients(users []string, ws bool) *loadClients {
	lc := &loadClients{ws: ws, http: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: len(users)}}}
	for _, u := range users {
		lc.list = append(lc.list, &loadClient{user: u, rows: map[string]int64{}, pending: map[int64]bool{}})
	}
	return lc
}

func (lc *loadClients) fail(c *loadClient, err error) {
	lc.failed.Add(1)
	lc.mu.Lock()
	defer lc.mu.Unlock()
	if len(lc.errs) < 5 {
		lc.errs = append(lc.errs, fmt.Sprintf("client %s: %v", c.user, err))
	}
}

// connectAll connects every client at once, each following its stream
// on wg until ctx ends, and returns the time until every one has read
// its first checkpoint_complete (at most limit).
func (lc *loadClients) connectAll(ctx context.Context, url string, wg *sync.WaitGroup, limit time.Duration) (time.Duration, error) {
	start := time.Now()
	for _, c := range lc.list {
		wg.Go(func() { lc.run(ctx, url, c) })
	}
	if err := waitUntil(ctx, limit, func() bool { return lc.synced.Load() >= int64(len(lc.list)) }); err != nil {
		return 0, fmt.Errorf("first sync: %d of %d clients synced (%d stream errors: %v): %w",
			lc.synced.Load(), len(lc.list), lc.failed.Load(), lc.errs, err)
	}
	return time.Since(start), nil
}

// run follows c's stream until ctx ends, reconnecting (from scratch, a
// new client) after an error, which is counted.
func (lc *loadClients) run(ctx context.Context, url string, c *loadClient) {
	for ctx.Err() == nil {
		err := lc.stream(ctx, url, c)
		if ctx.Err() != nil {
			return
		}
		lc.fail(c, err)
		select {
		case <-time.After(time.Second):
		case <-ctx.Done():
		}
	}
}

func (lc *loadClients) stream(ctx context.Context, url string, c *loadClient) error {
	c.restart()
	if lc.ws {
		return lc.streamWS(ctx, url, c)
	}
	resp, err := openSyncStream(ctx, lc.http, url, c.user, map[string]any{"raw_data": true, "client_id": c.user, "buckets": []any{}})
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	r := bufio.NewReaderSize(resp.Body, 16<<10)
	for {
		line, err := r.ReadBytes('\n')
		if err != nil {
			return fmt.Errorf("read the stream: %w", err)
		}
		now := time.Now()
		var l loadLine
		if err := json.Unmarshal(line, &l); err != nil {
			return fmt.Errorf("bad line %.100q: %w", line, err)
		}
		switch {
		case l.Error != nil:
			return fmt.Errorf("stream error: %s", l.Error)
		case l.Data != nil:
			if err := c.apply(l); err != nil {
				return err
			}
		case l.CheckpointComplete != nil:
			op, err := p5LastOpID(line)
			if err != nil {
				return err
			}
			if c.complete(op, now) {
				lc.synced.Add(1)
			}
		}
	}
}

// apply records the seqs of a data line's PUTs.
func (c *loadClient) apply(l loadLine) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, op := range l.Data.Data {
		c.ops++
		switch op.Op {
		case "PUT":
			if op.Data == nil {
				return fmt.Errorf("PUT of %s without data", op.ObjectID)
			}
			var row struct{ Seq int64 }
			if err := json.Unmarshal([]byte(*op.Data), &row); err != nil {
				return fmt.Errorf("row data of %s: %w", op.ObjectID, err)
			}
			c.rows[op.ObjectID] = row.Seq
			c.pending[row.Seq] = true
		case "REMOVE":
			delete(c.rows, op.ObjectID)
		}
	}
	return nil
}

// restart forgets what c held: a new stream syncs from scratch.
func (c *loadClient) restart() {
	c.mu.Lock()
	defer c.mu.Unlock()
	clear(c.rows)
	clear(c.pending)
	c.resync = true
}

// complete records the pending seqs as arrived now, unless the checkpoint
// completes a full sync; it reports whether this was the client's first
// checkpoint_complete.
func (c *loadClient) complete(op int64, now time.Time) (first bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.resync {
		for s := range c.pending {
			c.arrivals = append(c.arrivals, loadArrival{s, op, now})
		}
	}
	clear(c.pending)
	c.resync = false
	first, c.synced = !c.synced, true
	return first
}

// holds reports whether c holds exactly want (todo id → seq).
func (c *loadClient) holds(want map[string]int64) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.rows) != len(want) {
		return false
	}
	for id, s := range want {
		if got, ok := c.rows[id]; !ok || got != s {
			return false
		}
	}
	return true
}

// forgetArrivals drops the arrivals and op counts recorded so far: a
// scenario that measures in phases computes each phase's figures from its
// own.
func (lc *loadClients) forgetArrivals() {
	for _, c := range lc.list {
		c.mu.Lock()
		c.arrivals, c.ops = c.arrivals[:0], 0
		c.mu.Unlock()
	}
}

// loadLatencies are the load's latencies, one per (client, transaction)
// arrival: commit → checkpoint_complete, split at the checkpoint's
// publication in storage (where it was seen).
type loadLatencies struct {
	total, replication, api []time.Duration
}

// latencies returns the arrivals' latencies, given each transaction's
// commit time and each checkpoint's publication time, and the data ops the
// clients read.
func (lc *loadClients) latencies(committed map[int64]time.Time, published map[int64]time.Time) (l loadLatencies, ops int64) {
	for _, c := range lc.list {
		c.mu.Lock()
		for _, a := range c.arrivals {
			t, ok := committed[a.seq]
			if !ok {
				continue
			}
			// A checkpoint can be read before the generator's commit
			// returned: that lag is zero, not negative.
			l.total = append(l.total, max(a.at.Sub(t), 0))
			if p, ok := published[a.op]; ok {
				l.replication = append(l.replication, max(p.Sub(t), 0))
				l.api = append(l.api, max(a.at.Sub(p), 0))
			}
		}
		ops += c.ops
		c.mu.Unlock()
	}
	return l, ops
}
