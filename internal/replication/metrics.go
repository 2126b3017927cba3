package replication

import (
	"context"

	"go.opentelemetry.io/otel/metric"
)

// replMetrics are the replicator's own instruments (the autoscaling
// gauges are read from storage by the metrics endpoint, not kept here).
type replMetrics struct {
	leases metric.Int64Counter
}

func newReplMetrics(mp metric.MeterProvider) *replMetrics {
	m := mp.Meter("github.com/syncpipe/syncpipe/internal/replication")
	leases, _ := m.Int64Counter("syncpipe_lease_acquisitions_total",
		metric.WithDescription("Work unit leases this process acquired."))
	return &replMetrics{leases: leases}
}

// leaseAcquired counts one acquisition.
func (m *replMetrics) leaseAcquired(ctx context.Context) { m.leases.Add(ctx, 1) }
