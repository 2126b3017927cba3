package syncapi

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"

	"github.com/jackc/pglogrepl"

	"github.com/syncpipe/syncpipe/model"
	"github.com/syncpipe/syncpipe/sinks/bucketstore"
	"github.com/syncpipe/syncpipe/stages/checksum"
)

// fakeStore is bucket storage in memory: groups (the newest ACTIVE,
// those before it STOPped), their ops and parameter entries, write
// checkpoints and published checkpoints. It
// implements GroupReader, Storage, ChecksumSource and CheckpointSource,
// so a Server runs on it with no PostgreSQL, and a test drives
// publication, compaction and storage failures itself. It keeps what the
// protocol sees (ops in op id order — PUTs, the REMOVEs of rows that left
// a bucket, compaction's MOVEs and CLEARs —, parameter entries versioned
// by op id, the compaction floor, the newest checkpoint offered to
// subscribers, and the change records of its writes) and nothing else.
// Without change records (recordChanges not called) its change sets are
// unknown, which makes streams re-evaluate everything at each checkpoint.
type fakeStore struct {
	mu      sync.Mutex
	groups  []bucketstore.Group // ascending id; the last is ACTIVE
	nextOp  int64
	ops     map[string][]bucketstore.OpRow // bucket → ops, ascending op id
	params  []fakeParam                    // ascending op id
	wcs     map[bucketstore.WriteCheckpointClient]fakeWC
	latest  bucketstore.Checkpoint
	subs    map[chan bucketstore.Checkpoint]struct{}
	reads   int // ReadBucketDataShape calls
	queries int // Checksums calls
	summed  int // buckets Checksums summed
	lookups int // ParameterRows calls
	// records: the change records of each write since op id recordFrom,
	// when kept (non-nil).
	records    []fakeRecord
	recordFrom int64
	// rows: per source row, the buckets it is in now and its object
	// there, so that a write REMOVEs it from the buckets it left.
	rows map[fakeRow]map[string]fakeObject
	// live: per source row, the lookup keys it has entries under now.
	live map[fakeRow]map[string]bool
	// floor is the compaction floor (ReadValidity).
	floor int64
	// failing: storage methods that fail, by name, with their error.
	failing map[string]error
	// checksumsAsked, when set, is called by each Checksums call once it
	// has its failure, if any, with f.mu held.
	checksumsAsked func()
}

// fakeRecord is what one write changed in a group: the op ids it drew
// (from, to], the buckets it wrote ops to and the lookup keys it gave
// entries or retractions.
type fakeRecord struct {
	group    int
	from, to int64
	buckets  map[string]bool
	lookups  map[string]bool
}

// fakeRow is a source row of a group.
type fakeRow struct {
	group int
	key   [16]byte
}

// fakeObject is a row's object in one bucket.
type fakeObject struct {
	objectType, objectID, subkey string
}

// fakeParam is one version of a source row's entry under a lookup key;
// rows "[]" retracts it.
type fakeParam struct {
	opID   int64
	key    string
	source fakeRow
	rows   []byte
}

// fakeWC is a client's newest write checkpoint and the LSN it is due at.
type fakeWC struct {
	n   int64
	lsn pglogrepl.LSN
}

// The fake stands in for every interface the server takes.
var (
	_ GroupReader      = (*fakeStore)(nil)
	_ Storage          = (*fakeStore)(nil)
	_ ChecksumSource   = (*fakeStore)(nil)
	_ CheckpointSource = (*fakeStore)(nil)
)

func newFakeStore(groupID int, rules string) *fakeStore {
	return &fakeStore{groups: []bucketstore.Group{{ID: groupID, State: bucketstore.StateActive, Rules: rules}},
		ops: map[string][]bucketstore.OpRow{}, wcs: map[bucketstore.WriteCheckpointClient]fakeWC{},
		subs: map[chan bucketstore.Checkpoint]struct{}{}, rows: map[fakeRow]map[string]fakeObject{},
		live:    map[fakeRow]map[string]bool{},
		failing: map[string]error{}}
}

// write stores upserts and deletes as replication would: a REMOVE in
// each bucket the row left, a PUT per bucket the row is in, and its
// parameter entries, retracting the keys it no longer produces. It
// returns the last op id written.
func (f *fakeStore) write(changes ...model.Change) int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	start := f.nextOp
	defer func() {
		if f.records != nil && len(changes) > 0 {
			f.records = append(f.records, f.record(changes[0].Table.GroupID, start, f.nextOp))
		}
	}()
	for _, c := range changes {
		row := fakeRow{group: c.Table.GroupID, key: c.Key}
		subkey := fmt.Sprintf("%s/%x", c.Table.ID, c.Key)
		now := map[string]fakeObject{}
		for _, p := range c.Puts {
			now[p.Bucket] = fakeObject{objectType: p.ObjectType, objectID: p.ObjectID, subkey: subkey}
		}
		for _, bucket := range slices.Sorted(maps.Keys(f.rows[row])) {
			if _, stays := now[bucket]; stays {
				continue
			}
			o := f.rows[row][bucket]
			f.nextOp++
			f.ops[bucket] = append(f.ops[bucket], bucketstore.OpRow{Bucket: bucket, OpID: f.nextOp,
				Op: bucketstore.OpRemove, ObjectType: o.objectType, ObjectID: o.objectID, Subkey: o.subkey,
				Checksum: checksum.Remove(o.subkey)})
		}
		f.rows[row] = now
		for _, p := range c.Puts {
			f.nextOp++
			f.ops[p.Bucket] = append(f.ops[p.Bucket], bucketstore.OpRow{Bucket: p.Bucket, OpID: f.nextOp,
				Op: bucketstore.OpPut, ObjectType: p.ObjectType, ObjectID: p.ObjectID,
				Subkey: subkey, Data: bytes.Clone(p.Data), Checksum: p.Checksum})
		}
		if c.TracksLookups {
			f.writeLookups(row, c)
		}
	}
	return f.nextOp
}

// setGroup edits the stored group id (its state, its error), as
// replication's catalog writes do.
func (f *fakeStore) setGroup(id int, edit func(*bucketstore.Group)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for i := range f.groups {
		if f.groups[i].ID == id {
			edit(&f.groups[i])
		}
	}
}

// recordChanges makes the fake keep change records from now on, so that
// Changes tells what changed between two checkpoints after the first
// recorded write, as bucketstore's change records do.
func (f *fakeStore) recordChanges() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.records, f.recordFrom = []fakeRecord{}, f.nextOp
}

// record is the change record of the ops group got in (from, to]; f.mu
// must be held.
func (f *fakeStore) record(group int, from, to int64) fakeRecord {
	r := fakeRecord{group: group, from: from, to: to, buckets: map[string]bool{}, lookups: map[string]bool{}}
	for bucket, ops := range f.ops {
		for _, op := range ops {
			if op.OpID > from && op.OpID <= to {
				r.buckets[bucket] = true
			}
		}
	}
	for _, p := range f.params {
		if p.opID > from && p.opID <= to && p.source.group == group {
			r.lookups[p.key] = true
		}
	}
	return r
}

// deploy adds a group for rules and makes it the ACTIVE one, the one
// publish publishes, as a new rules version's first checkpoint does; the
// previous group STOPs.
func (f *fakeStore) deploy(rules string) bucketstore.Group {
	f.mu.Lock()
	defer f.mu.Unlock()
	last := &f.groups[len(f.groups)-1]
	last.State = bucketstore.StateStop
	g := bucketstore.Group{ID: last.ID + 1, State: bucketstore.StateActive, Rules: rules}
	f.groups = append(f.groups, g)
	return g
}

// compact compacts every bucket up to upTo as bucketstore's Compactor
// does, in the fake's terms: it raises the floor first, then turns each
// op a later one of the same object supersedes into a MOVE (its checksum
// kept, its row dropped) and merges each bucket's leading MOVEs and
// REMOVEs into one CLEAR carrying their checksum.
func (f *fakeStore) compact(upTo int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.floor = max(f.floor, upTo)
	for bucket, ops := range f.ops {
		last := map[string]int64{} // object → its newest op id ≤ upTo
		for _, op := range ops {
			if op.OpID <= upTo && (op.Op == bucketstore.OpPut || op.Op == bucketstore.OpRemove) {
				last[op.ObjectType+"/"+op.ObjectID] = op.OpID
			}
		}
		for i, op := range ops {
			if op.OpID <= upTo && (op.Op == bucketstore.OpPut || op.Op == bucketstore.OpRemove) && last[op.ObjectType+"/"+op.ObjectID] != op.OpID {
				ops[i] = bucketstore.OpRow{Bucket: bucket, OpID: op.OpID, Op: bucketstore.OpMove, Checksum: op.Checksum}
			}
		}
		n := 0
		for n < len(ops) && ops[n].OpID <= upTo && ops[n].Op != bucketstore.OpPut {
			n++
		}
		if n < 2 && (n == 0 || ops[0].Op == bucketstore.OpClear) {
			continue
		}
		cleared := bucketstore.OpRow{Bucket: bucket, OpID: ops[n-1].OpID, Op: bucketstore.OpClear}
		for _, op := range ops[:n] {
			cleared.Checksum += op.Checksum
		}
		f.ops[bucket] = append([]bucketstore.OpRow{cleared}, ops[n:]...)
	}
}

// fail makes the storage method named fail with err from now on (nil:
// succeed again).
func (f *fakeStore) fail(method string, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.failing[method] = err
}

// failure is the error the method named is to fail with; f.mu must be
// held.
func (f *fakeStore) failure(method string) error { return f.failing[method] }

// writeLookups versions the row's entries; f.mu must be held.
func (f *fakeStore) writeLookups(row fakeRow, c model.Change) {
	now := map[string][]byte{}
	for _, l := range c.Lookups {
		now[string(l.Key)] = l.Params
	}
	for key := range f.live[row] {
		if _, ok := now[key]; !ok {
			now[key] = []byte("[]")
		}
	}
	live := map[string]bool{}
	for key, rows := range now {
		f.nextOp++
		f.params = append(f.params, fakeParam{opID: f.nextOp, key: key, source: row, rows: bytes.Clone(rows)})
		if string(rows) != "[]" {
			live[key] = true
		}
	}
	f.live[row] = live
}

// publish makes op ids up to opID readable at lsn and offers the
// checkpoint to every subscriber, replacing one not read yet.
func (f *fakeStore) publish(opID int64, lsn pglogrepl.LSN) bucketstore.Checkpoint {
	f.mu.Lock()
	defer f.mu.Unlock()
	cp := bucketstore.Checkpoint{GroupID: f.groups[len(f.groups)-1].ID, OpID: opID, LSN: lsn, LSNText: lsn.String()}
	f.latest = cp
	for ch := range f.subs {
		offerLatest(ch, cp)
	}
	return cp
}

// offerLatest puts cp in a one-slot channel, dropping an unread older
// value: only the newest checkpoint matters to a stream.
func offerLatest(ch chan bucketstore.Checkpoint, cp bucketstore.Checkpoint) {
	select {
	case <-ch:
	default:
	}
	ch <- cp
}

func (f *fakeStore) Subscribe(ctx context.Context) <-chan bucketstore.Checkpoint {
	ch := make(chan bucketstore.Checkpoint, 1)
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.latest.OpID > 0 || f.latest.LSN > 0 {
		ch <- f.latest
	}
	f.subs[ch] = struct{}{}
	context.AfterFunc(ctx, func() {
		f.mu.Lock()
		defer f.mu.Unlock()
		delete(f.subs, ch)
		close(ch)
	})
	return ch
}

func (f *fakeStore) Group(_ context.Context, id int) (bucketstore.Group, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.failure("Group"); err != nil {
		return bucketstore.Group{}, err
	}
	for _, g := range f.groups {
		if g.ID == id {
			return g, nil
		}
	}
	return bucketstore.Group{}, bucketstore.ErrNoGroup
}

func (f *fakeStore) Groups(context.Context) ([]bucketstore.Group, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.failure("Groups"); err != nil {
		return nil, err
	}
	return slices.Clone(f.groups), nil
}

func (f *fakeStore) ParameterRows(_ context.Context, group int, checkpoint int64, lookups [][]byte, limit int) ([][][]byte, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.failure("ParameterRows"); err != nil {
		return nil, err
	}
	out := make([][][]byte, len(lookups))
	n := 0
	for i, key := range lookups {
		f.lookups++
		newest := map[fakeRow][]byte{} // per source row, at or below checkpoint
		for _, p := range f.params {
			if p.opID <= checkpoint && p.key == string(key) && p.source.group == group {
				newest[p.source] = p.rows
			}
		}
		for _, rows := range newest {
			if string(rows) == "[]" {
				continue
			}
			if n++; limit > 0 && n > limit {
				return nil, fmt.Errorf("%w: more than %d", bucketstore.ErrTooManyParameterResults, limit)
			}
			out[i] = append(out[i], rows)
		}
	}
	return out, nil
}

func (f *fakeStore) ReadValidity(_ context.Context, group int) (bucketstore.Validity, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.failure("ReadValidity"); err != nil {
		return bucketstore.Validity{}, err
	}
	v := bucketstore.Validity{CompactFloor: f.floor}
	for _, g := range f.groups {
		if g.ID == group {
			v.Serving = g.Serving()
		}
	}
	return v, nil
}

func (f *fakeStore) ReadBucketDataShape(_ context.Context, _ bucketstore.ReadShape, _ int, checkpoint int64,
	reqs []bucketstore.BucketRequest, limit int, fn func(*bucketstore.OpRow) error) (bool, error) {
	f.mu.Lock()
	f.reads++
	if err := f.failure("ReadBucketDataShape"); err != nil {
		f.mu.Unlock()
		return false, err
	}
	var rows []bucketstore.OpRow
	for _, r := range reqs {
		for _, op := range f.ops[r.Bucket] {
			if op.OpID > r.After && op.OpID <= checkpoint {
				rows = append(rows, op)
			}
		}
	}
	f.mu.Unlock()
	more := len(rows) > limit
	for i := range rows[:min(len(rows), limit)] {
		if err := fn(&rows[i]); err != nil {
			return false, err
		}
	}
	return more, nil
}

func (f *fakeStore) Checksums(_ context.Context, _ int, checkpoint int64, buckets []string) ([]bucketstore.BucketChecksum, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.queries++
	err := f.failure("Checksums")
	if f.checksumsAsked != nil {
		f.checksumsAsked()
	}
	if err != nil {
		return nil, err
	}
	out := make([]bucketstore.BucketChecksum, len(buckets))
	f.summed += len(buckets)
	for i, b := range buckets {
		out[i].Bucket = b
		for _, op := range f.ops[b] {
			if op.OpID <= checkpoint {
				out[i].Checksum += op.Checksum
				out[i].Count++
			}
		}
	}
	return out, nil
}

// Changes answers from the change records of the writes in (from, to]
// when they are kept and cover the range; otherwise "unknown", and
// streams recompute buckets and sums.
func (f *fakeStore) Changes(_ context.Context, group int, from, to int64) (bucketstore.ChangeSet, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.records == nil || from < f.recordFrom {
		return bucketstore.ChangeSet{}, nil
	}
	var buckets []string
	var lookups [][]byte
	for _, r := range f.records {
		if r.group != group || r.to <= from || r.from >= to {
			continue
		}
		for b := range r.buckets {
			buckets = append(buckets, b)
		}
		for k := range r.lookups {
			lookups = append(lookups, []byte(k))
		}
	}
	return bucketstore.KnownChanges(buckets, lookups), nil
}

// Stats counts the Checksums calls and the buckets they summed, as the
// ChecksumCache counts its queries and misses.
func (f *fakeStore) Stats() bucketstore.ChecksumStats {
	f.mu.Lock()
	defer f.mu.Unlock()
	return bucketstore.ChecksumStats{Queries: int64(f.queries), Misses: int64(f.summed)}
}

func (f *fakeStore) CreateWriteCheckpoint(_ context.Context, userID, clientID string, lsn pglogrepl.LSN) (int64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.failure("CreateWriteCheckpoint"); err != nil {
		return 0, err
	}
	k := bucketstore.WriteCheckpointClient{UserID: userID, ClientID: clientID}
	wc := f.wcs[k]
	wc.n, wc.lsn = wc.n+1, max(wc.lsn, lsn)
	f.wcs[k] = wc
	return wc.n, nil
}

func (f *fakeStore) RequestWriteCheckpoint(_ context.Context, userID, clientID string, requested int64, lsn pglogrepl.LSN) (int64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.failure("RequestWriteCheckpoint"); err != nil {
		return 0, err
	}
	k := bucketstore.WriteCheckpointClient{UserID: userID, ClientID: clientID}
	wc := f.wcs[k]
	wc.n, wc.lsn = max(wc.n, requested), max(wc.lsn, lsn)
	f.wcs[k] = wc
	return wc.n, nil
}

func (f *fakeStore) WriteCheckpointFor(_ context.Context, userID, clientID string, lsn pglogrepl.LSN) (int64, bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	wc, ok := f.wcs[bucketstore.WriteCheckpointClient{UserID: userID, ClientID: clientID}]
	if !ok || wc.lsn > lsn {
		return 0, false, nil
	}
	return wc.n, true, nil
}

func (f *fakeStore) WriteCheckpointsFor(ctx context.Context, clients []bucketstore.WriteCheckpointClient, lsn pglogrepl.LSN) (map[bucketstore.WriteCheckpointClient]int64, error) {
	out := map[bucketstore.WriteCheckpointClient]int64{}
	for _, c := range clients {
		if n, ok, _ := f.WriteCheckpointFor(ctx, c.UserID, c.ClientID, lsn); ok {
			out[c] = n
		}
	}
	return out, nil
}
