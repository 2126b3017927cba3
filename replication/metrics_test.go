package replication

import (
	"context"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/syncpipe/syncpipe/sources/postgres/logrepl"
)

// gauges collects the observable gauges of reader by name and attribute
// set ("k=v,…" in attribute order).
func gauges(t *testing.T, reader *sdkmetric.ManualReader) map[string]map[string]float64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	out := map[string]map[string]float64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			vals := map[string]float64{}
			switch d := m.Data.(type) {
			case metricdata.Gauge[float64]:
				for _, p := range d.DataPoints {
					vals[p.Attributes.Encoded(attribute.DefaultEncoder())] = p.Value
				}
			case metricdata.Gauge[int64]:
				for _, p := range d.DataPoints {
					vals[p.Attributes.Encoded(attribute.DefaultEncoder())] = float64(p.Value)
				}
			default:
				continue
			}
			out[m.Name] = vals
		}
	}
	return out
}

// TestLagIsOldestPendingTransaction: the lag is the age of the oldest
// transaction received and not yet in a checkpoint, 0 once a checkpoint
// passes everything received, and not reported once the stream stops.
func TestLagIsOldestPendingTransaction(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	m := newReplMetrics(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)))
	defer m.observe(newErrorState(sdkmetric.NewMeterProvider()))()

	l := m.streaming(7)
	lagOf := func() (float64, bool) {
		v, ok := gauges(t, reader)["syncpipe_replication_lag_seconds"]["group=7"]
		return v, ok
	}
	if v, ok := lagOf(); !ok || v != 0 {
		t.Fatalf("lag before anything was received: %v (reported %v), want 0", v, ok)
	}
	now := time.Now()
	l.received([]logrepl.Txn{{CommitLSN: 100, CommitTime: now.Add(-10 * time.Second)}, {CommitLSN: 200, CommitTime: now.Add(-9 * time.Second)}})
	l.received([]logrepl.Txn{{CommitLSN: 300, CommitTime: now.Add(-3 * time.Second)}})
	// Further pieces of a large transaction add nothing.
	l.received([]logrepl.Txn{{CommitLSN: 300, CommitTime: now.Add(-3 * time.Second), Continued: true}})
	if v, _ := lagOf(); v < 10 || v > 15 {
		t.Fatalf("lag %v s, want the oldest pending transaction's age (10 s)", v)
	}
	l.checkpointed(250) // the first batch is visible
	if v, _ := lagOf(); v < 3 || v > 8 {
		t.Fatalf("lag %v s after a checkpoint past the first batch, want 3 s", v)
	}
	l.checkpointed(350)
	if v, _ := lagOf(); v != 0 {
		t.Fatalf("lag %v s when caught up, want 0", v)
	}
	l.stop()
	if _, ok := lagOf(); ok {
		t.Fatal("lag still reported after the stream stopped")
	}
}

// TestFailingUnits: a failed unit counts until its group makes progress,
// and a unit that ended does not count.
func TestFailingUnits(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	m := newReplMetrics(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)))
	errs := newErrorState(sdkmetric.NewMeterProvider())
	defer m.observe(errs)()
	failing := func() map[string]float64 { return gauges(t, reader)["syncpipe_replication_failing_units"] }

	m.unitFailedNow(3, "group 3 snapshot a range 0", "snapshot", false, errs.progressOf(3))
	m.unitFailedNow(3, "group 3 snapshot a range 1", "snapshot", false, errs.progressOf(3))
	m.unitFailedNow(4, "group 4 stream", "stream", true, errs.progressOf(4))
	got := failing()
	if got["group=3,kind=retryable,unit=snapshot"] != 2 || got["group=4,kind=fatal,unit=stream"] != 1 || len(got) != 2 {
		t.Fatalf("failing units %v, want 2 retryable snapshot units of group 3 and group 4's stream fatal", got)
	}
	m.unitEnded("group 3 snapshot a range 1")
	errs.mu.Lock()
	errs.progress[4]++ // group 4's stream committed again
	errs.mu.Unlock()
	if got := failing(); got["group=3,kind=retryable,unit=snapshot"] != 1 || len(got) != 1 {
		t.Fatalf("failing units %v, want only one snapshot unit of group 3", got)
	}
}
