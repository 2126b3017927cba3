package cli

import (
	"context"
	"fmt"
	"time"

	"go.opentelemetry.io/otel/metric"

	"github.com/syncpipe/syncpipe/sinks/bucketstore"
)

// unitCounter reads the cluster-wide work unit counts (bucketstore).
type unitCounter interface {
	UnitCounts(ctx context.Context) (bucketstore.UnitCounts, error)
}

// unitGaugeTimeout bounds the storage read behind a scrape, and
// unitGaugeCache reuses one read for scrapes close together (several
// Prometheus replicas, the adapter).
const (
	unitGaugeTimeout = 2 * time.Second
	unitGaugeCache   = time.Second
)

// unitGaugeSpecs are the autoscaling gauges, in the order of the values
// the callback observes (TotalStreams, ActiveStreams, PendingSnapshots,
// ActiveSnapshots).
var unitGaugeSpecs = [4]struct{ name, doc string }{
	{"syncpipe_total_stream_count", "Replication groups (ACTIVE or PROCESSING) that stream, cluster-wide."},
	{"syncpipe_active_stream_count", "Group streams a live process works on, cluster-wide."},
	{"syncpipe_pending_snapshot_count", "Snapshot units (key ranges, unplanned tables) no process works on, cluster-wide: scale snapshot workers on it."},
	{"syncpipe_active_snapshot_count", "Snapshot units a live process works on, cluster-wide."},
}

// registerUnitGauges exports the autoscaling gauges of SPEC §5 on every
// process, whatever its role: figures read from storage, so the same on
// each. While storage does not answer they report nothing rather than a
// misleading 0.
func registerUnitGauges(mp metric.MeterProvider, store unitCounter) error {
	m := mp.Meter("github.com/syncpipe/syncpipe/cli")
	var gauges [4]metric.Int64ObservableGauge
	for i, d := range unitGaugeSpecs {
		g, err := m.Int64ObservableGauge(d.name, metric.WithDescription(d.doc), metric.WithUnit("{unit}"))
		if err != nil {
			return fmt.Errorf("metric %s: %w", d.name, err)
		}
		gauges[i] = g
	}
	counts := &scrapeCache[bucketstore.UnitCounts]{ttl: unitGaugeCache, timeout: unitGaugeTimeout, read: store.UnitCounts}
	_, err := m.RegisterCallback(func(ctx context.Context, o metric.Observer) error {
		last, ok := counts.get(ctx)
		if !ok {
			return nil
		}
		for i, v := range []int64{last.TotalStreams, last.ActiveStreams, last.PendingSnapshots, last.ActiveSnapshots} {
			o.ObserveInt64(gauges[i], v)
		}
		return nil
	}, gauges[0], gauges[1], gauges[2], gauges[3])
	return err
}
