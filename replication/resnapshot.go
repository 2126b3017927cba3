package replication

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"

	"github.com/syncpipe/syncpipe/model"
	"github.com/syncpipe/syncpipe/pipeline"
	"github.com/syncpipe/syncpipe/sinks/bucketstore"
	"github.com/syncpipe/syncpipe/sources/postgres"
	"github.com/syncpipe/syncpipe/sources/postgres/logrepl"
	"github.com/syncpipe/syncpipe/stages"
)

// Schema changes (see doc.go): a table whose shape differs from the one
// storage records is re-shaped — its new shape recorded, its rows removed
// first if their replica ids change — and then re-read from the source in
// key-ordered chunks, interleaved with the stream's own batches through the
// stream's single writer, so the other tables keep streaming and every
// write applies in order. While a re-read runs, and until the stream has
// passed the source position its last chunk was read at, no checkpoint is
// published: the re-read rows may be ahead of the stream, and only then is
// every transaction in them complete. The re-read's progress is stored with
// each chunk, so a restart resumes it.

// resnap is the re-read of one table.
type resnap struct {
	ts      *tableState
	conn    *pgx.Conn // its own source connection, opened on first use
	reader  *postgres.SnapshotReader
	after   []string // resume key (nil: from the start)
	rows    int64
	started time.Time
}

// reshape records sh as ts's shape, and oid as the relation its rows come
// from, at the current position (inside txn when it is set): the changes
// so far are cut into a batch, a batch of its own records the new shape —
// removing the table's stored rows first when the replica identity
// changes, or when oid is another relation than the stored rows' (a table
// re-created under the name: the old one's rows are gone from the source)
// — and the table's re-read starts (again).
func (s *streamer) reshape(ctx context.Context, ts *tableState, sh shape, oid uint32, txn *logrepl.Txn) error {
	name := ts.t.info.QualifiedName()
	info, err := s.discover(ctx, ts)
	if err != nil {
		return err
	}
	lay, err := newLayout(&ts.t.stored.Table, s.g, sh, info)
	if err != nil {
		return fmt.Errorf("table %s changed shape: %w", name, err)
	}
	s.cutIfAny(txn)
	b := s.open()
	identity := sh.identity()
	replaced := oid != ts.oid
	rekeyed := !slices.Equal(identity, ts.shape.identity())
	if rekeyed || replaced {
		b.Items = append(b.Items, rawItem{lay: ts.layout, rc: stages.RowChange{Spec: ts.layout.spec, Kind: model.Truncate}})
	}
	b.Progress.Tables = append(b.Progress.Tables, bucketstore.TableUpdate{ID: ts.t.stored.ID, Shape: sh.marshal(),
		ReplicaIDColumns: identity, RelationID: oid, Resnapshot: &bucketstore.ResnapshotProgress{}})
	s.cut(txn)
	if replaced {
		s.r.log.Info("another table has the name now (dropped and re-created, or renamed into place): re-reading it while the stream goes on",
			"group", s.g.g.ID, "table", name, "relation", oid, "was", ts.oid)
	} else {
		s.r.log.Info("table shape changed: re-reading it while the stream goes on", "group", s.g.g.ID, "table", name,
			"rekeyed", rekeyed, "columns", len(sh.Columns))
	}
	s.follow(ts, oid)
	ts.shape, ts.info, ts.layout = sh, info, lay
	ts.rel = nil
	ts.check = nil
	s.startResnap(ts, nil, 0)
	return nil
}

// discover reads ts's table from the source catalog.
func (s *streamer) discover(ctx context.Context, ts *tableState) (postgres.TableInfo, error) {
	name := ts.t.info.QualifiedName()
	infos, err := discover(ctx, s.side, []string{name}, s.g.rules)
	if err != nil {
		return postgres.TableInfo{}, fmt.Errorf("discover %s after a schema change: %w", name, err)
	}
	if len(infos) != 1 {
		return postgres.TableInfo{}, fmt.Errorf("discover %s after a schema change: %w", name, postgres.ErrTableNotFound)
	}
	return infos[0], nil
}

// startResnap (re)starts the re-read of ts after key after.
func (s *streamer) startResnap(ts *tableState, after []string, rows int64) {
	for i, r := range s.resnaps {
		if r.ts == ts {
			r.close()
			s.resnaps = append(s.resnaps[:i], s.resnaps[i+1:]...)
			break
		}
	}
	s.resnaps = append(s.resnaps, &resnap{ts: ts, after: after, rows: rows, started: time.Now()})
}

// resnapChunk reads the next chunk of the first table being re-read and
// queues it as a batch that records the re-read's progress.
func (s *streamer) resnapChunk(ctx context.Context) error {
	rs := s.resnaps[0]
	ts := rs.ts
	if rs.reader == nil {
		conn, err := s.r.connectSource(ctx)
		if err != nil {
			return err
		}
		rs.conn = conn
		rs.reader = postgres.NewSnapshotReader(conn, ts.info, postgres.KeyRange{}, postgres.SnapshotOptions{
			ChunkRows: s.r.pl.Stages.ChunkRows, After: rs.after, SocketTimeout: s.r.cfg.Source.SnapshotSocketTimeout})
	}
	chunk, err := rs.reader.Next(ctx)
	done := errors.Is(err, pipeline.ErrEndOfInput)
	if err != nil && !done {
		return fmt.Errorf("re-read %s: %w", ts.info.QualifiedName(), err)
	}
	b := s.open()
	for _, row := range chunk.Rows {
		b.Items = append(b.Items, rawItem{lay: ts.layout, rc: stages.RowChange{Spec: ts.layout.spec, Kind: model.Upsert, Row: ts.layout.fromCatalogRow(row)}})
	}
	rs.rows += int64(len(chunk.Rows))
	prog := &bucketstore.ResnapshotProgress{LastKey: rs.reader.Position(), Rows: rs.rows, Done: done || chunk.Final}
	if prog.Done {
		if prog.DoneLSN, err = currentLSN(ctx, s.side); err != nil {
			return err
		}
		// A heartbeat after it brings the stream past DoneLSN soon, also
		// when the source is idle.
		if _, err := logrepl.Heartbeat(ctx, s.side); err != nil {
			return err
		}
		s.r.log.Info("table re-read after a schema change", "group", s.g.g.ID, "table", ts.info.QualifiedName(),
			"rows", rs.rows, "elapsed", time.Since(rs.started).Round(time.Millisecond))
		rs.close()
		s.resnaps = s.resnaps[1:]
	}
	b.Progress.Tables = append(b.Progress.Tables, bucketstore.TableUpdate{ID: ts.t.stored.ID, Resnapshot: prog})
	b.Rows = len(chunk.Rows)
	s.cutAt(s.pos)
	return nil
}

func (rs *resnap) close() {
	if rs.conn != nil {
		closeConn(rs.conn)
		rs.conn, rs.reader = nil, nil
	}
}

// fromCatalogRow maps a row in catalog column order (a re-read) onto the
// layout's columns.
func (l *layout) fromCatalogRow(row []model.Value) []model.Value {
	out := make([]model.Value, len(l.spec.Columns))
	for i, j := range l.fromCatalog {
		if j >= 0 && i < len(row) {
			out[j] = row[i]
		}
	}
	return out
}

// checkCatalog compares the source catalog with what storage records: the
// publication must still publish every table completely (else the stream
// ends with errPublication), every table the rules name must exist (else
// the stream stops with errTableAway until it is back), and a table whose
// shape differs from the stored one — a DDL the stream has not seen,
// because no row of the table changed since — or that is another relation
// than the stored rows' (re-created, renamed into place) is re-shaped once
// the stream has passed the position read after the catalog (so the DDL is
// behind it).
func (s *streamer) checkCatalog(ctx context.Context) error {
	names := make([]string, 0, len(s.byName))
	for name := range s.byName {
		names = append(names, name)
	}
	// Read before the position below: a DDL it shows is behind that.
	infos, derr := discover(ctx, s.side, names, s.g.rules)
	if err := s.publishReplaced(ctx, infos); err != nil {
		return err
	}
	err := postgres.Preflight(ctx, s.side, postgres.PreflightOptions{Publication: s.r.pl.Source.Publication, Tables: names})
	if publicationProblem(err) {
		return fmt.Errorf("%w: %w", errPublication, err)
	}
	if errors.Is(err, postgres.ErrTableNotFound) {
		return fmt.Errorf("%w: %w", err, errTableAway)
	}
	if err != nil {
		return err // a table without a key, the connection gone, …
	}
	if derr != nil && len(infos) == 0 {
		return fmt.Errorf("check the source tables: %w", derr)
	}
	lsn, lerr := currentLSN(ctx, s.side)
	if lerr != nil {
		return lerr
	}
	due := false
	for _, info := range infos {
		ts := s.byName[info.Schema+"."+info.Name]
		if ts == nil {
			continue
		}
		if info.OID == ts.oid && catalogShape(info).equal(ts.shape) {
			ts.check = nil
		} else if ts.check == nil || ts.check.info.OID != info.OID {
			ts.check = &catalogCheck{lsn: lsn, info: info}
			due = true
		}
	}
	if due {
		// Bring the stream past lsn soon, also when the source is idle.
		if _, err := logrepl.Heartbeat(ctx, s.side); err != nil {
			return err
		}
	}
	return nil
}

// publishReplaced adds the tables that another relation than the stored
// rows' has the name of (re-created, or renamed into place) to the
// publication, if syncpipe manages it: a dropped table left it, and its
// successor is re-read anyway, so none of its changes is lost. A
// publication of the operator's is theirs: Preflight says what to run.
func (s *streamer) publishReplaced(ctx context.Context, infos []postgres.TableInfo) error {
	var replaced []string
	for _, info := range infos {
		if ts := s.byName[info.Schema+"."+info.Name]; ts != nil && info.OID != ts.oid {
			replaced = append(replaced, info.QualifiedName())
		}
	}
	if len(replaced) == 0 {
		return nil
	}
	err := postgres.Preflight(ctx, s.side, postgres.PreflightOptions{Publication: s.r.pl.Source.Publication, Tables: replaced, AddTables: true})
	if err != nil && !publicationProblem(err) && !fatal(err) {
		return err // the connection gone, …: the others are the main check's
	}
	return nil
}

// checkCatalogDue re-shapes the tables whose catalog check is due: the
// stream has passed its position, outside a transaction.
func (s *streamer) checkCatalogDue(ctx context.Context) error {
	if s.pos.TxnLSN != 0 {
		return nil
	}
	for _, ts := range s.byName {
		if ts.check == nil || s.pos.LSN < ts.check.lsn {
			continue
		}
		info := ts.check.info
		sh := catalogShape(info)
		ts.check = nil
		if info.OID == ts.oid && sh.equal(ts.shape) {
			continue
		}
		if err := s.reshape(ctx, ts, sh, info.OID, nil); err != nil {
			return err
		}
	}
	return nil
}

// currentLSN is the source's WAL insert position: every transaction that
// committed before the call has its commit record below it. (The write
// position, pg_current_wal_lsn, can lag behind commits made with
// synchronous_commit=off.)
func currentLSN(ctx context.Context, conn *pgx.Conn) (logrepl.LSN, error) {
	var text string
	if err := conn.QueryRow(ctx, "SELECT pg_current_wal_insert_lsn()::text").Scan(&text); err != nil {
		return 0, fmt.Errorf("read source WAL position: %w", err)
	}
	lsn, err := pglogrepl.ParseLSN(text)
	if err != nil {
		return 0, fmt.Errorf("read source WAL position %q: %w", text, err)
	}
	return lsn, nil
}
