package cli

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// groupSizer estimates the storage each group takes (bucketstore).
type groupSizer interface {
	GroupBytes(ctx context.Context) (map[int]int64, error)
}

// storageGaugeTimeout bounds the storage read behind a scrape: it reads up
// to about 20 MiB of each of three tables, more than the other gauges'
// lookups. storageGaugeCache reuses one read for half a minute: group
// sizes move slowly, and every process exports the gauge, so reading at
// every scrape would have each process scan storage every few seconds.
const (
	storageGaugeTimeout = 5 * time.Second
	storageGaugeCache   = 30 * time.Second
)

// registerStorageGauge exports the on-disk bytes of bucket storage each
// group takes (bucketstore.Compactor.GroupBytes, an estimate on large
// storage), read on scrape at most once per storageGaugeCache on every
// process, whatever its role. A read that fails is logged and nothing is
// reported until the next read succeeds: no misleading 0.
func registerStorageGauge(mp metric.MeterProvider, store groupSizer, log *slog.Logger) error {
	m := mp.Meter("github.com/syncpipe/syncpipe/cli")
	size, err := m.Int64ObservableGauge("syncpipe_storage_bytes", metric.WithUnit("By"),
		metric.WithDescription("On-disk bytes of bucket storage (bucket_data, current_data, bucket_parameters, with indexes and TOAST) the group's data takes, apportioned by its share of each table's row bytes; estimated from a sample of a table over about 20 MiB; plus, for a group of storage version 2, the whole size of its partitions of bucket_data2 and current_data2."))
	if err != nil {
		return fmt.Errorf("metric syncpipe_storage_bytes: %w", err)
	}
	sizes := &scrapeCache[map[int]int64]{ttl: storageGaugeCache, timeout: storageGaugeTimeout,
		read: func(ctx context.Context) (map[int]int64, error) { return readGroupBytes(ctx, store, log), nil }}
	_, err = m.RegisterCallback(func(ctx context.Context, o metric.Observer) error {
		last, _ := sizes.get(ctx) // readGroupBytes logs a failure and reports nothing
		for g, n := range last {
			o.ObserveInt64(size, n, metric.WithAttributes(attribute.String("group", strconv.Itoa(g))))
		}
		return nil
	}, size)
	return err
}

// readGroupBytes reads the bytes per group; on failure it logs and
// returns nothing. (A failure is kept like a read: a storage too slow to
// answer is not asked again at every scrape.)
func readGroupBytes(ctx context.Context, store groupSizer, log *slog.Logger) map[int]int64 {
	sizes, err := store.GroupBytes(ctx)
	if err != nil {
		log.Warn("storage metrics: cannot read the bytes each group takes", "err", err)
		return nil
	}
	return sizes
}
