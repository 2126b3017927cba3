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
	rt      *postgres.ReadTable
	t       *table
	conn    *pgx.Conn // its own source connection, opened on first use
	reader  *postgres.SnapshotReader
	after   []string // resume key (nil: from the start)
	rows    int64
	started time.Time
}

// Reshape (postgres.StreamTables) records sh as rt's shape, and oid as the
// relation its rows come from, in a batch of its own at the current
// position — removing the table's stored rows first when the replica
// identity changes, or when oid is another relation than the stored rows'
// (a table re-created under the name: the old one's rows are gone from
// the source) — and starts the table's re-read (again).
func (s *streamer) Reshape(ctx context.Context, rt *postgres.ReadTable, sh postgres.Shape, oid uint32) (postgres.Reshape[streamPos], error) {
	t := s.tables[rt]
	name := t.info.QualifiedName()
	info, err := s.discover(ctx, t)
	if err != nil {
		return postgres.Reshape[streamPos]{}, err
	}
	lay, err := newLayout(&t.stored.Table, s.g, sh, info)
	if err != nil {
		return postgres.Reshape[streamPos]{}, fmt.Errorf("table %s changed shape: %w", name, err)
	}
	identity := sh.IdentityColumns()
	replaced := oid != rt.OID
	rekeyed := !slices.Equal(identity, rt.Shape.IdentityColumns())
	update := bucketstore.TableUpdate{ID: t.stored.ID, Shape: marshalShape(sh),
		ReplicaIDColumns: identity, RelationID: oid, Resnapshot: &bucketstore.ResnapshotProgress{}}
	if replaced {
		s.r.log.Info("another table has the name now (dropped and re-created, or renamed into place): re-reading it while the stream goes on",
			"group", s.g.g.ID, "table", name, "relation", oid, "was", rt.OID)
	} else {
		s.r.log.Info("table shape changed: re-reading it while the stream goes on", "group", s.g.g.ID, "table", name,
			"rekeyed", rekeyed, "columns", len(sh.Columns))
	}
	s.startResnap(rt, nil, 0)
	return postgres.Reshape[streamPos]{Table: lay, Clear: rekeyed || replaced,
		Record: func(p *streamPos) { p.Tables = append(p.Tables, update) }}, nil
}

// discover reads t from the source catalog.
func (s *streamer) discover(ctx context.Context, t *table) (postgres.TableInfo, error) {
	name := t.info.QualifiedName()
	infos, err := discover(ctx, s.side, []string{name}, s.g.rules)
	if err != nil {
		return postgres.TableInfo{}, fmt.Errorf("discover %s after a schema change: %w", name, err)
	}
	if len(infos) != 1 {
		return postgres.TableInfo{}, fmt.Errorf("discover %s after a schema change: %w", name, postgres.ErrTableNotFound)
	}
	return infos[0], nil
}

// startResnap (re)starts the re-read of rt after key after.
func (s *streamer) startResnap(rt *postgres.ReadTable, after []string, rows int64) {
	for i, r := range s.resnaps {
		if r.rt == rt {
			r.close()
			s.resnaps = append(s.resnaps[:i], s.resnaps[i+1:]...)
			break
		}
	}
	s.resnaps = append(s.resnaps, &resnap{rt: rt, t: s.tables[rt], after: after, rows: rows, started: time.Now()})
}

// Pending (postgres.StreamAside) reports whether a table is being re-read.
func (s *streamer) Pending() bool { return len(s.resnaps) > 0 }

// ReadAside (postgres.StreamAside) reads the next chunk of the first table
// being re-read into b, a batch that records the re-read's progress.
func (s *streamer) ReadAside(ctx context.Context, b *pipeline.Batch[postgres.StreamItem, streamPos]) error {
	rs := s.resnaps[0]
	lay := rs.rt.Table
	if rs.reader == nil {
		conn, err := s.r.connectSource(ctx)
		if err != nil {
			return err
		}
		rs.conn = conn
		rs.reader = postgres.NewSnapshotReader(conn, lay.Info, postgres.KeyRange{}, postgres.SnapshotOptions{
			ChunkRows: s.r.pl.Stages.ChunkRows, After: rs.after, SocketTimeout: s.r.cfg.Source.SnapshotSocketTimeout})
	}
	chunk, err := rs.reader.Next(ctx)
	done := errors.Is(err, pipeline.ErrEndOfInput)
	if err != nil && !done {
		return fmt.Errorf("re-read %s: %w", lay.Info.QualifiedName(), err)
	}
	for _, row := range chunk.Rows {
		b.Items = append(b.Items, postgres.StreamItem{Table: lay, Row: stages.RowChange{Spec: lay.Spec, Kind: model.Upsert, Row: lay.FromCatalogRow(row)}})
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
		s.r.log.Info("table re-read after a schema change", "group", s.g.g.ID, "table", lay.Info.QualifiedName(),
			"rows", rs.rows, "elapsed", time.Since(rs.started).Round(time.Millisecond))
		rs.close()
		s.resnaps = s.resnaps[1:]
	}
	b.Progress.Tables = append(b.Progress.Tables, bucketstore.TableUpdate{ID: rs.t.stored.ID, Resnapshot: prog})
	b.Rows = len(chunk.Rows)
	return nil
}

func (rs *resnap) close() {
	if rs.conn != nil {
		closeConn(rs.conn)
		rs.conn, rs.reader = nil, nil
	}
}

// Catalog (postgres.StreamCatalog) reads the source catalog of the
// tables and checks it: the publication must still publish every table
// completely (else the stream ends with errPublication), and every table
// the rules name must exist (else the stream stops with errTableAway
// until it is back). The reader re-shapes a table whose shape differs
// from the stored one — a DDL the stream has not seen, because no row of
// the table changed since — or that is another relation than the stored
// rows' (re-created, renamed into place) once the stream has passed the
// position read after the catalog (so the DDL is behind it).
func (s *streamer) Catalog(ctx context.Context, tables []*postgres.ReadTable) ([]postgres.TableInfo, logrepl.LSN, error) {
	names := make([]string, 0, len(tables))
	oids := make(map[string]uint32, len(tables))
	for _, rt := range tables {
		names = append(names, rt.Name)
		oids[rt.Name] = rt.OID
	}
	// Read before the position below: a DDL it shows is behind that.
	infos, derr := discover(ctx, s.side, names, s.g.rules)
	if err := s.publishReplaced(ctx, infos, oids); err != nil {
		return nil, 0, err
	}
	err := postgres.Preflight(ctx, s.side, postgres.PreflightOptions{Publication: s.r.pl.Source.Publication, Tables: names})
	if publicationProblem(err) {
		return nil, 0, fmt.Errorf("%w: %w", errPublication, err)
	}
	if errors.Is(err, postgres.ErrTableNotFound) {
		return nil, 0, fmt.Errorf("%w: %w", err, errTableAway)
	}
	if err != nil {
		return nil, 0, err // a table without a key, the connection gone, …
	}
	if derr != nil && len(infos) == 0 {
		return nil, 0, fmt.Errorf("check the source tables: %w", derr)
	}
	lsn, err := currentLSN(ctx, s.side)
	if err != nil {
		return nil, 0, err
	}
	return infos, lsn, nil
}

// Nudge (postgres.StreamCatalog) brings the stream past the source's
// current position soon, also when the source is idle: a heartbeat.
func (s *streamer) Nudge(ctx context.Context) error {
	_, err := logrepl.Heartbeat(ctx, s.side)
	return err
}

// publishReplaced adds the tables that another relation than the stored
// rows' (oids, by name) has the name of (re-created, or renamed into
// place) to the publication, if syncpipe manages it: a dropped table left
// it, and its successor is re-read anyway, so none of its changes is lost.
// A publication of the operator's is theirs: Preflight says what to run.
func (s *streamer) publishReplaced(ctx context.Context, infos []postgres.TableInfo, oids map[string]uint32) error {
	var replaced []string
	for _, info := range infos {
		if oid, ok := oids[info.Schema+"."+info.Name]; ok && info.OID != oid {
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
