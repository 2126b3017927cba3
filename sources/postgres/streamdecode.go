package postgres

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"

	"github.com/jackc/pgx/v5"

	"github.com/syncpipe/syncpipe/model"
	"github.com/syncpipe/syncpipe/pipeline"
	"github.com/syncpipe/syncpipe/sources/postgres/logrepl"
	"github.com/syncpipe/syncpipe/stages"
	"github.com/syncpipe/syncpipe/stages/checksum"
)

// StageDecode is the decode stage's name in spans and summaries.
const StageDecode = "decode"

// DecodeConfig configures a Decoder.
type DecodeConfig struct {
	// Rows, if set, is the sink's stored row data (model.Change.RowData),
	// from which an UPDATE's unchanged TOAST values are merged. The
	// decoder then keys every change (RowChange.Key, RowData, Derived) and
	// keeps the newest state of every row it decoded until its batch is
	// committed (StreamDecoder.Committed), and decodes on one goroutine: a
	// change's merge needs the change before it of the same row (see
	// streamrows.go). Without it, decoding runs on the stage's workers
	// and unchanged TOAST values are read from the source.
	Rows RowStore
	// Connect opens a source connection for reading a row by key, the
	// last resort for unchanged TOAST values. Without it, such an UPDATE
	// fails the batch: writing the values as NULL would corrupt the row.
	Connect func(context.Context) (*pgx.Conn, error)
	// Log, if set, gets a debug line for every row read from the source.
	Log *slog.Logger
	// Merged and Reread, if set, count the UPDATEs whose unchanged TOAST
	// values were merged from a row's previous state and read from the
	// source.
	Merged, Reread *atomic.Int64
}

// RowStore reads rows' stored data, as the sink last wrote it.
type RowStore interface {
	// RowData returns the stored RowData of refs; rows it lacks are
	// absent from the map.
	RowData(ctx context.Context, refs []RowRef) (map[RowRef][]byte, error)
}

// RowRef names one row of a sink: its table's id (model.Table.ID), its
// replica id and its order key (model.Change.KeyOrder: storage finds the
// row by it).
type RowRef struct {
	Table    string
	Key      [16]byte
	KeyOrder int32
}

// StreamDecoder is the stream's decode stage's state: per-row TOAST state
// (with DecodeConfig.Rows) and the source connections its workers opened.
type StreamDecoder struct {
	cfg  DecodeConfig
	rows *rowStates // nil without cfg.Rows

	mu    sync.Mutex
	conns []*pgx.Conn
}

// NewStreamDecoder returns a decoder configured by cfg; Close it when the
// stream ends.
func NewStreamDecoder(cfg DecodeConfig) *StreamDecoder {
	d := &StreamDecoder{cfg: cfg}
	if cfg.Rows != nil {
		d.rows = &rowStates{}
	}
	return d
}

// Committed tells the decoder that batch seq (pipeline.Batch.Seq) and
// every batch before it are committed: the sink holds their rows' states.
func (d *StreamDecoder) Committed(seq uint64) {
	if d.rows != nil {
		d.rows.committed(seq)
	}
}

// Close closes the source connections the decoder opened.
func (d *StreamDecoder) Close() {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, c := range d.conns {
		closeConn(c)
	}
	d.conns = nil
}

// Decode adds the stream's decode stage: the text values of every
// change's tuples become typed rows bound to their table's rules, on
// cfg.Workers goroutines (decode_workers) — one with DecodeConfig.Rows.
func Decode[P any](in *pipeline.Stream[StreamItem, P], cfg pipeline.StageConfig, d *StreamDecoder) *pipeline.Stream[stages.RowChange, P] {
	if cfg.Name == "" {
		cfg.Name = StageDecode
	}
	if d.rows != nil {
		cfg.Workers = 1
	}
	return pipeline.ProcessWorkers(in, cfg, func(int) pipeline.ProcessFunc[StreamItem, stages.RowChange, P] {
		w := &decodeWorker{d: d}
		return func(ctx context.Context, b pipeline.Batch[StreamItem, P]) (pipeline.Batch[stages.RowChange, P], error) {
			out, err := w.decode(ctx, b.Items, b.Seq)
			return pipeline.Derive(b, out), err
		}
	})
}

// decodeWorker is one goroutine of the decode stage.
type decodeWorker struct {
	d       *StreamDecoder
	rk      checksum.ReplicaKey
	fetched map[RowRef][]byte // stored row data read for the batch
	conn    *pgx.Conn         // for reading rows from the source; opened on first use
}

func (w *decodeWorker) decode(ctx context.Context, items []StreamItem, seq uint64) ([]stages.RowChange, error) {
	if w.d.rows != nil {
		if err := w.prefetch(ctx, items); err != nil {
			return nil, err
		}
	}
	out := make([]stages.RowChange, 0, len(items))
	for i := range items {
		it := &items[i]
		if it.Change == nil {
			if rc := &it.Row; rc.Kind == model.Upsert && w.d.rows != nil {
				ref := w.rowRef(it.Table, rc.Row)
				rc.Key, rc.RowData, rc.Derived = ref.Key, stages.RowDataFor(rc.Spec, rc.Row), true
				w.d.rows.remember(rc.Spec, ref, rc.RowData, seq)
			}
			out = append(out, it.Row)
			continue
		}
		rc, err := w.change(ctx, it, seq)
		if err != nil {
			return nil, err
		}
		out = append(out, rc)
	}
	return out, nil
}

// rowRef names row of t: op build derives the same key and order key
// from the row's values (stages.ReplicaID, stages.KeyOrder).
func (w *decodeWorker) rowRef(t *StreamTable, row []model.Value) RowRef {
	return RowRef{Table: t.Spec.Table.ID, Key: stages.ReplicaID(&w.rk, t.Spec, row), KeyOrder: stages.KeyOrder(t.Spec, row)}
}

// change decodes one INSERT, UPDATE or DELETE.
func (w *decodeWorker) change(ctx context.Context, it *StreamItem, seq uint64) (stages.RowChange, error) {
	t, c, rows := it.Table, it.Change, w.d.rows
	rc := it.Row
	rc.Spec = t.Spec
	if c.Kind == logrepl.Delete {
		row, _, err := decodeTuple(t, c.Old)
		if err != nil {
			return rc, err
		}
		rc.Kind, rc.Row = model.Delete, row
		if rows != nil {
			ref := w.rowRef(t, row)
			rc.Key, rc.Derived = ref.Key, true
			rows.remember(t.Spec, ref, nil, seq)
		}
		return rc, nil
	}
	row, missing, err := decodeTuple(t, c.New)
	if err != nil {
		return rc, err
	}
	rc.Kind = model.Upsert
	if c.Kind == logrepl.Update && c.OldKind != logrepl.OldNone {
		// An old image means the key changed (or identity is FULL): op
		// build retracts the row under its old key when that key differs.
		if rc.Old, _, err = decodeTuple(t, c.Old); err != nil {
			return rc, err
		}
	}
	if rows == nil {
		if len(missing) > 0 {
			if row, err = w.reread(ctx, t, c.New, row); err != nil {
				return rc, err
			}
		}
		rc.Row = row
		return rc, nil
	}
	key := w.rowRef(t, row)
	prev := key
	if rc.Old != nil {
		prev = w.rowRef(t, rc.Old)
	}
	rc.Key = key.Key
	if len(missing) > 0 {
		// Unchanged TOAST values come from the row's previous state,
		// stored under its previous key.
		if row, err = w.merge(ctx, t, prev, c.New, row, missing); err != nil {
			return rc, err
		}
		// The merge may have filled identity columns the key was made
		// without: op build takes the merged row's.
		rc.Key = w.rowRef(t, row).Key
	}
	// Op build takes the key and the row data as they are (Derived): a
	// merged row, always a big one, is encoded once.
	rc.Row, rc.RowData, rc.Derived = row, stages.RowDataFor(t.Spec, row), true
	if prev != key { // after the merge, which read the row under its old key
		rows.remember(t.Spec, prev, nil, seq)
	}
	rows.remember(t.Spec, key, rc.RowData, seq)
	return rc, nil
}

// decodeTuple turns a tuple into a row in the table's column order and
// returns the indexes of the columns left out as unchanged TOAST values
// (NULL in the row until filled).
func decodeTuple(t *StreamTable, tup logrepl.Tuple) ([]model.Value, []int, error) {
	row := make([]model.Value, len(t.Spec.Columns))
	var missing []int
	for i, col := range tup.Columns {
		if i >= len(t.Columns) {
			break
		}
		switch col.Kind {
		case logrepl.ColText:
			v, err := DecodeText(t.Columns[i], col.Data)
			if err != nil {
				return nil, nil, fmt.Errorf("decode %s.%s: %w", t.Spec.Table, t.Columns[i].Name, err)
			}
			row[i] = v
		case logrepl.ColUnchanged:
			missing = append(missing, i)
		}
	}
	return row, missing, nil
}

// reread fills the unchanged TOAST values of row, decoded from tup, by
// reading the row from the source by key: the values of every column
// the source has are taken from it. That read may see a newer row
// version, which the changes after it in the stream then overwrite; a row
// deleted since keeps its NULLs (its DELETE follows).
func (w *decodeWorker) reread(ctx context.Context, t *StreamTable, tup logrepl.Tuple, row []model.Value) ([]model.Value, error) {
	if w.d.cfg.Connect == nil {
		return nil, fmt.Errorf("decode %s: an UPDATE left out unchanged TOAST values and the pipeline has no way to fill them", t.Spec.Table)
	}
	info := t.Info
	key := make([]string, len(info.KeyColumns))
	for n, k := range info.KeyColumns {
		j := t.FromCatalog[k]
		if j < 0 || j >= len(tup.Columns) {
			return row, nil // the key is not in the stream's shape: a re-shape follows
		}
		key[n] = string(tup.Columns[j].Data)
	}
	if w.conn == nil {
		conn, err := w.d.cfg.Connect(ctx)
		if err != nil {
			return nil, err
		}
		w.d.mu.Lock()
		w.d.conns = append(w.d.conns, conn)
		w.d.mu.Unlock()
		w.conn = conn
	}
	cur, ok, err := ReadRow(ctx, w.conn, info, key)
	if err != nil {
		return nil, fmt.Errorf("re-read %s for unchanged TOAST values: %w", info.QualifiedName(), err)
	}
	if !ok {
		return row, nil // deleted since: a later change removes it
	}
	for i, v := range cur {
		if j := t.FromCatalog[i]; j >= 0 {
			row[j] = v
		}
	}
	return row, nil
}
