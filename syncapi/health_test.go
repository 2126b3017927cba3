package syncapi

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/syncpipe/syncpipe/config"
	"github.com/syncpipe/syncpipe/internal/testkit/pgtest"
	"github.com/syncpipe/syncpipe/sinks/bucketstore"
)

// testClock is a Config.Now the test moves, so the health cache's age is
// decided by the test and not by how fast the machine runs it.
type testClock struct{ ns atomic.Int64 }

func newTestClock() *testClock {
	c := &testClock{}
	c.ns.Store(time.Now().UnixNano())
	return c
}

func (c *testClock) now() time.Time          { return time.Unix(0, c.ns.Load()) }
func (c *testClock) advance(d time.Duration) { c.ns.Add(int64(d)) }

// healthz reads /healthz.
func healthz(t *testing.T, srv *Server) (int, healthBody) {
	t.Helper()
	rec := httpRecord(srv, http.MethodGet, "/healthz", "", "")
	var b healthBody
	if err := json.Unmarshal(rec.Body.Bytes(), &b); err != nil {
		t.Fatalf("healthz body %q: %v", rec.Body, err)
	}
	return rec.Code, b
}

// groupErrorGauge collects syncpipe_replication_group_errors; ok is false
// when no value was reported.
func groupErrorGauge(t *testing.T, r *sdkmetric.ManualReader) (v int64, ok bool) {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if g, isGauge := m.Data.(metricdata.Gauge[int64]); isGauge && m.Name == "syncpipe_replication_group_errors" {
				for _, p := range g.DataPoints {
					return p.Value, true
				}
			}
		}
	}
	return 0, false
}

// TestHealthzReportsGroupErrors: /healthz and the group error gauge follow
// the errors stored on serving groups (ACTIVE, PROCESSING; not STOP), from
// one storage read reused for a second.
func TestHealthzReportsGroupErrors(t *testing.T) {
	t.Parallel()
	clock := newTestClock()
	reader := sdkmetric.NewManualReader()
	e := newEnv(t, todoRules, todoTables, func(c *Config) {
		c.Now = clock.now
		c.MeterProvider = sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	})
	if code, b := healthz(t, e.srv); code != http.StatusOK || !b.OK || b.Status != healthOK || len(b.Reasons) != 0 {
		t.Fatalf("healthy: %d %+v", code, b)
	}
	if v, ok := groupErrorGauge(t, reader); !ok || v != 0 {
		t.Fatalf("gauge while healthy: %d (reported %v), want 0", v, ok)
	}

	const msg = `publication "syncpipe" does not exist: CREATE PUBLICATION syncpipe FOR ALL TABLES on the source`
	before := time.Now()
	if err := e.store.Catalog().ReportError(e.ctx, e.group.ID, msg); err != nil {
		t.Fatal(err)
	}
	// Within the TTL the cached answer stands: no storage read per probe.
	if _, b := healthz(t, e.srv); b.Status != healthOK {
		t.Fatalf("within the cache TTL: %+v, want the cached ok", b)
	}
	clock.advance(healthTTL)
	code, b := healthz(t, e.srv)
	if code != http.StatusOK || !b.OK || b.Status != healthDegraded || len(b.Reasons) != 1 {
		t.Fatalf("after ReportError: %d %+v, want 200 degraded with one reason", code, b)
	}
	r := b.Reasons[0]
	if r.Group != e.group.ID || r.State != string(e.group.State) || r.Error != msg {
		t.Fatalf("reason %+v, want group %d (%s) with %q", r, e.group.ID, e.group.State, msg)
	}
	// since is storage's clock: allow for skew against this process's.
	if r.Since.Before(before.Add(-time.Minute)) || r.Since.After(time.Now().Add(time.Minute)) {
		t.Fatalf("since %s, want about %s", r.Since, before)
	}
	if v, _ := groupErrorGauge(t, reader); v != 1 {
		t.Fatalf("gauge %d, want 1", v)
	}

	// A PROCESSING group's error counts; once it is stopped it does not.
	g2, err := e.store.Catalog().CreateGroup(e.ctx, todoRules+"\n# v2\n", "syncpipe_")
	if err != nil {
		t.Fatal(err)
	}
	if err := e.store.Catalog().ReportError(e.ctx, g2.ID, "table public.todos has no replica identity"); err != nil {
		t.Fatal(err)
	}
	clock.advance(healthTTL)
	if _, b := healthz(t, e.srv); len(b.Reasons) != 2 || b.Reasons[1].Group != g2.ID || b.Reasons[1].State != string(bucketstore.StateProcessing) {
		t.Fatalf("with a PROCESSING group's error: %+v", b)
	}
	if err := e.store.Catalog().SetState(e.ctx, g2.ID, bucketstore.StateStop); err != nil {
		t.Fatal(err)
	}
	clock.advance(healthTTL)
	if _, b := healthz(t, e.srv); len(b.Reasons) != 1 || b.Reasons[0].Group != e.group.ID {
		t.Fatalf("after the PROCESSING group stopped: %+v", b)
	}

	// Many probes at once share the read (the race detector watches).
	clock.advance(healthTTL)
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			if rec := httpRecord(e.srv, http.MethodGet, "/healthz", "", ""); rec.Code != http.StatusOK {
				t.Errorf("concurrent probe: %d %s", rec.Code, rec.Body)
			}
		})
	}
	wg.Wait()

	if err := e.store.Catalog().ClearError(e.ctx, e.group.ID); err != nil {
		t.Fatal(err)
	}
	clock.advance(healthTTL)
	if code, b := healthz(t, e.srv); code != http.StatusOK || b.Status != healthOK || len(b.Reasons) != 0 {
		t.Fatalf("after ClearError: %d %+v", code, b)
	}
	if v, _ := groupErrorGauge(t, reader); v != 0 {
		t.Fatalf("gauge after ClearError: %d, want 0", v)
	}
}

// TestHealthzStorageUnreachable: 503, and no gauge value, once storage is
// gone.
func TestHealthzStorageUnreachable(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store, err := bucketstore.Open(ctx, bucketstore.Config{URI: pgtest.NewDB(t)})
	if err != nil {
		t.Fatal(err)
	}
	reader := sdkmetric.NewManualReader()
	srv, err := New(ctx, Config{Groups: store.Catalog(), Store: store.Reader(), Sources: store.Reader(), MeterProvider: sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)),
		Auth: config.Auth{Audience: []string{testAudience}, HS256Secrets: []string{testSecret}, MaxLifetime: time.Hour}})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	store.Close()
	code, b := healthz(t, srv)
	if code != http.StatusServiceUnavailable || b.OK || b.Status != healthUnavailable || b.Error == "" {
		t.Fatalf("storage closed: %d %+v, want 503 unavailable", code, b)
	}
	if v, ok := groupErrorGauge(t, reader); ok {
		t.Fatalf("gauge reported %d while storage is unreachable", v)
	}
}

// TestShutdownGrace: Shutdown refuses new streams at once, lets open ones
// go on (they still get new checkpoints) until its context ends, and then
// closes them.
func TestShutdownGrace(t *testing.T) {
	t.Parallel()
	e := newEnv(t, todoRules, todoTables, nil)
	e.commit(e.upsert("lists", "a", "A", "u1"))
	tok := token(t, "u1", nil)
	open := e.open(tok, nil)
	open.untilComplete()
	leaving := e.open(tok, nil)
	leaving.untilComplete()

	grace, endGrace := context.WithCancel(e.ctx)
	shut := make(chan error, 1)
	go func() { shut <- e.srv.Shutdown(grace) }()
	// Until Shutdown has begun a new stream may still start: its client
	// leaves at once.
	deadline := time.Now().Add(waitLimit)
	for {
		ctx, cancel := context.WithCancel(e.ctx)
		resp := e.request(ctx, tok, map[string]any{}, nil, nil)
		code := resp.StatusCode
		cancel()
		resp.Body.Close()
		if code == http.StatusServiceUnavailable {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("new stream during shutdown: HTTP %d, want 503", code)
		}
	}
	// A stream that ends on its own during the grace period is not waited
	// for again; the open one keeps syncing.
	leaving.close()
	cp := e.commit(e.upsert("lists", "b", "B", "u1"))
	ls := open.untilComplete()
	if last := ls[len(ls)-1]; last.CheckpointComplete == nil || last.CheckpointComplete.LastOpID != opID(cp.OpID) {
		t.Fatalf("during the grace period: lines %v, want checkpoint %d completed", kinds(ls), cp.OpID)
	}
	select {
	case err := <-shut:
		t.Fatalf("Shutdown returned %v with a stream open and the grace period running", err)
	default:
	}
	endGrace()
	select {
	case err := <-shut:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("Shutdown after the grace period: %v, want context.Canceled", err)
		}
	case <-time.After(waitLimit):
		t.Fatal("Shutdown did not return after the grace period")
	}
	open.end() // the server closed it
}

// TestShutdownDrained: with no stream open, Shutdown returns at once,
// without waiting for its context.
func TestShutdownDrained(t *testing.T) {
	t.Parallel()
	e := newEnv(t, todoRules, todoTables, nil)
	if err := e.srv.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// TestFakeHealthz is /healthz's decision on the fake, with no
// PostgreSQL: ok while no serving group has a stored error; degraded,
// still 200, naming an ACTIVE or PROCESSING group's error and counting
// it in the gauge; a STOP group's error ignored; 503 and no gauge value
// while storage does not answer; and each answer kept for healthTTL.
func TestFakeHealthz(t *testing.T) {
	t.Parallel()
	clock := newTestClock()
	reader := sdkmetric.NewManualReader()
	e := newFakeEnv(t, todoRules, todoTables, func(c *Config) {
		c.Now = clock.now
		c.MeterProvider = sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	})
	if code, b := healthz(t, e.srv); code != http.StatusOK || b.Status != healthOK || len(b.Reasons) != 0 {
		t.Fatalf("healthy: %d %+v", code, b)
	}
	if v, ok := groupErrorGauge(t, reader); !ok || v != 0 {
		t.Fatalf("gauge while healthy: %d (reported %v), want 0", v, ok)
	}

	since := clock.now().Add(-time.Minute).UTC()
	active := e.group.ID
	e.fake.setGroup(active, func(g *bucketstore.Group) { g.LastError, g.LastErrorAt = "publication gone", since })
	if _, b := healthz(t, e.srv); b.Status != healthOK {
		t.Fatalf("within the cache TTL: %+v, want the cached ok", b)
	}
	clock.advance(healthTTL)
	code, b := healthz(t, e.srv)
	want := groupError{Group: active, State: string(bucketstore.StateActive), Error: "publication gone", Since: since}
	if code != http.StatusOK || !b.OK || b.Status != healthDegraded || len(b.Reasons) != 1 || b.Reasons[0] != want {
		t.Fatalf("with an error: %d %+v, want 200 degraded with %+v", code, b, want)
	}
	if v, _ := groupErrorGauge(t, reader); v != 1 {
		t.Fatalf("gauge %d, want 1", v)
	}

	// A new group takes over: the old one STOPs, and its error no longer
	// counts; a PROCESSING group's does.
	next := e.newGroup(todoRules + "\n# v2\n")
	e.fake.setGroup(next.ID, func(g *bucketstore.Group) {
		g.State, g.LastError, g.LastErrorAt = bucketstore.StateProcessing, "no replica identity", since
	})
	clock.advance(healthTTL)
	if _, b := healthz(t, e.srv); len(b.Reasons) != 1 || b.Reasons[0].Group != next.ID || b.Reasons[0].State != string(bucketstore.StateProcessing) {
		t.Fatalf("old group stopped, new one PROCESSING with an error: %+v", b)
	}

	e.fake.fail("Groups", errors.New("storage down"))
	clock.advance(healthTTL)
	if code, b := healthz(t, e.srv); code != http.StatusServiceUnavailable || b.OK || b.Status != healthUnavailable || b.Error == "" {
		t.Fatalf("storage failing: %d %+v, want 503 unavailable", code, b)
	}
	if v, ok := groupErrorGauge(t, reader); ok {
		t.Fatalf("gauge reported %d while storage fails", v)
	}
}
