package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/syncpipe/syncpipe/sinks/bucketstore"
)

// groupSizer estimates the storage each group takes (bucketstore).
type groupSizer interface {
	GroupBytes(ctx context.Context) (map[int]int64, error)
}

// groupVersions reads groups' storage versions, for the gauge's
// storage_version attribute: *bucketstore.Catalog.
type groupVersions interface {
	Groups(ctx context.Context) ([]bucketstore.Group, error)
	Group(ctx context.Context, id int) (bucketstore.Group, error)
}

// groupSize is one group's bytes and storage version.
type groupSize struct {
	bytes   int64
	version int
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
// storage), with the group's storage version (during a move to a new
// version both groups' bytes show side by side), read on scrape at most once per storageGaugeCache on every
// process, whatever its role. A read that fails is logged and nothing is
// reported until the next read succeeds: no misleading 0.
func registerStorageGauge(mp metric.MeterProvider, store groupSizer, groups groupVersions, log *slog.Logger) error {
	m := mp.Meter("github.com/syncpipe/syncpipe/cli")
	size, err := m.Int64ObservableGauge("syncpipe_storage_bytes", metric.WithUnit("By"),
		metric.WithDescription("On-disk bytes of bucket storage (bucket_data, current_data, bucket_parameters, with indexes and TOAST) the group's data takes, apportioned by its share of each table's row bytes; estimated from a sample of a table over about 20 MiB; plus, for a group of storage version 2 or later, the whole size of its partitions of bucket_data2 and current_data2 (version 3: current_data3)."))
	if err != nil {
		return fmt.Errorf("metric syncpipe_storage_bytes: %w", err)
	}
	sizes := &scrapeCache[map[int]groupSize]{ttl: storageGaugeCache, timeout: storageGaugeTimeout,
		read: func(ctx context.Context) (map[int]groupSize, error) {
			return readGroupBytes(ctx, store, groups, log), nil
		}}
	_, err = m.RegisterCallback(func(ctx context.Context, o metric.Observer) error {
		last, _ := sizes.get(ctx) // readGroupBytes logs a failure and reports nothing
		for g, n := range last {
			o.ObserveInt64(size, n.bytes, metric.WithAttributes(attribute.String("group", strconv.Itoa(g)),
				attribute.String("storage_version", strconv.Itoa(n.version))))
		}
		return nil
	}, size)
	return err
}

// readGroupBytes reads the bytes and storage version per group; on
// failure it logs and returns nothing. (A failure is kept like a read: a
// storage too slow to answer is not asked again at every scrape.)
func readGroupBytes(ctx context.Context, store groupSizer, groups groupVersions, log *slog.Logger) map[int]groupSize {
	sizes, err := store.GroupBytes(ctx)
	if err == nil {
		var out map[int]groupSize
		if out, err = withVersions(ctx, sizes, groups); err == nil {
			return out
		}
	}
	log.Warn("storage metrics: cannot read the bytes each group takes", "err", err)
	return nil
}

// withVersions adds each group's storage version to its bytes. Groups
// lists the groups that are not terminated; one being cleared still
// takes space and is read apart.
func withVersions(ctx context.Context, sizes map[int]int64, groups groupVersions) (map[int]groupSize, error) {
	gs, err := groups.Groups(ctx)
	if err != nil {
		return nil, err
	}
	version := map[int]int{}
	for _, g := range gs {
		version[g.ID] = g.StorageVersion
	}
	out := make(map[int]groupSize, len(sizes))
	for id, n := range sizes {
		v, ok := version[id]
		if !ok {
			g, err := groups.Group(ctx, id)
			if errors.Is(err, bucketstore.ErrNoGroup) {
				continue
			}
			if err != nil {
				return nil, err
			}
			v = g.StorageVersion
		}
		out[id] = groupSize{bytes: n, version: v}
	}
	return out, nil
}
