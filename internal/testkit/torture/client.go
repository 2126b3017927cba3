package torture

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// Client is a PowerSync protocol client that follows /sync/stream
// through every failure: it reconnects (resuming from the op ids it
// holds), applies ops to its buckets and, at every checkpoint_complete,
// checks each bucket's checksum against the checkpoint's. It records as
// violations: a checksum mismatch, a checkpoint lower than one it
// completed before, an op delivered twice (an op id at or below the
// bucket's position), and a malformed line. Connection failures are not
// violations; they are retried. PUT checksums are checked with
// PutChecksum, not the product's checksum package. (cli's syncClient is
// the same protocol client but lives in a _test.go file; nothing
// importable offers one.)
type Client struct {
	Name  string
	url   string
	token string
	http  *http.Client

	mu         sync.Mutex
	buckets    map[string]*clientBucket
	target     map[string]int32 // the pending checkpoint's checksums
	pending    int64            // the pending checkpoint's op id
	complete   int64            // last completed checkpoint
	completes  int
	connects   int
	ops        int64
	violations []string
	// watch, when set, is called at every complete checkpoint with the
	// client's rows (bucket → "type/id" → data); a non-empty result is a
	// violation.
	watch func(checkpoint int64, rows map[string]map[string]string) string
}

// SetWatch installs (or, with nil, removes) a check of every complete
// checkpoint; see Client.watch.
func (c *Client) SetWatch(f func(checkpoint int64, rows map[string]map[string]string) string) {
	c.mu.Lock()
	c.watch = f
	c.mu.Unlock()
}

type clientBucket struct {
	after int64 // op id of the last op received
	sum   uint32
	rows  map[string]string // "type/id" → data
}

// NewClient syncs from the API at addr (host:port) with a bearer token.
func NewClient(name, addr, token string) *Client {
	return &Client{Name: name, url: "http://" + addr + "/sync/stream", token: token,
		http:    &http.Client{Transport: &http.Transport{DisableCompression: true, MaxIdleConns: 1}},
		buckets: map[string]*clientBucket{}, target: map[string]int32{}}
}

// Run syncs until ctx ends.
func (c *Client) Run(ctx context.Context) {
	for ctx.Err() == nil {
		_ = c.once(ctx)
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func (c *Client) once(ctx context.Context) error {
	c.mu.Lock()
	have := []map[string]string{}
	for name, b := range c.buckets {
		have = append(have, map[string]string{"name": name, "after": strconv.FormatInt(b.after, 10)})
	}
	c.connects++
	c.mu.Unlock()
	body, err := json.Marshal(map[string]any{"buckets": have, "raw_data": true, "include_checksum": true, "client_id": c.Name})
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Token "+c.token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.http.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", c.url, resp.Status)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 256<<20)
	for sc.Scan() {
		if len(bytes.TrimSpace(sc.Bytes())) == 0 {
			continue
		}
		if err := c.line(sc.Bytes()); err != nil {
			c.violate("%v", err)
			return err
		}
	}
	return sc.Err()
}

func (c *Client) violate(format string, args ...any) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.violations = append(c.violations, fmt.Sprintf(format, args...))
}

type wireChecksum struct {
	Bucket   string `json:"bucket"`
	Checksum int32  `json:"checksum"`
}

type wireOp struct {
	OpID       string  `json:"op_id"`
	Op         string  `json:"op"`
	ObjectType string  `json:"object_type"`
	ObjectID   string  `json:"object_id"`
	Data       *string `json:"data"`
	Checksum   uint32  `json:"checksum"`
}

type wireLine struct {
	Checkpoint *struct {
		LastOpID string         `json:"last_op_id"`
		Buckets  []wireChecksum `json:"buckets"`
	} `json:"checkpoint"`
	Diff *struct {
		LastOpID string         `json:"last_op_id"`
		Updated  []wireChecksum `json:"updated_buckets"`
		Removed  []string       `json:"removed_buckets"`
	} `json:"checkpoint_diff"`
	Data *struct {
		Bucket    string   `json:"bucket"`
		NextAfter string   `json:"next_after"`
		Data      []wireOp `json:"data"`
	} `json:"data"`
	Complete *struct {
		LastOpID string `json:"last_op_id"`
	} `json:"checkpoint_complete"`
}

func parseID(s string) (int64, error) {
	if s == "" {
		return 0, nil
	}
	return strconv.ParseInt(s, 10, 64)
}

// lineOpID parses the last_op_id of a line of kind (checkpoint,
// checkpoint_diff, checkpoint_complete).
func (c *Client) lineOpID(kind, s string) (int64, error) {
	id, err := parseID(s)
	if err != nil {
		return 0, fmt.Errorf("%s: %s op id %q: %w", c.Name, kind, s, err)
	}
	return id, nil
}

func (c *Client) line(b []byte) error {
	var l wireLine
	if err := json.Unmarshal(b, &l); err != nil {
		return fmt.Errorf("%s: bad line %.200q: %w", c.Name, b, err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case l.Checkpoint != nil:
		return c.checkpoint(l.Checkpoint.LastOpID, l.Checkpoint.Buckets)
	case l.Diff != nil:
		return c.diff(l.Diff.LastOpID, l.Diff.Updated, l.Diff.Removed)
	case l.Data != nil:
		return c.data(l.Data.Bucket, l.Data.NextAfter, l.Data.Data)
	case l.Complete != nil:
		return c.completeCheckpoint(l.Complete.LastOpID)
	}
	return nil
}

// checkpoint starts a new pending checkpoint; buckets it does not name are
// dropped. c.mu is held.
func (c *Client) checkpoint(lastOpID string, buckets []wireChecksum) error {
	id, err := c.lineOpID("checkpoint", lastOpID)
	if err != nil {
		return err
	}
	if id < c.complete {
		return fmt.Errorf("%s: checkpoint went backwards: %d after checkpoint %d was complete", c.Name, id, c.complete)
	}
	c.pending = id
	c.target = map[string]int32{}
	for _, wb := range buckets {
		c.target[wb.Bucket] = wb.Checksum
	}
	for name := range c.buckets {
		if _, ok := c.target[name]; !ok {
			delete(c.buckets, name)
		}
	}
	return nil
}

// diff updates the pending checkpoint. c.mu is held.
func (c *Client) diff(lastOpID string, updated []wireChecksum, removed []string) error {
	id, err := c.lineOpID("checkpoint_diff", lastOpID)
	if err != nil {
		return err
	}
	if id < c.pending || id < c.complete {
		return fmt.Errorf("%s: checkpoint_diff went backwards: %d after %d (complete %d)", c.Name, id, c.pending, c.complete)
	}
	c.pending = id
	for _, wb := range updated {
		c.target[wb.Bucket] = wb.Checksum
	}
	for _, name := range removed {
		delete(c.target, name)
		delete(c.buckets, name)
	}
	return nil
}

// data applies a bucket's ops. c.mu is held.
func (c *Client) data(name, nextAfter string, ops []wireOp) error {
	bk := c.buckets[name]
	if bk == nil {
		bk = &clientBucket{rows: map[string]string{}}
		c.buckets[name] = bk
	}
	for _, op := range ops {
		if err := c.apply(name, bk, op); err != nil {
			return err
		}
	}
	if next, err := parseID(nextAfter); err == nil && next > bk.after {
		bk.after = next
	}
	return nil
}

// apply applies one op to bucket name. c.mu is held.
func (c *Client) apply(name string, bk *clientBucket, op wireOp) error {
	id, err := parseID(op.OpID)
	if err != nil {
		return fmt.Errorf("%s: bucket %s: op id %q: %w", c.Name, name, op.OpID, err)
	}
	if id <= bk.after {
		return fmt.Errorf("%s: bucket %s: op %d (%s %s/%s) delivered again or out of order: the bucket is at op %d",
			c.Name, name, id, op.Op, op.ObjectType, op.ObjectID, bk.after)
	}
	if id > c.pending {
		return fmt.Errorf("%s: bucket %s: op %d beyond the pending checkpoint %d", c.Name, name, id, c.pending)
	}
	bk.after = id
	c.ops++
	key := op.ObjectType + "/" + op.ObjectID
	switch op.Op {
	case "PUT":
		if op.Data == nil {
			return fmt.Errorf("%s: bucket %s: PUT op %d of %s without data", c.Name, name, id, key)
		}
		if got := PutChecksum(op.ObjectType, op.ObjectID, *op.Data); got != op.Checksum {
			return fmt.Errorf("%s: bucket %s: PUT op %d of %s: checksum %d, its data hashes to %d", c.Name, name, id, key, op.Checksum, got)
		}
		bk.sum += op.Checksum
		bk.rows[key] = *op.Data
	case "REMOVE":
		bk.sum += op.Checksum
		delete(bk.rows, key)
	case "MOVE":
		bk.sum += op.Checksum
	case "CLEAR":
		bk.sum = op.Checksum
		bk.rows = map[string]string{}
	default:
		return fmt.Errorf("%s: bucket %s: op %d: unknown op %q", c.Name, name, id, op.Op)
	}
	return nil
}

// completeCheckpoint checks every bucket's checksum against the pending
// checkpoint's and, if they agree, completes it. c.mu is held.
func (c *Client) completeCheckpoint(lastOpID string) error {
	id, err := c.lineOpID("checkpoint_complete", lastOpID)
	if err != nil {
		return err
	}
	if id < c.complete {
		return fmt.Errorf("%s: checkpoint_complete %d after checkpoint %d was complete", c.Name, id, c.complete)
	}
	for name, want := range c.target {
		var sum uint32
		var last int64
		if bk := c.buckets[name]; bk != nil {
			sum, last = bk.sum, bk.after
		}
		if int32(sum) != want {
			return fmt.Errorf("%s: checkpoint %d: bucket %s: ops received (up to op %d) sum to checksum %d, the checkpoint says %d",
				c.Name, id, name, last, int32(sum), want)
		}
	}
	c.complete = id
	c.completes++
	if c.watch == nil {
		return nil
	}
	rows := make(map[string]map[string]string, len(c.buckets))
	for name, bk := range c.buckets {
		rows[name] = bk.rows
	}
	if v := c.watch(id, rows); v != "" {
		c.violations = append(c.violations, fmt.Sprintf("%s: checkpoint %d: %s", c.Name, id, v))
	}
	return nil
}

// ClientState is a client's buckets at its last complete checkpoint.
type ClientState struct {
	Checkpoint int64
	Buckets    map[string]map[string]string
	Sums       map[string]uint32
}

// Snapshot returns the client's state if its last complete checkpoint is
// the one it is working on (no newer checkpoint partly applied), else ok
// is false.
func (c *Client) Snapshot() (st ClientState, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.pending != c.complete {
		return st, false
	}
	st = ClientState{Checkpoint: c.complete, Buckets: map[string]map[string]string{}, Sums: map[string]uint32{}}
	for name := range c.target {
		rows := map[string]string{}
		var sum uint32
		if bk := c.buckets[name]; bk != nil {
			for k, v := range bk.rows {
				rows[k] = v
			}
			sum = bk.sum
		}
		st.Buckets[name] = rows
		st.Sums[name] = sum
	}
	return st, true
}

// Violations returns what the client found wrong so far.
func (c *Client) Violations() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.violations...)
}

// Stats: checkpoints completed, connections made, ops applied.
func (c *Client) Stats() (completes, connects int, ops int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.completes, c.connects, c.ops
}
