package replication

import (
	"context"
	"errors"
	"fmt"

	"github.com/syncpipe/syncpipe/pipeline"
	"github.com/syncpipe/syncpipe/sinks/bucketstore"
	"github.com/syncpipe/syncpipe/sources/postgres/logrepl"
)

// prioRetire runs group clean-up after all replication work.
const prioRetire = prioProcessingStream + 1

// slotGone reports that a group's slot was dropped or invalidated: the
// changes it held are lost and only a fresh snapshot can recover.
func slotGone(err error) bool {
	return errors.Is(err, logrepl.ErrSlotLost) || errors.Is(err, logrepl.ErrSlotMissing)
}

// replace starts a new group with g's rules after g's slot was lost. An
// active g keeps serving its last checkpoint — stale, but consistent —
// until the new group has snapshotted and takes over at its first
// checkpoint; g is then stopped and retired. A processing g serves nobody
// and is stopped at once.
func (r *Replicator) replace(ctx context.Context, g *group, cause error) error {
	r.log.Error("replication slot gone: re-snapshotting into a new group", "group", g.g.ID, "slot", g.g.SlotName, "err", cause)
	msg := fmt.Sprintf("%v: changes since were lost; a new group re-snapshots the source and takes over when done", cause)
	if err := r.store.ReportError(ctx, g.g.ID, msg); err != nil {
		return err
	}
	ng, created, err := r.store.ReplaceGroup(ctx, g.g, r.cfg.Source.SlotPrefix)
	if err != nil {
		return err
	}
	if g.g.State == bucketstore.StateProcessing {
		if err := r.store.SetState(ctx, g.g.ID, bucketstore.StateStop); err != nil {
			return err
		}
		g.g.State = bucketstore.StateStop
		if err := r.submitRetire(g.g); err != nil {
			return err
		}
	}
	if !created {
		return nil // already replaced; whoever created it runs it
	}
	r.log.Info("replacement group created", "group", ng.ID, "replaces", g.g.ID, "slot", ng.SlotName)
	return r.startGroup(ctx, ng)
}

// submitRetirements queues the clean-up of every stopped or terminated
// group: after a restart, or when a new group took over.
func (r *Replicator) submitRetirements(ctx context.Context) error {
	groups, err := r.store.Groups(ctx)
	if err != nil {
		return err
	}
	for _, g := range groups {
		if g.State == bucketstore.StateStop || g.State == bucketstore.StateTerminated {
			if err := r.submitRetire(g); err != nil {
				return err
			}
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
	return r.retry(ctx, fmt.Sprintf("group %d retire", g.ID), func(ctx context.Context) error {
		cur, err := r.store.Group(ctx, g.ID)
		if err != nil {
			return err
		}
		if cur.State != bucketstore.StateStop && cur.State != bucketstore.StateTerminated {
			return nil
		}
		conn, err := logrepl.Connect(ctx, r.cfg.Source.URI)
		if err != nil {
			return err
		}
		defer conn.Close(context.WithoutCancel(ctx))
		if err := logrepl.DropSlot(ctx, conn, g.SlotName); err != nil {
			return err
		}
		st, err := r.store.Terminate(ctx, g.ID, bucketstore.ClearOptions{})
		if err != nil {
			return err
		}
		if st.Rows > 0 || cur.State == bucketstore.StateStop {
			r.log.Info("retired replication group", "group", g.ID, "slot", g.SlotName, "rows_cleared", st.Rows)
		}
		return nil
	})
}
