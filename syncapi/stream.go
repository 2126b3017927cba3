package syncapi

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"runtime/debug"
	"slices"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/syncpipe/syncpipe/sinks/bucketstore"
	"github.com/syncpipe/syncpipe/stages/syncrules"
)

// Span attributes.
var (
	attrCode       = attribute.Key("syncapi.error_code")
	attrGroup      = attribute.Key("syncapi.group")
	attrCheckpoint = attribute.Key("syncapi.checkpoint")
	attrBuckets    = attribute.Key("syncapi.buckets")
	attrOps        = attribute.Key("syncapi.ops")
	attrBytes      = attribute.Key("syncapi.bytes")
	attrMore       = attribute.Key("syncapi.more")
)

// Reasons a stream ends without an error line.
var (
	errTokenExpired = errors.New("token expired")
	errClosed       = errors.New("server closing")
)

// bucketState is what the client was told about one bucket (48 bytes: a
// stream keeps one per bucket for as long as it is connected).
type bucketState struct {
	name     string
	count    int64
	priority int
	// after: the client has the bucket's ops up to this op id.
	after    int64
	checksum uint32
	// pending: ops up to the target checkpoint remain to be sent.
	pending bool
	// behind: the client may lack ops below the previous checkpoint
	// (delta.go): the bucket was pending when the checkpoint being sent
	// was evaluated, or is new to the client.
	behind bool
}

// conn is one sync stream. It runs on its handler's goroutine only.
type conn struct {
	s   *Server
	id  identity
	req *syncRequest
	w   *lineWriter
	log *slog.Logger

	sub       <-chan bucketstore.Checkpoint
	keepalive *time.Ticker
	expiry    *time.Timer

	// readStorage: the checkpoint being sent read ops from storage (not
	// only from the shared op segments), which compaction may rewrite and
	// a takeover's clearing may empty (checkValidity).
	readStorage bool

	// The group served and this request's evaluation of its rules.
	group int
	plan  *syncrules.RequestPlan
	keys  [][]byte // the keys of plan.Lookups
	// stagedKeys are the keys plan.Staged looked up at the last
	// resolution, every stage's: when none of them got an entry since,
	// the stages resolve to the same buckets (lookupsChanged).
	stagedKeys [][]byte
	// streams is what checkpoint lines say of Sync Streams (nil: the
	// rules have none).
	streams *streamsInfo

	// The buckets and checksums at the last storage checkpoint evaluated.
	evaluated bool
	evalOpID  int64
	refs      []syncrules.BucketRef
	hashes    []uint64 // bucketstore.BucketHash of each of refs
	sums      []bucketstore.BucketChecksum

	// What the client was told: the target checkpoint (the last one
	// announced), whether checkpoint_complete was sent for it, and the
	// announced buckets, in the rules order of the evaluation that last
	// changed them, with their indexes sorted by name (a slice and an
	// index rather than a map of pointers: half the memory per bucket).
	announced     bool
	target        bucketstore.Checkpoint
	complete      bool
	forceAnnounce bool // announce the next checkpoint even if unchanged
	sent          []bucketState
	byName        []int32
	writeCP       int64
	// stale: the evaluation since the last announcement changed the bucket
	// list or recomputed a checksum, so it may differ from sent. Without
	// it the client was told everything as evaluated: a checkpoint that
	// changed nothing of the client's costs no comparison per bucket.
	stale bool

	batch   batch
	entries []bucketEntry
	opsSent int64

	wcClient   bucketstore.WriteCheckpointClient
	unregister func() // from the write checkpoint reads
	caughtUp   bool   // completed the checkpoint before the one being sent
	// delta: the new ops of the checkpoint being sent, shared by the
	// streams (delta.go).
	delta *checkpointDelta
}

func newConn(s *Server, id identity, req *syncRequest, w *lineWriter) *conn {
	return &conn{s: s, id: id, req: req, w: w,
		log: s.log.With("user", id.userID, "client_id", req.clientID)}
}

// run serves the stream until the client leaves, the token expires, the
// server closes or an error ends it (reported as an error line).
//
// An idle stream's goroutine waits in loop for as long as the client
// stays connected, and the runtime keeps a goroutine's stack at four
// times what is in use at the deepest frame it rests in: so run keeps its
// own frame small, starting and ending the stream in functions that are
// not inlined (TestIdleStreamMemory: an idle stream's stacks 12 → 8–10 KB).
func (c *conn) run(ctx context.Context) {
	start := time.Now()
	c.start(ctx)
	defer c.stop()
	c.end(ctx, c.loop(ctx), start)
}

// start subscribes the stream to checkpoints and starts its timers.
//
//go:noinline
func (c *conn) start(ctx context.Context) {
	c.sub = c.s.checkpoints.Subscribe(ctx)
	c.wcClient = bucketstore.WriteCheckpointClient{UserID: c.id.userID, ClientID: c.req.clientID}
	c.unregister = c.s.wcs.register(c.wcClient)
	c.keepalive = time.NewTicker(c.s.cfg.KeepaliveInterval)
	c.expiry = time.NewTimer(c.id.expires.Sub(c.s.cfg.Now()))
	c.log.Debug("sync stream started", "buckets_requested", len(c.req.buckets))
}

// stop undoes start and ends the body.
//
//go:noinline
func (c *conn) stop() {
	c.expiry.Stop()
	c.keepalive.Stop()
	c.unregister()
	c.w.close()
}

// end logs why the stream ended and tells the client when it should know.
//
//go:noinline
func (c *conn) end(ctx context.Context, err error, start time.Time) {
	attrs := []any{"reason", err, "duration", time.Since(start), "ops", c.opsSent, "bytes", c.w.bytes}
	var ae *apiError
	switch {
	// A failed write first: net/http cancels ctx too once the connection
	// breaks (a stalled client's write deadline passed, say).
	case errors.Is(err, errClientWrite) || errors.Is(err, errAborted):
		c.log.Debug("sync stream ended: client unreachable", attrs...)
	case ctx.Err() != nil || errors.Is(err, errTokenExpired) || errors.Is(err, errClosed):
		c.log.Debug("sync stream ended", attrs...)
	case errors.As(err, &ae):
		c.log.Info("sync stream ended with an error", attrs...)
		_ = c.w.streamError(ae.code, ae.msg)
	default:
		c.log.Warn("sync stream failed", attrs...)
		_ = c.w.streamError(codeInternal, "sync stream failed; reconnect to resume")
	}
}

func (c *conn) loop(ctx context.Context) error {
	if err := c.sendToken(); err != nil {
		return err
	}
	var next bucketstore.Checkpoint
	have := false
	for {
		if !have {
			c.release() // nothing to send until the next checkpoint
			cp, err := c.wait(ctx)
			if err != nil {
				return err
			}
			if c.unaffected(ctx, cp) {
				continue
			}
			next = cp
		}
		cp := next
		var err error
		if next, have, err = c.serve(ctx, cp); errors.Is(err, bucketstore.ErrGroupStopped) {
			// cp's group was taken over and is being cleared: nothing of
			// it can be served any more, and cp is not completed. The new
			// group's checkpoint follows (the watcher delivers the ACTIVE
			// group's) and is announced whatever it holds.
			c.log.Debug("checkpoint of a stopped group skipped", "group", cp.GroupID, "err", err)
			c.forceAnnounce, have = true, false
			continue
		}
		if err != nil {
			return err
		}
	}
}

// serve evaluates cp for the client and sends what it lacks, on a
// goroutine of its own (onFreshStack). It returns a newer checkpoint
// that arrived meanwhile and superseded cp, if any.
func (c *conn) serve(ctx context.Context, cp bucketstore.Checkpoint) (next bucketstore.Checkpoint, superseded bool, err error) {
	err = onFreshStack(func() error {
		if err := c.prepare(ctx, cp); err != nil {
			return err
		}
		if c.complete {
			return nil // nothing new for this client
		}
		var err error
		next, superseded, err = c.sendData(ctx)
		return err
	})
	return next, superseded, err
}

// onFreshStack runs f on a new goroutine and waits for it. The work of a
// checkpoint (storage queries, rules evaluation, encoding) grows a
// goroutine's stack to 16 KB and more, and the runtime shrinks a stack
// only at a GC, by half, and only while its in-use part is below a
// quarter of it: the stream's own goroutine would hold the grown stack
// well into its idle wait. A goroutine that ends gives its stack back. A
// panic in f is raised again on the caller's goroutine, with f's stack,
// so the stream's recovery (net/http's, or recoverStream) sees it as
// before.
func onFreshStack(f func() error) error {
	type result struct {
		err      error
		panicked any
		stack    []byte
	}
	done := make(chan result, 1)
	go func() {
		var r result
		defer func() {
			if p := recover(); p != nil {
				r.panicked, r.stack = p, debug.Stack()
			}
			done <- r
		}()
		r.err = f()
	}()
	r := <-done
	switch {
	case r.panicked == nil:
		return r.err
	case r.panicked == http.ErrAbortHandler: // net/http tests for this very value
		panic(r.panicked)
	default:
		panic(fmt.Sprintf("%v\n\n[on the goroutine serving a checkpoint]\n%s", r.panicked, r.stack))
	}
}

// release drops what the stream needs only while it sends (the data
// batch, the checkpoint entries, the line scratch buffer), which grow to
// its largest burst: an idle stream keeps its bucket state only.
func (c *conn) release() {
	c.delta = nil
	c.batch.release()
	c.entries = nil
	c.w.release()
}

func (c *conn) sendToken() error {
	left := max(int64(c.id.expires.Sub(c.s.cfg.Now())/time.Second), 0)
	return c.w.tokenExpiresIn(left)
}

// wait blocks until a new storage checkpoint, sending keepalives.
func (c *conn) wait(ctx context.Context) (bucketstore.Checkpoint, error) {
	for {
		cp, ok, err := c.poll(ctx, true)
		if err != nil || ok {
			return cp, err
		}
	}
}

// poll handles what may happen while a stream is busy or idle: a new
// checkpoint (ok), a keepalive, token expiry, the client leaving or the
// server closing. With block false it returns at once if none is ready.
func (c *conn) poll(ctx context.Context, block bool) (cp bucketstore.Checkpoint, ok bool, err error) {
	const (
		evDone = iota
		evCheckpoint
		evExpired
		evKeepalive
	)
	var ev int
	open := true
	if block {
		select {
		case <-ctx.Done():
			ev = evDone
		case cp, open = <-c.sub:
			ev = evCheckpoint
		case <-c.expiry.C:
			ev = evExpired
		case <-c.keepalive.C:
			ev = evKeepalive
		}
	} else {
		select {
		case <-ctx.Done():
			ev = evDone
		case cp, open = <-c.sub:
			ev = evCheckpoint
		case <-c.expiry.C:
			ev = evExpired
		case <-c.keepalive.C:
			ev = evKeepalive
		default:
			return cp, false, nil
		}
	}
	switch ev {
	case evDone:
		return cp, false, ctx.Err()
	case evCheckpoint:
		if !open {
			return cp, false, errClosed
		}
		return cp, true, nil
	case evExpired:
		_ = c.w.tokenExpiresIn(0)
		return cp, false, errTokenExpired
	default:
		return cp, false, c.sendToken()
	}
}

// prepare evaluates a storage checkpoint for this client: its buckets
// (parameter lookups at the checkpoint) and their checksums (through the
// shared cache), then announces it with a checkpoint or checkpoint_diff
// line if anything changed for the client.
func (c *conn) prepare(ctx context.Context, cp bucketstore.Checkpoint) (err error) {
	// Every stream prepares every checkpoint: without tracing, building
	// spans that go nowhere was a twentieth of the API's CPU.
	span := trace.SpanFromContext(ctx)
	if c.s.traced {
		ctx, span = c.s.tracer.Start(ctx, "syncapi.checkpoint",
			trace.WithAttributes(attrGroup.Int(cp.GroupID), attrCheckpoint.Int64(cp.OpID)))
		defer func() {
			if err != nil {
				span.RecordError(err)
				span.SetStatus(codes.Error, err.Error())
			}
			span.End()
		}()
	}
	if c.plan == nil || cp.GroupID != c.group {
		rules, err := c.s.rulesFor(ctx, cp.GroupID)
		if err != nil {
			return &apiError{code: codeNoRules, msg: fmt.Sprintf("cannot load the sync rules: %v", err)}
		}
		plan, err := rules.Request(syncrules.Request{UserID: c.id.userID, Claims: c.id.claims, Parameters: c.req.parameters, Streams: c.req.streams})
		if plan == nil {
			return &apiError{code: codeBadRequest, msg: fmt.Sprintf("cannot evaluate the sync rules for this request: %v", err)}
		}
		if err != nil {
			c.log.Warn("sync rules: some parameter queries failed for this request", "err", err)
		}
		c.group, c.plan, c.evaluated = cp.GroupID, plan, false
		c.streams = nil
		if rules.StreamsLine() > 0 {
			c.streams = newStreamsInfo(plan, c.req.streams, rules.StreamNames())
		}
		c.keys, c.stagedKeys = make([][]byte, len(plan.Lookups)), nil
		for i := range plan.Lookups {
			c.keys[i] = plan.Lookups[i].Key
		}
	}
	// The write checkpoint read (one query per checkpoint for all streams,
	// writecp.go) does not depend on the evaluation: run both at once.
	type wcResult struct {
		n   int64
		due bool
		err error
	}
	wcDone := make(chan wcResult, 1)
	if n, due, ok := c.s.wcs.peek(c.wcClient, cp.LSN); ok {
		wcDone <- wcResult{n: n, due: due}
	} else {
		go func() {
			n, due, err := c.s.wcs.get(ctx, c.wcClient, cp.LSN)
			wcDone <- wcResult{n, due, err}
		}()
	}
	// Ops and parameter entries share one op id sequence, so a checkpoint
	// with the same op id (an LSN-only move) changes neither buckets nor
	// checksums.
	if !c.evaluated || cp.OpID != c.evalOpID {
		if err := c.evaluate(ctx, cp); err != nil {
			return err
		}
	}
	if c.s.traced {
		span.SetAttributes(attrBuckets.Int(len(c.refs)))
	}
	r := <-wcDone
	wc, due, err := r.n, r.due, r.err
	if err != nil {
		return fmt.Errorf("write checkpoint at %s: %w", cp.LSN, err)
	}
	if !due {
		wc = c.writeCP
	}
	return c.announce(cp, wc)
}

// resolveBuckets lists the buckets the client is entitled to at cp.
func (c *conn) resolveBuckets(ctx context.Context, cp bucketstore.Checkpoint) ([]syncrules.BucketRef, error) {
	limit := c.s.cfg.MaxBucketsPerConnection
	refs := append([]syncrules.BucketRef(nil), c.plan.Static...)
	if len(c.keys) > 0 {
		rows, err := c.parameterRows(ctx, cp, c.keys, c.s.cfg.MaxParameterQueryResults)
		if err != nil {
			return nil, err
		}
		for i := range c.plan.Lookups {
			for _, r := range rows[i] {
				if refs, err = c.plan.Lookups[i].Buckets(r, refs); err != nil {
					c.log.Warn("sync rules: bad stored parameter row", "err", err)
				}
			}
		}
	}
	if len(c.plan.Staged) > 0 {
		var err error
		if refs, err = c.resolveStaged(ctx, cp, refs, c.s.cfg.MaxParameterQueryResults); err != nil {
			return nil, err
		}
	}
	// The stream keeps the list until the next evaluation: an exact copy
	// rather than one grown by appends, up to twice its size.
	refs = slices.Clone(syncrules.MergeBuckets(refs))
	// The limit is on the connection's distinct buckets, whichever stream
	// subscriptions they come from: PowerSync fails the connection too
	// rather than drop a subscription, so the client never syncs a subset
	// it would take for all. The message starts as PowerSync's, which its
	// docs tell users to read to tell the two limits apart.
	if len(refs) > limit {
		return nil, &apiError{code: codeTooManyBuckets, msg: fmt.Sprintf(
			"Too many buckets: %d (limit of %d); narrow the sync rules or raise max_buckets_per_connection", len(refs), limit)}
	}
	return refs, nil
}

// announce sends the evaluated checkpoint: a full checkpoint line the
// first time, then a checkpoint_diff with the new or changed buckets and
// the removed ones, or nothing when nothing changed for the client (the
// target then stays the previous checkpoint). wc is the write checkpoint
// to report (0: none).
func (c *conn) announce(cp bucketstore.Checkpoint, wc int64) error {
	if !c.announced {
		if err := c.announceFirst(cp, wc); err != nil {
			return err
		}
	} else if sent, err := c.announceDiff(cp, wc); err != nil || !sent {
		return err
	}
	c.announced, c.target, c.complete, c.forceAnnounce, c.writeCP = true, cp, false, false, wc
	return nil
}

// announceFirst sends the full checkpoint line, resuming each bucket from
// where the request says the client has it.
func (c *conn) announceFirst(cp bucketstore.Checkpoint, wc int64) error {
	c.sent = make([]bucketState, len(c.refs))
	entries := c.entries[:0]
	for i, r := range c.refs {
		after := c.req.buckets[r.ID]
		c.sent[i] = bucketState{name: r.ID, priority: r.Priority, checksum: c.sums[i].Checksum,
			count: c.sums[i].Count, after: after, pending: after < cp.OpID}
		entries = append(entries, bucketEntry{r.ID, c.sums[i].Checksum, c.sums[i].Count, r.Priority, r.Reasons})
	}
	c.index()
	c.stale = false
	c.req.buckets = nil // only the first checkpoint resumes from them
	c.entries = entries
	return c.w.checkpoint(false, cp.OpID, wc, entries, nil, c.streams)
}

// announceDiff sends a checkpoint_diff if the buckets or the write
// checkpoint changed for the client, and reports whether it did.
func (c *conn) announceDiff(cp bucketstore.Checkpoint, wc int64) (bool, error) {
	entries := c.entries[:0]
	if c.stale {
		for i, r := range c.refs {
			if !c.unchanged(c.told(i, r.ID), i) {
				entries = append(entries, bucketEntry{r.ID, c.sums[i].Checksum, c.sums[i].Count, r.Priority, r.Reasons})
			}
		}
	}
	c.entries, c.stale = entries, false
	// Bucket ids are unique: as many, all unchanged, is the same set.
	sameSet := len(entries) == 0 && len(c.refs) == len(c.sent)
	if sameSet && wc == c.writeCP && !c.forceAnnounce {
		return false, nil
	}
	var removed []string
	if !sameSet {
		removed = c.adopt()
	}
	return true, c.w.checkpoint(true, cp.OpID, wc, entries, removed, c.streams)
}

// unchanged reports whether the client was told bucket c.refs[i] as it
// is evaluated now (st: what it was told, nil if nothing).
func (c *conn) unchanged(st *bucketState, i int) bool {
	return st != nil && st.checksum == c.sums[i].Checksum && st.count == c.sums[i].Count && st.priority == c.refs[i].Priority
}

// adopt makes the evaluated buckets the announced ones: the client keeps
// its position in those it had, and the new or changed ones have ops to
// send. It returns the buckets no longer announced.
func (c *conn) adopt() (removed []string) {
	sent := make([]bucketState, len(c.refs))
	for i, r := range c.refs {
		old := c.told(i, r.ID)
		st := bucketState{name: r.ID, behind: true} // new to the client: from the start
		if old != nil {
			st = *old
		}
		if !c.unchanged(old, i) {
			st.priority, st.checksum, st.count, st.pending = r.Priority, c.sums[i].Checksum, c.sums[i].Count, true
		}
		sent[i] = st
	}
	prev := c.sent
	c.sent = sent
	c.index()
	for i := range prev {
		if c.bucket(prev[i].name) == nil {
			removed = append(removed, prev[i].name)
		}
	}
	return removed
}

// index sorts the announced buckets' indexes by name for bucket.
func (c *conn) index() {
	c.byName = make([]int32, len(c.sent))
	for i := range c.byName {
		c.byName[i] = int32(i)
	}
	slices.SortFunc(c.byName, func(a, b int32) int { return strings.Compare(c.sent[a].name, c.sent[b].name) })
}

// told is bucket(name) for the bucket at index i of the evaluation. The
// evaluated list mostly keeps the announced order, so c.sent[i] is tried
// first: with a thousand streams of fifty buckets, binary searches by
// name were a seventh of the process's CPU.
func (c *conn) told(i int, name string) *bucketState {
	if i < len(c.sent) && c.sent[i].name == name {
		return &c.sent[i]
	}
	return c.bucket(name)
}

// bucket returns what the client was told about a bucket, nil if it was
// not told of it.
func (c *conn) bucket(name string) *bucketState {
	i, ok := slices.BinarySearchFunc(c.byName, name, func(j int32, name string) int {
		return strings.Compare(c.sent[j].name, name)
	})
	if !ok {
		return nil
	}
	return &c.sent[c.byName[i]]
}
