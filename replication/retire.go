package replication

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/syncpipe/syncpipe/pipeline"
	"github.com/syncpipe/syncpipe/sinks/bucketstore"
	"github.com/syncpipe/syncpipe/sources/postgres"
	"github.com/syncpipe/syncpipe/sources/postgres/logrepl"
)

// prioRetire runs group clean-up after all replication work.
const prioRetire = prioProcessingStream + 1

// slotGone reports that a group's slot was dropped or invalidated: the
// changes it held are lost and only a fresh snapshot can recover.
func slotGone(err error) bool {
	return errors.Is(err, logrepl.ErrSlotLost) || errors.Is(err, logrepl.ErrSlotMissing)
}

// replace starts a new group with g's rules after g's stream lost changes
// (its slot was lost or dropped, its publication was dropped). What happens
// to g follows its state in storage, never this process's memory of it (a
// replacement group may have activated since it was loaded): an ACTIVE g
// keeps serving its last checkpoint — stale, but consistent — until the new
// group has snapshotted and takes over at its first checkpoint, which stops
// g for retirement; a PROCESSING g serves nobody and is stopped at once; a
// g that is stopped already was taken over and is only retired.
func (r *Replicator) replace(ctx context.Context, g *group, cause error) error {
	cur, err := r.catalog.Group(ctx, g.g.ID)
	if err != nil {
		return err
	}
	g.setState(cur.State)
	if cur.State == bucketstore.StateStop || cur.State == bucketstore.StateTerminated {
		return r.submitRetire(cur)
	}
	r.log.Error("changes lost to the stream: re-snapshotting into a new group", "group", g.g.ID, "slot", g.g.SlotName, "err", cause)
	r.report(ctx, g.g.ID, fmt.Sprintf("group %d stream", g.g.ID),
		fmt.Errorf("%w: changes since were lost; a new group re-snapshots the source and takes over when done", cause))
	ng, created, err := r.catalog.ReplaceGroup(ctx, cur, r.pl.Source.SlotPrefix)
	if err != nil {
		return err
	}
	if cur.State == bucketstore.StateProcessing {
		if err := r.catalog.SetState(ctx, g.g.ID, bucketstore.StateStop); err != nil {
			return err
		}
		cur.State = bucketstore.StateStop
		g.setState(cur.State)
		if err := r.submitRetire(cur); err != nil {
			return err
		}
	}
	if !created {
		return nil // already replaced; whoever created it runs it
	}
	r.log.Info("replacement group created", "group", ng.ID, "replaces", g.g.ID, "slot", ng.SlotName)
	return r.startGroup(ctx, ng)
}

// awaitPublication waits until the publication publishes every table of g
// again, with the problem stored for the operator meanwhile.
func (r *Replicator) awaitPublication(ctx context.Context, g *group, cause error) error {
	unit := fmt.Sprintf("group %d stream", g.g.ID)
	names := make([]string, len(g.tables))
	for i, t := range g.tables {
		names[i] = t.info.QualifiedName()
	}
	for {
		conn, err := r.connectSource(ctx)
		if err == nil {
			err = postgres.Preflight(ctx, conn, postgres.PreflightOptions{Publication: r.pl.Source.Publication, Tables: names})
			closeConn(conn)
			if err == nil {
				r.log.Info("publication usable again", "group", g.g.ID, "publication", r.pl.Source.Publication)
				return nil
			}
			if publicationProblem(err) {
				cause = err
			}
		}
		if ctx.Err() != nil {
			return nil
		}
		r.errs.count.Add(ctx, 1, metric.WithAttributes(attribute.String("kind", "fatal"), attribute.String("unit", "stream")))
		r.report(ctx, g.g.ID, unit, fmt.Errorf("%w; once it is fixed, syncpipe re-snapshots the source into a new group (changes made meanwhile were not published) while this one keeps serving", cause))
		t := time.NewTimer(jitter(publicationPoll))
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
	}
}

// publicationPoll is how often a group waiting for its publication checks.
const publicationPoll = 5 * time.Second

// submitRetirements queues the clean-up of every stopped group, and of
// every terminated one whose clean-up was cut off (bucketstore's
// Retiring): after a restart, or when a new group took over.
func (r *Replicator) submitRetirements(ctx context.Context) error {
	groups, err := r.catalog.Retiring(ctx)
	if err != nil {
		return err
	}
	for _, g := range groups {
		if err := r.submitRetire(g); err != nil {
			return err
		}
	}
	return nil
}

func (r *Replicator) submitRetire(g bucketstore.Group) error {
	if r.opts.Role == "replication:snapshot" {
		return nil
	}
	err := r.sched.Submit(pipeline.Unit{
		Key: fmt.Sprintf("group %d retire", g.ID), Kind: "retire", Priority: prioRetire,
		Run: func(ctx context.Context) error { return r.retire(ctx, g) },
	})
	if errors.Is(err, pipeline.ErrUnitExists) {
		return nil
	}
	return err
}

// retire ends a group that no longer serves: it drops the group's slot, so
// the source stops keeping WAL for it, and clears its storage. A slot still
// held by the group's own stream (stopping right now, here or in another
// process) is retried until released. Only STOP and TERMINATED groups are
// retired; each process retires a group at most once at a time.
func (r *Replicator) retire(ctx context.Context, g bucketstore.Group) error {
	r.mu.Lock()
	if r.retiring == nil {
		r.retiring = map[int]bool{}
	}
	busy := r.retiring[g.ID]
	r.retiring[g.ID] = true
	r.mu.Unlock()
	if busy {
		return nil
	}
	defer func() {
		r.mu.Lock()
		delete(r.retiring, g.ID)
		r.mu.Unlock()
	}()
	return r.retry(ctx, g.ID, fmt.Sprintf("group %d retire", g.ID), "retire", func(ctx context.Context) error {
		cur, err := r.catalog.Group(ctx, g.ID)
		if err != nil {
			return err
		}
		if cur.State != bucketstore.StateStop && cur.State != bucketstore.StateTerminated {
			return nil
		}
		conn, err := logrepl.Connect(ctx, r.replicationURI(false))
		if err != nil {
			return err
		}
		defer func() {
			cctx, cancel := closeCtx()
			conn.Close(cctx)
			cancel()
		}()
		if err := logrepl.DropSlot(ctx, conn, g.SlotName); err != nil {
			return err
		}
		st, err := r.maint.Terminate(ctx, g.ID, bucketstore.ClearOptions{})
		if err != nil {
			return err
		}
		if st.Rows > 0 || cur.State == bucketstore.StateStop {
			r.log.Info("retired replication group", "group", g.ID, "slot", g.SlotName, "rows_cleared", st.Rows)
		}
		return nil
	})
}
