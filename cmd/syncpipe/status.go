package main

import (
	"context"
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/jackc/pgx/v5"

	"github.com/syncpipe/syncpipe/sinks/bucketstore"
	"github.com/syncpipe/syncpipe/sources/postgres"
)

// runStatus prints replication groups, per-table snapshot progress, lag and
// slot health. Storage is required; the source is optional (lag and slot
// health are shown when it answers).
func runStatus(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("status", stderr)
	path := configFlag(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	cfg, err := loadConfig(*path, stderr)
	if err != nil {
		return err
	}
	store, err := bucketstore.Open(ctx, bucketstore.Config{URI: cfg.Storage.URI, Schema: cfg.Storage.Schema, MaxConns: 2})
	if err != nil {
		return err
	}
	defer store.Close()
	groups, err := store.Groups(ctx)
	if err != nil {
		return err
	}
	if len(groups) == 0 {
		fmt.Fprintln(stdout, "no replication groups yet: start `syncpipe run`")
		return nil
	}
	var src *pgx.Conn
	if cc, err := postgres.ConnConfig(cfg.Source.URI, postgres.KeepAlive{}); err == nil {
		cc.ConnectTimeout = cfg.Source.ConnectTimeout
		if src, err = pgx.ConnectConfig(ctx, cc); err != nil {
			fmt.Fprintf(stderr, "source unreachable (%v): lag and slot health not shown\n", err)
			src = nil
		} else {
			defer src.Close(context.WithoutCancel(ctx))
		}
	}
	tw := tabwriter.NewWriter(stdout, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "GROUP\tSTATE\tSLOT\tSNAPSHOT\tCHECKPOINT\tLSN\tLAG\tSLOT HEALTH\tLAST ERROR")
	for _, g := range groups {
		snap := "running"
		if g.SnapshotDone {
			snap = "done"
		}
		lag, health := "?", "?"
		if src != nil {
			lag, health = sourceLag(ctx, src, store, g)
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s\n", g.ID, g.State, g.SlotName, snap, g.LastCheckpoint,
			g.LastCheckpointLSN, lag, health, orDash(g.LastError))
	}
	_ = tw.Flush()
	fmt.Fprintln(stdout)
	tw = tabwriter.NewWriter(stdout, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "GROUP\tTABLE\tRANGES DONE\tROWS\tESTIMATED\tPROGRESS")
	rows, err := store.Pool().Query(ctx, `
		SELECT t.group_id, t.schema_name || '.' || t.table_name, t.snapshot_done,
		       count(r.range_no), count(r.range_no) FILTER (WHERE r.done), coalesce(sum(r.rows_done), 0), t.estimated_rows
		FROM source_tables t LEFT JOIN snapshot_ranges r ON r.source_table_id = t.id
		GROUP BY t.id ORDER BY 1, 2`)
	if err != nil {
		return fmt.Errorf("read snapshot progress: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var group, ranges, done int
		var table string
		var tableDone bool
		var rowsDone, estimated int64
		if err := rows.Scan(&group, &table, &tableDone, &ranges, &done, &rowsDone, &estimated); err != nil {
			return err
		}
		pct := "—"
		switch {
		case tableDone:
			pct = "done"
		case estimated > 0:
			pct = fmt.Sprintf("%.1f%%", min(100, 100*float64(rowsDone)/float64(estimated)))
		}
		fmt.Fprintf(tw, "%d\t%s\t%d/%d\t%d\t%d\t%s\n", group, table, done, ranges, rowsDone, estimated, pct)
	}
	if err := rows.Err(); err != nil {
		return err
	}
	return tw.Flush()
}

// sourceLag returns how far the source's WAL is ahead of what storage
// holds, and the slot's health.
func sourceLag(ctx context.Context, src *pgx.Conn, store *bucketstore.Store, g bucketstore.Group) (lag, health string) {
	lag, health = "?", "?"
	var streamLSN *string
	if err := store.Pool().QueryRow(ctx, "SELECT stream_lsn::text FROM groups WHERE id = $1", g.ID).Scan(&streamLSN); err == nil && streamLSN != nil {
		var bytes int64
		if err := src.QueryRow(ctx, "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), $1::pg_lsn)::bigint", *streamLSN).Scan(&bytes); err == nil {
			lag = fmt.Sprintf("%d bytes", max(bytes, 0))
		}
	}
	st, err := postgres.SlotHealth(ctx, src, g.SlotName)
	switch {
	case err != nil:
		health = "error: " + err.Error()
	case !st.Exists:
		health = "missing"
	default:
		health = fmt.Sprintf("%s, %d bytes unconfirmed", st.WalStatus, st.LagBytes)
	}
	return lag, health
}

func orDash(s string) string {
	if s == "" {
		return "—"
	}
	return s
}
