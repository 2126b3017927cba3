package syncapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"testing"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/syncpipe/syncpipe/internal/telemetry"
	"github.com/syncpipe/syncpipe/model"
)

// bucket names a bucket of the env's group: b("by_list", "a") is
// `<group>#by_list["a"]`.
func (e *env) b(def string, params ...string) string {
	ps := "[]"
	if len(params) > 0 {
		j, _ := json.Marshal(params)
		ps = string(j)
	}
	return fmt.Sprintf("%d#%s%s", e.group.ID, def, ps)
}

// expected sums the PUTs of changes per bucket: each bucket's checksum and
// count when every change is the first write of its row.
func expected(changes []model.Change) map[string]bucketJSON {
	out := map[string]bucketJSON{}
	for _, c := range changes {
		for _, p := range c.Puts {
			b := out[p.Bucket]
			b.Bucket = p.Bucket
			b.Checksum = int64(int32(uint32(b.Checksum) + p.Checksum))
			b.Count++
			out[p.Bucket] = b
		}
	}
	return out
}

func opID(cp int64) string { return strconv.FormatInt(cp, 10) }

func TestFirstSync(t *testing.T) {
	t.Parallel()
	reader := sdkmetric.NewManualReader()
	spans := tracetest.NewSpanRecorder()
	e := newEnv(t, todoRules, todoTables, func(c *Config) {
		c.MeterProvider = sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
		c.TracerProvider = sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	})
	changes := []model.Change{
		e.upsert("lists", "a", "Groceries", "u1"),
		e.upsert("lists", "b", "Work", "u2"),
		e.upsert("lists", "e", "Empty \"quoted\" list", "u1"),
		e.upsert("todos", "tb", "b", "not for u1"),
	}
	for i := range 5 {
		changes = append(changes, e.upsert("todos", fmt.Sprintf("t%d", i), "a", fmt.Sprintf("todo %d\n", i)))
	}
	cp := e.commit(changes...)

	s := e.open(token(t, "u1", nil), nil)
	if l, _ := s.next(); l.TokenExpiresIn == nil || *l.TokenExpiresIn < 3590 || *l.TokenExpiresIn > 3600 {
		t.Fatalf("first line %s, want token_expires_in ≈ 3600", l.Raw)
	}
	ls := s.untilComplete()
	c := newClient(t)
	c.apply(ls...)
	got := kinds(ls)
	if got[0] != "checkpoint" || got[len(got)-1] != "checkpoint_complete" || slices.Contains(got, "checkpoint_diff") {
		t.Fatalf("lines %v", got)
	}
	want := expected(changes)
	wantBuckets := []string{e.b("global"), e.b("by_list", "a"), e.b("by_list", "e")}
	if ls[0].Checkpoint.LastOpID != opID(cp.OpID) || ls[0].Checkpoint.WriteCheckpoint != "" {
		t.Errorf("checkpoint %s, want last_op_id %d and no write_checkpoint", ls[0].Raw, cp.OpID)
	}
	var names []string
	for _, b := range ls[0].Checkpoint.Buckets {
		names = append(names, b.Bucket)
		w := want[b.Bucket] // zero for the empty bucket
		if b.Checksum != w.Checksum || b.Count != w.Count || b.Priority != 3 {
			t.Errorf("bucket %s: checksum %d count %d priority %d, want %d %d 3", b.Bucket, b.Checksum, b.Count, b.Priority, w.Checksum, w.Count)
		}
	}
	slices.Sort(names)
	slices.Sort(wantBuckets)
	if !slices.Equal(names, wantBuckets) {
		t.Fatalf("buckets %v, want %v", names, wantBuckets)
	}
	if c.complete != opID(cp.OpID) || c.ops != 8 {
		t.Fatalf("completed %s with %d ops, want %d with 8 (3 lists + 5 todos)", c.complete, c.ops, cp.OpID)
	}
	todos := c.rows[e.b("by_list", "a")]
	if got, want := todos["todos/t3"], `{"id":"t3","list_id":"a","description":"todo 3\n"}`; got != want {
		t.Errorf("t3 data %q, want %q", got, want)
	}
	if len(todos) != 5 || len(c.rows[e.b("by_list", "e")]) != 0 {
		t.Errorf("rows %v", c.rows)
	}
	// Op fields: PUT with subkey "<table id>/<uuid>", unsigned checksum.
	for _, l := range ls {
		if l.Data == nil {
			continue
		}
		if l.Data.Bucket == e.b("by_list", "e") {
			t.Errorf("data line for the empty bucket: %s", l.Raw)
		}
		for _, op := range l.Data.Data {
			if op.Op != "PUT" || op.Subkey == nil || len(*op.Subkey) < 30 || op.ObjectType == nil {
				t.Errorf("op %+v", op)
			}
		}
	}

	// Metrics while the stream is open; spans per phase.
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	values := map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if sum, ok := m.Data.(metricdata.Sum[int64]); ok && len(sum.DataPoints) == 1 {
				values[m.Name] = sum.DataPoints[0].Value
			}
		}
	}
	if values["syncpipe_operations_synced"] != 8 || values["syncpipe_concurrent_connections"] != 1 {
		t.Errorf("metrics %v, want 8 ops synced and 1 connection", values)
	}
	seen := map[string]int{}
	for _, sp := range spans.Ended() {
		seen[sp.Name()]++
	}
	if seen["syncapi.auth"] != 1 || seen["syncapi.checkpoint"] != 1 || seen["syncapi.data_batch"] != 1 {
		t.Errorf("spans %v, want one auth, checkpoint and data_batch span", seen)
	}
}

func TestIncrementalUpdateAndResume(t *testing.T) {
	t.Parallel()
	onBoth(t, todoRules, todoTables, nil, incrementalUpdateAndResume)
}

func incrementalUpdateAndResume(t *testing.T, e protocolEnv) {
	e.commit(e.upsert("lists", "a", "A", "u1"), e.upsert("lists", "b", "B", "u1"), e.upsert("lists", "x", "X", "u2"),
		e.upsert("todos", "t1", "a", "one"), e.upsert("todos", "t2", "b", "two"))
	tok := token(t, "u1", nil)
	s := e.open(tok, nil)
	c := newClient(t)
	c.apply(s.untilComplete()...)
	afterA := c.after[e.b("by_list", "a")]

	// A change u1 cannot see sends nothing; the next visible one sends a
	// diff with only the changed bucket, then only its new op.
	e.commit(e.upsert("todos", "tx", "x", "u2's"))
	cp := e.commit(e.upsert("todos", "t3", "a", "three"))
	ls := s.untilComplete()
	c.apply(ls...)
	if got := kinds(ls); !slices.Equal(got, []string{"checkpoint_diff", "data", "checkpoint_complete"}) {
		t.Fatalf("lines %v", got)
	}
	d := ls[0].CheckpointDiff
	if d.LastOpID != opID(cp.OpID) || len(d.Updated) != 1 || d.Updated[0].Bucket != e.b("by_list", "a") ||
		d.Updated[0].Count != 2 || len(d.Removed) != 0 {
		t.Fatalf("diff %s", ls[0].Raw)
	}
	if data := ls[1].Data; data.After != afterA || len(data.Data) != 1 || data.Data[0].OpID != opID(cp.OpID) || data.HasMore {
		t.Fatalf("data %s, want only op %d after %s", ls[1].Raw, cp.OpID, afterA)
	}
	s.close()

	// Resume: the client sends its positions and gets no op again.
	s2 := e.open(tok, map[string]any{"buckets": c.positions()})
	ls = s2.untilComplete()
	c.apply(ls...)
	if got := kinds(ls); !slices.Equal(got, []string{"checkpoint", "checkpoint_complete"}) {
		t.Fatalf("resumed lines %v", got)
	}
	// Resume from an older position of one bucket: only the ops after it.
	s2.close()
	c.rewind(e.b("by_list", "a"), afterA)
	s3 := e.open(tok, map[string]any{"buckets": c.positions()})
	ls = s3.untilComplete()
	c.apply(ls...)
	if got := kinds(ls); !slices.Equal(got, []string{"checkpoint", "data", "checkpoint_complete"}) || len(ls[1].Data.Data) != 1 {
		t.Fatalf("lines after an older position %v", got)
	}
	if c.rows[e.b("by_list", "a")]["todos/t3"] == "" {
		t.Fatal("t3 not re-sent")
	}
}

// TestPrometheusMetrics checks the names the /metrics endpoint exposes.
func TestPrometheusMetrics(t *testing.T) {
	t.Parallel()
	tel, err := telemetry.Setup(context.Background(), telemetry.Options{TraceExporter: "none"})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tel.Shutdown(context.Background()) }()
	e := newEnv(t, todoRules, todoTables, func(c *Config) { c.MeterProvider = tel.MeterProvider })
	e.commit(e.upsert("lists", "a", "A", "u1"), e.upsert("todos", "t", "a", "x"))
	e.open(token(t, "u1", nil), nil).untilComplete()
	rec := httptest.NewRecorder()
	tel.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	for _, want := range []string{"\nsyncpipe_operations_synced_total 2\n", "\nsyncpipe_concurrent_connections{transport=\"http\"} 1\n"} {
		if !strings.Contains(rec.Body.String(), want) {
			t.Errorf("/metrics lacks %q:\n%s", strings.TrimSpace(want), grepLines(rec.Body.String(), "syncpipe_"))
		}
	}
}

func grepLines(s, substr string) string {
	var out []string
	for l := range strings.SplitSeq(s, "\n") {
		if strings.Contains(l, substr) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// TestOnFreshStack: f's error comes back; a panic in f is raised again
// on the caller's goroutine, with f's stack in the message, and
// http.ErrAbortHandler as itself (net/http tests for that value).
func TestOnFreshStack(t *testing.T) {
	t.Parallel()
	want := errors.New("f failed")
	if err := onFreshStack(func() error { return want }); err != want {
		t.Fatalf("error %v, want %v", err, want)
	}
	repanicked := func(f func() error) (p any) {
		defer func() { p = recover() }()
		_ = onFreshStack(f)
		return nil
	}
	p := repanicked(func() error { panic("boom") })
	if msg, _ := p.(string); !strings.HasPrefix(msg, "boom") || !strings.Contains(msg, "TestOnFreshStack") {
		t.Fatalf("panic %v, want boom with the stack of f", p)
	}
	if p := repanicked(func() error { panic(http.ErrAbortHandler) }); p != http.ErrAbortHandler {
		t.Fatalf("panic %v, want http.ErrAbortHandler itself", p)
	}
}
