package syncapi

import (
	"encoding/json"
	"strconv"
	"testing"
)

// client keeps bucket state the way an SDK does and checks every line
// against the protocol: data only for announced buckets, continuing
// exactly where the bucket stopped (no gaps, no op twice), op ids
// ascending, and at each (partial) checkpoint_complete the sum and count
// of every bucket's ops equal to the announced checksum and count.
type client struct {
	t        *testing.T
	target   map[string]bucketJSON
	targetOp string
	wc       string
	after    map[string]string            // bucket → last op id received
	sums     map[string]uint32            // bucket → sum of op checksums
	counts   map[string]int64             // bucket → ops received
	rows     map[string]map[string]string // bucket → "type/id" → row JSON
	log      map[string][]opJSON          // bucket → ops received
	ops      int                          // ops received
	complete string                       // last completed checkpoint
}

func newClient(t *testing.T) *client {
	return &client{t: t, target: map[string]bucketJSON{}, after: map[string]string{},
		sums: map[string]uint32{}, counts: map[string]int64{}, rows: map[string]map[string]string{},
		log: map[string][]opJSON{}}
}

// positions is the buckets field of a request resuming from this state.
func (c *client) positions() []map[string]string {
	var out []map[string]string
	for name, after := range c.after {
		out = append(out, map[string]string{"name": name, "after": after})
	}
	return out
}

func (c *client) drop(name string) {
	delete(c.target, name)
	delete(c.after, name)
	delete(c.sums, name)
	delete(c.counts, name)
	delete(c.rows, name)
	delete(c.log, name)
}

// rewind forgets a bucket's ops after op id after, as if the client had
// never received them.
func (c *client) rewind(bucket string, after string) {
	n, _ := strconv.ParseInt(after, 10, 64)
	ops, target := c.log[bucket], c.target[bucket]
	c.drop(bucket)
	c.target[bucket] = target
	for _, op := range ops {
		if id, _ := strconv.ParseInt(op.OpID, 10, 64); id <= n {
			c.addOp(bucket, op)
			c.after[bucket] = op.OpID
		}
	}
}

func (c *client) setBucket(b bucketJSON) {
	c.t.Helper()
	if b.Checksum < -1<<31 || b.Checksum >= 1<<31 {
		c.t.Errorf("bucket %s checksum %d is not a signed int32", b.Bucket, b.Checksum)
	}
	c.target[b.Bucket] = b
}

func (c *client) apply(ls ...line) {
	c.t.Helper()
	for _, l := range ls {
		switch {
		case l.Checkpoint != nil:
			cp := l.Checkpoint
			c.target = map[string]bucketJSON{}
			for _, b := range cp.Buckets {
				c.setBucket(b)
			}
			for name := range c.after {
				if _, ok := c.target[name]; !ok {
					c.drop(name)
				}
			}
			c.targetOp, c.wc = cp.LastOpID, cp.WriteCheckpoint
		case l.CheckpointDiff != nil:
			d := l.CheckpointDiff
			for _, b := range d.Updated {
				c.setBucket(b)
			}
			for _, name := range d.Removed {
				c.drop(name)
			}
			c.targetOp = d.LastOpID
			if d.WriteCheckpoint != "" {
				c.wc = d.WriteCheckpoint
			}
		case l.Data != nil:
			c.data(l.Data)
		case l.PartialCheckpointComplete != nil:
			c.verify(l.PartialCheckpointComplete.Priority)
		case l.CheckpointComplete != nil:
			if l.CheckpointComplete.LastOpID != c.targetOp {
				c.t.Errorf("checkpoint_complete %s, but the target is %s", l.CheckpointComplete.LastOpID, c.targetOp)
			}
			c.verify(3)
			c.complete = c.targetOp
		}
	}
}

func (c *client) data(d *dataJSON) {
	c.t.Helper()
	if _, ok := c.target[d.Bucket]; !ok {
		c.t.Errorf("data for %s, which is not in the checkpoint", d.Bucket)
	}
	want := c.after[d.Bucket]
	if want == "" {
		want = "0"
	}
	if d.After != want {
		c.t.Errorf("data for %s after %s, but the client has it up to %s", d.Bucket, d.After, want)
	}
	// A storage read sends at most readBatchOps ops per line; a line
	// from the shared op segments (delta.go) may hold a segment's.
	if len(d.Data) == 0 || len(d.Data) > maxSegmentOps {
		c.t.Errorf("data line for %s with %d ops", d.Bucket, len(d.Data))
	}
	prev, _ := strconv.ParseInt(d.After, 10, 64)
	for _, op := range d.Data {
		id, err := strconv.ParseInt(op.OpID, 10, 64)
		if err != nil || id <= prev {
			c.t.Errorf("op id %q in %s after %d", op.OpID, d.Bucket, prev)
		}
		prev = id
		c.ops++
		c.addOp(d.Bucket, op)
	}
	if d.NextAfter != strconv.FormatInt(prev, 10) {
		c.t.Errorf("data for %s: next_after %s, last op %d", d.Bucket, d.NextAfter, prev)
	}
	c.after[d.Bucket] = d.NextAfter
}

// addOp applies one op to a bucket's state.
func (c *client) addOp(bucket string, op opJSON) {
	c.t.Helper()
	c.log[bucket] = append(c.log[bucket], op)
	c.sums[bucket] += op.Checksum
	c.counts[bucket]++
	rows := c.rows[bucket]
	if rows == nil {
		rows = map[string]string{}
		c.rows[bucket] = rows
	}
	switch op.Op {
	case "MOVE": // compacted: only its checksum counts
		return
	case "CLEAR": // compacted: it replaces everything before it
		clear(rows)
		c.sums[bucket], c.counts[bucket] = op.Checksum, 1
		return
	}
	if op.ObjectType == nil || op.ObjectID == nil {
		c.t.Errorf("%s op without object type or id: %+v", op.Op, op)
		return
	}
	key := *op.ObjectType + "/" + *op.ObjectID
	switch op.Op {
	case "PUT":
		var text string
		if err := json.Unmarshal(op.Data, &text); err != nil {
			text = string(op.Data) // raw_data false: a nested object
		}
		rows[key] = text
	case "REMOVE":
		delete(rows, key)
	default:
		c.t.Errorf("unexpected op %s", op.Op)
	}
}

// verify checks the buckets of priority ≤ maxPriority against the target.
func (c *client) verify(maxPriority int) {
	c.t.Helper()
	for name, b := range c.target {
		if b.Priority > maxPriority {
			continue
		}
		if int32(c.sums[name]) != int32(b.Checksum) || c.counts[name] != b.Count {
			c.t.Errorf("bucket %s at %s: have checksum %d count %d, checkpoint says %d / %d",
				name, c.targetOp, int32(c.sums[name]), c.counts[name], b.Checksum, b.Count)
		}
	}
}
