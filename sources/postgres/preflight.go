package postgres

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/syncpipe/syncpipe/sources/postgres/logrepl"
)

// DefaultPublication is the publication syncpipe streams from (SPEC §4).
const DefaultPublication = "syncpipe"

// Sentinel errors of Preflight, matched with errors.Is.
var (
	// ErrWalLevel: the server's wal_level is not logical.
	ErrWalLevel = errors.New("wal_level is not logical")
	// ErrPublication: the publication is missing, misconfigured, or does
	// not publish a sync-rules table completely.
	ErrPublication = errors.New("publication is not usable")
	// ErrReplicationRole: the role may not use replication.
	ErrReplicationRole = errors.New("role lacks the REPLICATION attribute")
)

// PreflightOptions configures Preflight.
type PreflightOptions struct {
	// Publication to stream from (DefaultPublication when empty).
	Publication string
	// Tables are the sync-rules tables ("schema.name" or "name").
	Tables []string
	// CreatePublication creates a missing publication FOR TABLE Tables
	// when the role is allowed to, and adds missing Tables to a
	// publication it created (see managedComment).
	CreatePublication bool
	// DryRun, with CreatePublication, runs the statements that create
	// the publication or add tables to it in a transaction that is rolled
	// back: Preflight reports whether they would succeed (the role's
	// privileges) and changes nothing. syncpipe validate judges so what
	// run would do, with the server's own permission checks.
	DryRun bool
	// AddTables adds missing Tables to a publication syncpipe created,
	// but never creates a missing publication: for a table the caller
	// re-reads anyway (one re-created under its name), so no change made
	// while it was not published is lost.
	AddTables bool
}

// Preflight checks that the source can be replicated: wal_level, the
// replication privilege, every table (exists, has a key: see Discover), and
// the publication (exists or is created, publishes insert, update, delete
// and truncate, does not publish via the partition root, contains every
// table with all columns and no row filter). All problems are returned
// together (errors.Join), each a one-line message saying what to run.
func Preflight(ctx context.Context, conn *pgx.Conn, opts PreflightOptions) error {
	pub := opts.Publication
	if pub == "" {
		pub = DefaultPublication
	}
	var problems []error
	var (
		walLevel, role   string
		super, repl, rds bool
		version          int
	)
	err := conn.QueryRow(ctx, `
SELECT current_setting('wal_level'), current_user::text, r.rolsuper, r.rolreplication,
       EXISTS (SELECT 1 FROM pg_roles g WHERE g.rolname = 'rds_replication' AND pg_has_role(current_user, g.oid, 'member')),
       current_setting('server_version_num')::int
FROM pg_roles r WHERE r.rolname = current_user`).Scan(&walLevel, &role, &super, &repl, &rds, &version)
	if err != nil {
		return fmt.Errorf("preflight: read server settings: %w", err)
	}
	if err := walLevelProblem(walLevel); err != nil {
		problems = append(problems, err)
	}
	if !super && !repl && !rds {
		problems = append(problems, problemf(ErrReplicationRole,
			"role %s lacks the REPLICATION attribute needed for logical replication: run ALTER ROLE %s WITH REPLICATION as a superuser",
			quoteIdentIfNeeded(role), quoteIdentIfNeeded(role)))
	}
	_, tables, tableProblems, err := discover(ctx, conn, opts.Tables)
	if err != nil {
		return fmt.Errorf("preflight: %w", err)
	}
	problems = append(problems, tableProblems...)
	if err := checkPublication(ctx, conn, pub, tables, opts, version); err != nil {
		problems = append(problems, err)
	}
	return errors.Join(problems...)
}

// walLevelProblem returns the error for a wal_level other than logical.
func walLevelProblem(level string) error {
	if level == "logical" {
		return nil
	}
	return problemf(ErrWalLevel,
		"the source database has wal_level = %s but logical replication needs logical: set wal_level = logical in postgresql.conf and restart the server", level)
}

func checkPublication(ctx context.Context, conn *pgx.Conn, pub string, tables []TableInfo, opts PreflightOptions, version int) error {
	var ins, upd, del, trunc, viaRoot, managed bool
	err := conn.QueryRow(ctx, `SELECT pubinsert, pubupdate, pubdelete, pubtruncate, pubviaroot,
		coalesce(obj_description(oid, 'pg_publication') = $2, false) FROM pg_publication WHERE pubname = $1`, pub, managedComment).
		Scan(&ins, &upd, &del, &trunc, &viaRoot, &managed)
	if errors.Is(err, pgx.ErrNoRows) {
		return createPublication(ctx, conn, pub, tables, opts)
	}
	if err != nil {
		return fmt.Errorf("preflight: read publication %s: %w", pub, err)
	}
	qpub := quoteIdentIfNeeded(pub)
	var problems []error
	var missingOps []string
	for _, op := range []struct {
		on   bool
		name string
	}{{ins, "insert"}, {upd, "update"}, {del, "delete"}, {trunc, "truncate"}} {
		if !op.on {
			missingOps = append(missingOps, op.name)
		}
	}
	if len(missingOps) > 0 {
		problems = append(problems, problemf(ErrPublication,
			"publication %s does not publish %s: run ALTER PUBLICATION %s SET (publish = 'insert, update, delete, truncate')",
			qpub, strings.Join(missingOps, ", "), qpub))
	}
	if viaRoot {
		problems = append(problems, problemf(ErrPublication,
			"publication %s publishes partition changes via the partition root, which syncpipe does not support: run ALTER PUBLICATION %s SET (publish_via_partition_root = false)",
			qpub, qpub))
	}
	if err := checkPublicationTables(ctx, conn, pub, tables, version, (opts.CreatePublication || opts.AddTables) && managed, opts.DryRun); err != nil {
		problems = append(problems, err)
	}
	return errors.Join(problems...)
}

// checkPublicationTables checks that pub publishes every table whole;
// tables missing from a publication syncpipe manages are added to it (in
// a transaction rolled back when dryRun).
func checkPublicationTables(ctx context.Context, conn *pgx.Conn, pub string, tables []TableInfo, version int, manage, dryRun bool) error {
	if len(tables) == 0 {
		return nil
	}
	// Column lists and row filters exist from PostgreSQL 15 on.
	q := `SELECT schemaname::text, tablename::text, NULL::text[], false FROM pg_publication_tables WHERE pubname = $1`
	if version >= 150000 {
		q = `SELECT schemaname::text, tablename::text, attnames::text[], rowfilter IS NOT NULL FROM pg_publication_tables WHERE pubname = $1`
	}
	rows, err := conn.Query(ctx, q, pub)
	if err != nil {
		return fmt.Errorf("preflight: read tables of publication %s: %w", pub, err)
	}
	type pubTable struct {
		cols     []string
		filtered bool
	}
	published := map[[2]string]pubTable{}
	for rows.Next() {
		var schema, name string
		var pt pubTable
		if err := rows.Scan(&schema, &name, &pt.cols, &pt.filtered); err != nil {
			rows.Close()
			return fmt.Errorf("preflight: read tables of publication %s: %w", pub, err)
		}
		published[[2]string{schema, name}] = pt
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return fmt.Errorf("preflight: read tables of publication %s: %w", pub, err)
	}
	qpub := quoteIdentIfNeeded(pub)
	var problems []error
	var missing []string
	var add []string
	for _, t := range tables {
		pt, ok := published[[2]string{t.Schema, t.Name}]
		if !ok {
			missing = append(missing, t.QualifiedName())
			add = append(add, pgx.Identifier{t.Schema, t.Name}.Sanitize())
			continue
		}
		partial := pt.cols != nil && len(pt.cols) < len(t.Columns)
		if pt.filtered || partial {
			what := "a row filter"
			if partial {
				what = "a column list"
			}
			problems = append(problems, problemf(ErrPublication,
				"publication %s publishes table %s with %s, so changes would be incomplete: run ALTER PUBLICATION %s SET TABLE … listing %s without WHERE or column list (or DROP TABLE then ADD TABLE %s)",
				qpub, t.QualifiedName(), what, qpub, t.QualifiedName(), t.QualifiedName()))
		}
	}
	if len(missing) > 0 && manage {
		sql := fmt.Sprintf("ALTER PUBLICATION %s ADD TABLE %s", pgx.Identifier{pub}.Sanitize(), strings.Join(add, ", "))
		if err := execDDL(ctx, conn, dryRun, sql); err != nil {
			return errors.Join(append(problems, fmt.Errorf("preflight: add tables %s to publication %s: %w", strings.Join(missing, ", "), qpub, err))...)
		}
		missing = nil
	}
	if len(missing) > 0 {
		noun := "table " + missing[0] + " is"
		if len(missing) > 1 {
			noun = "tables " + strings.Join(missing, ", ") + " are"
		}
		problems = append(problems, problemf(ErrPublication,
			"%s not in publication %s: run %s",
			noun, qpub, logrepl.AddTablesRemedy(pub, missing)))
	}
	return errors.Join(problems...)
}

// managedComment marks a publication syncpipe created: the tables that
// later sync rules name are added to it. A publication someone else
// created is theirs — it may feed other subscribers — so for it syncpipe
// only says what to run.
const managedComment = "created by syncpipe: tables the sync rules name are added to it"

func createPublication(ctx context.Context, conn *pgx.Conn, pub string, tables []TableInfo, opts PreflightOptions) error {
	create := opts.CreatePublication
	qpub := quoteIdentIfNeeded(pub)
	names := make([]string, len(tables))
	idents := make([]string, len(tables))
	for i, t := range tables {
		names[i] = t.QualifiedName()
		idents[i] = pgx.Identifier{t.Schema, t.Name}.Sanitize()
	}
	stmt := logrepl.CreatePublicationRemedy(pub, names)
	if create && len(tables) == 0 {
		return problemf(ErrPublication,
			"publication %s does not exist, and none of the sync rules' tables exists in the source database to create it for: create the tables (or fix their names in the rules); syncpipe creates the publication at its next start",
			qpub)
	}
	if !create {
		return problemf(ErrPublication, "publication %s does not exist in the source database: run %s", qpub, stmt)
	}
	sql := fmt.Sprintf("CREATE PUBLICATION %s FOR TABLE %s", pgx.Identifier{pub}.Sanitize(), strings.Join(idents, ", "))
	err := execDDL(ctx, conn, opts.DryRun, sql,
		fmt.Sprintf("COMMENT ON PUBLICATION %s IS '%s'", pgx.Identifier{pub}.Sanitize(), managedComment))
	if err != nil {
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == "42501" { // insufficient_privilege
			db := quoteIdentIfNeeded(conn.Config().Database)
			return problemf(ErrPublication,
				"publication %s does not exist and this role may not create it (%s): run %s as the owner of the tables, who needs CREATE on the database (GRANT CREATE ON DATABASE %s TO <owner>); or make this role own the tables and GRANT CREATE ON DATABASE %s TO %s",
				qpub, pgErr.Message, stmt, db, db, quoteIdentIfNeeded(conn.Config().User))
		}
		return fmt.Errorf("preflight: %s: %w", stmt, err)
	}
	return nil
}

// execDDL runs stmts in one transaction, which is committed, or rolled
// back when dryRun: the server has checked them either way.
func execDDL(ctx context.Context, conn *pgx.Conn, dryRun bool, stmts ...string) error {
	tx, err := conn.Begin(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }() // after Commit: a no-op
	for _, s := range stmts {
		if _, err := tx.Exec(ctx, s); err != nil {
			return err
		}
	}
	if dryRun {
		return tx.Rollback(ctx)
	}
	return tx.Commit(ctx)
}
