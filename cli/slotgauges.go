package cli

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/syncpipe/syncpipe/config"
	"github.com/syncpipe/syncpipe/sinks/bucketstore"
	"github.com/syncpipe/syncpipe/sources/postgres"
)

// slotLister names the replication slots syncpipe uses: the groups' and
// the sink pipelines' (bucketstore).
type slotLister interface {
	Groups(ctx context.Context) ([]bucketstore.Group, error)
	SinkPipelines(ctx context.Context) ([]bucketstore.SinkPipeline, error)
}

// slotGaugeTimeout bounds the reads behind a scrape (storage, then each
// source), slotGaugeCache reuses one read for scrapes close together.
const (
	slotGaugeTimeout = 2 * time.Second
	slotGaugeCache   = time.Second
)

// walStatuses are the values of pg_replication_slots.wal_status: each
// slot reports all of them, 1 for its current one, so an alert on
// status="lost" (or "unreserved") has a series to watch.
var walStatuses = []string{"reserved", "extended", "unreserved", "lost"}

// registerSlotGauges exports the health of every replication slot
// syncpipe uses, read on scrape from the source it is on (every process,
// whatever its role, reports the same figures). A storage or source that
// does not answer within slotGaugeTimeout is logged and its slots are not
// reported: no misleading 0.
func registerSlotGauges(mp metric.MeterProvider, store slotLister, cfg *config.Config, log *slog.Logger) error {
	m := mp.Meter("github.com/syncpipe/syncpipe/cli")
	lag, err := m.Int64ObservableGauge("syncpipe_slot_lag_bytes", metric.WithUnit("By"),
		metric.WithDescription("Source WAL written past the slot's confirmed_flush_lsn: what syncpipe has not confirmed yet."))
	if err != nil {
		return fmt.Errorf("metric syncpipe_slot_lag_bytes: %w", err)
	}
	retained, err := m.Int64ObservableGauge("syncpipe_slot_retained_bytes", metric.WithUnit("By"),
		metric.WithDescription("Source WAL past the slot's restart_lsn: what the source keeps on disk for the slot."))
	if err != nil {
		return fmt.Errorf("metric syncpipe_slot_retained_bytes: %w", err)
	}
	active, err := m.Int64ObservableGauge("syncpipe_slot_active",
		metric.WithDescription("1 while a connection streams from the slot."))
	if err != nil {
		return fmt.Errorf("metric syncpipe_slot_active: %w", err)
	}
	status, err := m.Int64ObservableGauge("syncpipe_slot_wal_status",
		metric.WithDescription("1 for the slot's current wal_status (reserved, extended, unreserved, lost), 0 for the others."))
	if err != nil {
		return fmt.Errorf("metric syncpipe_slot_wal_status: %w", err)
	}
	slots := &scrapeCache[map[string]postgres.SlotStatus]{ttl: slotGaugeCache, timeout: slotGaugeTimeout,
		read: func(ctx context.Context) (map[string]postgres.SlotStatus, error) {
			return readSlots(ctx, store, cfg, log), nil
		}}
	_, err = m.RegisterCallback(func(ctx context.Context, o metric.Observer) error {
		last, _ := slots.get(ctx) // readSlots logs what it cannot read and leaves it out
		for slot, s := range last {
			attrs := metric.WithAttributes(attribute.String("slot", slot))
			o.ObserveInt64(lag, s.LagBytes, attrs)
			o.ObserveInt64(retained, s.RetainedBytes, attrs)
			o.ObserveInt64(active, boolInt(s.Active), attrs)
			for _, st := range walStatuses {
				o.ObserveInt64(status, boolInt(s.WalStatus == st), metric.WithAttributes(attribute.String("slot", slot), attribute.String("status", st)))
			}
		}
		return nil
	}, lag, retained, active, status)
	return err
}

// readSlots reads the health of the slots storage names, from the source
// of the pipeline each belongs to. What cannot be read is logged and left
// out.
func readSlots(ctx context.Context, store slotLister, cfg *config.Config, log *slog.Logger) map[string]postgres.SlotStatus {
	pipelines := cfg.EffectivePipelines()
	uriOf := map[string]string{} // pipeline name → source URI
	bucketURI := ""
	for _, pl := range pipelines {
		uriOf[pl.Name] = pl.Source.URI
		if pl.Sink.Type == config.SinkBucketstore {
			bucketURI = pl.Source.URI
		}
	}
	bySource := map[string][]string{} // source URI → slot names
	if bucketURI != "" {
		groups, err := store.Groups(ctx)
		if err != nil {
			log.Warn("slot metrics: cannot list the replication groups", "err", err)
			return nil
		}
		for _, g := range groups {
			bySource[bucketURI] = append(bySource[bucketURI], g.SlotName)
		}
	}
	if len(pipelines) > 1 || bucketURI == "" {
		sps, err := store.SinkPipelines(ctx)
		if err != nil {
			log.Warn("slot metrics: cannot list the sink pipelines", "err", err)
		}
		for _, sp := range sps {
			if uri, ok := uriOf[sp.Name]; ok && sp.SlotName != "" {
				bySource[uri] = append(bySource[uri], sp.SlotName)
			}
		}
	}
	out := map[string]postgres.SlotStatus{}
	for uri, slots := range bySource {
		hs, err := sourceSlots(ctx, uri, cfg.Source.ConnectTimeout, slots)
		if err != nil {
			log.Warn("slot metrics: cannot read the replication slots from the source", "err", err)
			continue
		}
		maps.Copy(out, hs)
	}
	return out
}

// sourceSlots reads the named slots from the source at uri.
func sourceSlots(ctx context.Context, uri string, connectTimeout time.Duration, slots []string) (map[string]postgres.SlotStatus, error) {
	conn, err := postgres.Connect(ctx, uri, connectTimeout)
	if err != nil {
		return nil, err
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), slotGaugeTimeout)
		defer cancel()
		_ = conn.Close(cctx)
	}()
	return postgres.SlotsHealth(ctx, conn, slots)
}

func boolInt(b bool) int64 {
	if b {
		return 1
	}
	return 0
}
