package replication

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/syncpipe/syncpipe/model"
	"github.com/syncpipe/syncpipe/pipeline"
	"github.com/syncpipe/syncpipe/sinks/bucketstore"
	"github.com/syncpipe/syncpipe/sources/postgres"
	"github.com/syncpipe/syncpipe/sources/postgres/logrepl"
	"github.com/syncpipe/syncpipe/stages"
	"github.com/syncpipe/syncpipe/stages/checksum"
)

// rawItem is one item of the bucketstore stream between its read and
// decode stages: a change from the slot with the layout it decodes in
// (bound by the read stage, which sees relations and shape changes in
// stream order), or a row change that needs no decoding — a re-read row, a
// TRUNCATE.
type rawItem struct {
	c   *logrepl.Change
	lay *layout
	rc  stages.RowChange // when c is nil
}

// streamDecoder is the bucketstore stream's decode stage: tuples become
// rows in their layout's columns, UPDATEs that left TOAST values out are
// merged with the row's previous state, and the RowData of every change is
// remembered for the merges after it (toast.go). It runs on one goroutine.
type streamDecoder struct {
	r       *Replicator
	group   int
	toast   *toastState
	fetched map[bucketstore.RowRef][]byte // read from storage for the batch
	conn    *pgx.Conn                     // for re-reading rows; opened on first use
	rk      checksum.ReplicaKey
}

func (d *streamDecoder) close() {
	if d.conn != nil {
		closeConn(d.conn)
		d.conn = nil
	}
}

func (d *streamDecoder) replicaID(lay *layout, row []model.Value) [16]byte {
	return stages.ReplicaID(&d.rk, lay.spec, row)
}

// decode is the stage's ProcessFunc.
func (d *streamDecoder) decode(ctx context.Context, b streamBatch) (pipeline.Batch[stages.RowChange, streamPos], error) {
	if err := d.prefetchToast(ctx, b.Items); err != nil {
		return pipeline.Batch[stages.RowChange, streamPos]{}, err
	}
	out := make([]stages.RowChange, 0, len(b.Items))
	seq := b.Progress.seq
	for i := range b.Items {
		it := &b.Items[i]
		if it.c == nil {
			if rc := &it.rc; rc.Kind == model.Upsert {
				rc.Key, rc.RowData, rc.Derived = d.replicaID(it.lay, rc.Row), stages.RowDataFor(rc.Spec, rc.Row), true
				d.toast.remember(rc.Spec, rc.Key, rc.RowData, seq)
			}
			out = append(out, it.rc)
			continue
		}
		rc, err := d.rowChange(ctx, it.lay, it.c, seq)
		if err != nil {
			return pipeline.Batch[stages.RowChange, streamPos]{}, err
		}
		out = append(out, rc)
	}
	return pipeline.Derive(b, out), nil
}

// rowChange decodes one INSERT, UPDATE or DELETE.
func (d *streamDecoder) rowChange(ctx context.Context, lay *layout, c *logrepl.Change, seq uint64) (stages.RowChange, error) {
	rc := stages.RowChange{Spec: lay.spec}
	if c.Kind == logrepl.Delete {
		row, _, err := postgres.DecodeTuple(&lay.st, c.Old)
		if err != nil {
			return rc, err
		}
		rc.Kind, rc.Row = model.Delete, row
		rc.Key, rc.Derived = d.replicaID(lay, row), true
		d.toast.remember(lay.spec, rc.Key, nil, seq)
		return rc, nil
	}
	row, missing, err := postgres.DecodeTuple(&lay.st, c.New)
	if err != nil {
		return rc, err
	}
	rc.Kind = model.Upsert
	key := d.replicaID(lay, row)
	prev := key
	if c.Kind == logrepl.Update && c.OldKind != logrepl.OldNone {
		// An old image means the key changed (or identity is FULL): op
		// build retracts the row under its old key when that key differs.
		if rc.Old, _, err = postgres.DecodeTuple(&lay.st, c.Old); err != nil {
			return rc, err
		}
		prev = d.replicaID(lay, rc.Old)
	}
	rc.Key = key
	if len(missing) > 0 {
		// Unchanged TOAST values come from the row's previous state,
		// stored under its previous key.
		if row, err = d.mergeToast(ctx, lay, prev, c.New, row, missing); err != nil {
			return rc, err
		}
		// The merge may have filled identity columns the key was made
		// without: op build takes the merged row's.
		rc.Key = d.replicaID(lay, row)
	}
	// Op build takes the key and the row data as they are (Derived): a
	// merged row, always a big one, is encoded once.
	rc.Row, rc.RowData, rc.Derived = row, stages.RowDataFor(lay.spec, row), true
	if prev != key { // after the merge, which read the row under its old key
		d.toast.remember(lay.spec, prev, nil, seq)
	}
	d.toast.remember(lay.spec, key, rc.RowData, seq)
	return rc, nil
}
