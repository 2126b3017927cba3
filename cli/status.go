package cli

import (
	"context"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/syncpipe/syncpipe/config"
	"github.com/syncpipe/syncpipe/sinks/bucketstore"
	"github.com/syncpipe/syncpipe/sources/postgres"
)

// statusCatalog is what status reads of bucket storage's catalog
// (*bucketstore.Catalog), beside the work units it counts (unitCounter,
// *bucketstore.Leases). Status is written against these alone, so that
// what it costs storage is visible here and its output can be tested on
// a fake (status_render_test.go) without PostgreSQL.
type statusCatalog interface {
	// Groups returns every replication group, oldest first.
	Groups(ctx context.Context) ([]bucketstore.Group, error)
	// SnapshotProgress returns every group's per-table snapshot progress.
	SnapshotProgress(ctx context.Context) ([]bucketstore.TableProgress, error)
	// SinkPipelines returns the stored state of the pipelines whose sink
	// is not bucket storage.
	SinkPipelines(ctx context.Context) ([]bucketstore.SinkPipeline, error)
	// Now is storage's clock, which stamped the stored errors.
	Now(ctx context.Context) (time.Time, error)
}

var (
	_ statusCatalog = (*bucketstore.Catalog)(nil)
	_ unitCounter   = (*bucketstore.Leases)(nil)
)

// runStatus prints replication groups, per-table snapshot progress, lag and
// slot health; for a config without storage, the pipelines' state from
// their state files. The source is optional (lag and slot health are
// shown when it answers).
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
	if !cfg.UsesStorage() {
		// Only custom pipelines: their state is in state files.
		src := statusSource(ctx, cfg, stderr)
		if src != nil {
			defer closeStatusSource(ctx, src)
		}
		return writeStateStatus(ctx, stdout, cfg, src, time.Now())
	}
	store, err := openToolStore(ctx, cfg)
	if err != nil {
		return err
	}
	defer store.Close()
	// Storage first: when it does not answer there is nothing to show, and
	// the source's connect timeout need not be waited for.
	groups, err := store.Catalog().Groups(ctx)
	if err != nil {
		return err
	}
	src := statusSource(ctx, cfg, stderr)
	if src != nil {
		defer closeStatusSource(ctx, src)
	}
	return writeStatus(ctx, stdout, cfg, store.Catalog(), store.Leases(), groups, src)
}

// statusSource connects to the source lag is measured on (the bucketstore
// pipeline's, else the first pipeline's: they all read it), or says on
// stderr that lag and slot health are not shown and returns nil.
func statusSource(ctx context.Context, cfg *config.Config, stderr io.Writer) *pgx.Conn {
	pl, ok := cfg.BucketstorePipeline()
	if !ok {
		pl = cfg.EffectivePipelines()[0]
	}
	src, err := postgres.Connect(ctx, pl.Source.URI, cfg.Source.ConnectTimeout)
	if err != nil {
		fmt.Fprintf(stderr, "source unreachable (%v): lag and slot health not shown\n", err)
		return nil
	}
	return src
}

func closeStatusSource(ctx context.Context, src *pgx.Conn) {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	_ = src.Close(cctx)
}

// writeStatus prints the status tables: groups as store.Groups returned
// them, the rest read from store; src, when not nil, is the source that
// lag and slot health are read from.
func writeStatus(ctx context.Context, stdout io.Writer, cfg *config.Config, store statusCatalog, units unitCounter, groups []bucketstore.Group, src *pgx.Conn) error {
	// Error ages are measured on storage's clock, which stamped them.
	now, err := store.Now(ctx)
	if err != nil {
		now = time.Now()
	}
	stored, err := store.SinkPipelines(ctx)
	if err != nil {
		return err
	}
	if err := writePipelines(ctx, stdout, cfg, stored, groups, src, now); err != nil {
		return err
	}
	if len(groups) == 0 {
		fmt.Fprintln(stdout, "no replication groups yet: start `syncpipe run`")
		return nil
	}
	tw := tabwriter.NewWriter(stdout, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "GROUP\tSTATE\tSTORAGE\tSLOT\tSNAPSHOT\tCHECKPOINT\tLSN\tLAG\tSLOT HEALTH\tLAST ERROR")
	for _, g := range groups {
		snap := "running"
		if g.SnapshotDone {
			snap = "done"
		}
		lag, health := "?", "?"
		if src != nil {
			lag, health = sourceLag(ctx, src, g)
		}
		fmt.Fprintf(tw, "%d\t%s\tv%d\t%s\t%s\t%d\t%s\t%s\t%s\t%s\n", g.ID, g.State, g.StorageVersion, g.SlotName, snap, g.LastCheckpoint,
			g.LastCheckpointLSN, lag, health, errorCell(g, now))
	}
	_ = tw.Flush()
	if err := writeUnits(ctx, stdout, units); err != nil {
		return err
	}
	writeCompactions(stdout, groups)
	fmt.Fprintln(stdout)
	writeErrors(stdout, groups, now)
	writeRulesWarnings(stdout, groups)
	tw = tabwriter.NewWriter(stdout, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "GROUP\tTABLE\tRANGES DONE\tROWS\tESTIMATED\tPROGRESS")
	tables, err := store.SnapshotProgress(ctx)
	if err != nil {
		return err
	}
	for _, p := range tables {
		pct := "—"
		switch {
		case p.Resnapshot:
			pct = fmt.Sprintf("re-reading after a schema change (%d rows)", p.ResnapshotRows)
		case p.Done:
			pct = "done"
		case p.Estimated > 0:
			pct = fmt.Sprintf("%.1f%%", min(100, 100*float64(p.RowsDone)/float64(p.Estimated)))
		}
		fmt.Fprintf(tw, "%d\t%s\t%d/%d\t%d\t%d\t%s\n", p.Group, p.Table, p.RangesDone, p.Ranges, p.RowsDone, p.Estimated, pct)
	}
	return tw.Flush()
}

// openToolStore opens bucket storage for a one-shot command (status,
// compact): two connections are all it needs, and it creates or
// migrates nothing — storage no `run` has set up is reported as such.
func openToolStore(ctx context.Context, cfg *config.Config) (*bucketstore.Store, error) {
	return bucketstore.Open(ctx, bucketstore.Config{URI: cfg.Storage.URI, Schema: cfg.Storage.Schema, MaxConns: 2, NoMigrate: true,
		ConnectTimeout: cfg.Storage.ConnectTimeout})
}

// writeCompactions gives each group's last compaction (syncpipe compact).
func writeCompactions(w io.Writer, groups []bucketstore.Group) {
	for _, g := range groups {
		c := g.Compaction
		if c.At.IsZero() {
			continue
		}
		scope := "every bucket"
		if c.Partial {
			scope = "some buckets"
		}
		fmt.Fprintf(w, "group %d last compacted %s (%s, %s): %s\n", g.ID, c.At.UTC().Format("2006-01-02 15:04:05Z"),
			scope, c.Duration.Round(time.Millisecond), describeCompaction(c.CompactStats))
	}
}

// writeUnits reports the work units of all processes (leases in
// storage), and says so when snapshot work waits with no process on it —
// as under only replication:streaming processes.
func writeUnits(ctx context.Context, w io.Writer, units unitCounter) error {
	c, err := units.UnitCounts(ctx)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "work units (all processes): streams %d of %d held; snapshot units %d pending, %d active\n",
		c.ActiveStreams, c.TotalStreams, c.PendingSnapshots, c.ActiveSnapshots)
	if c.PendingSnapshots > 0 && c.ActiveSnapshots == 0 {
		fmt.Fprintln(w, "snapshot units wait and no process works on them: start a `syncpipe run --role replication` (or replication:snapshot) process")
	}
	return nil
}

// sourceLag returns how far the source's WAL is ahead of what storage
// holds, and the slot's health.
func sourceLag(ctx context.Context, src *pgx.Conn, g bucketstore.Group) (lag, health string) {
	lag, health = "?", "?"
	if g.Stream.LSN != 0 {
		if bytes, err := postgres.WALBehind(ctx, src, uint64(g.Stream.LSN)); err == nil {
			lag = fmt.Sprintf("%d bytes", bytes)
		}
		if g.Stream.TxnLSN != 0 {
			lag += fmt.Sprintf(" (applying a large transaction: %d changes stored)", g.Stream.TxnChanges)
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

// errorCellRunes is how much of an error the LAST ERROR column shows; the
// ERRORS section below the table has all of it.
const errorCellRunes = 60

// errorCell is the LAST ERROR column: the error's age and the start of its
// first line, e.g. "12s ago: publication \"syncpipe\" does not exist…".
func errorCell(g bucketstore.Group, now time.Time) string {
	if g.LastError == "" {
		return "—"
	}
	msg, _, cut := strings.Cut(strings.TrimSpace(g.LastError), "\n")
	if r := []rune(msg); len(r) > errorCellRunes {
		msg, cut = string(r[:errorCellRunes]), true
	}
	if cut {
		msg += "…"
	}
	return errorAge(g, now) + ": " + msg
}

// writeErrors lists every group's error in full, with when it happened:
// the remedy is usually at the end of the message, where the table cuts
// it off.
func writeErrors(w io.Writer, groups []bucketstore.Group, now time.Time) {
	header := false
	for _, g := range groups {
		if g.LastError == "" {
			continue
		}
		if !header {
			fmt.Fprintln(w, "ERRORS")
			header = true
		}
		when := errorAge(g, now)
		if !g.LastErrorAt.IsZero() {
			when += ", at " + g.LastErrorAt.UTC().Format("2006-01-02 15:04:05Z")
		}
		fmt.Fprintf(w, "group %d (%s), %s:\n", g.ID, g.State, when)
		for _, l := range strings.Split(strings.TrimSpace(g.LastError), "\n") {
			fmt.Fprintf(w, "    %s\n", l)
		}
	}
	if header {
		fmt.Fprintln(w)
	}
}

// writeRulesWarnings lists what the source lacks of each group's rules
// (a table or column they name), as stored when a reload applied them:
// a misspelled column drops a field from every client, so it is shown
// here for as long as those rules serve, not only logged once.
func writeRulesWarnings(w io.Writer, groups []bucketstore.Group) {
	header := false
	for _, g := range groups {
		if len(g.RulesWarnings) == 0 {
			continue
		}
		if !header {
			fmt.Fprintln(w, "SYNC RULES WARNINGS")
			header = true
		}
		fmt.Fprintf(w, "group %d (%s):\n", g.ID, g.State)
		for _, l := range g.RulesWarnings {
			fmt.Fprintf(w, "    %s\n", l)
		}
	}
	if header {
		fmt.Fprintln(w)
	}
}

// errorAge says how long ago the group's error was reported: "12s ago",
// "5m3s ago", "2h10m ago", "3d4h ago".
func errorAge(g bucketstore.Group, now time.Time) string {
	if g.LastErrorAt.IsZero() {
		return "at an unknown time"
	}
	d := max(now.Sub(g.LastErrorAt), 0).Round(time.Second)
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds ago", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm%ds ago", int(d.Minutes()), int(d.Seconds())%60)
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh%dm ago", int(d.Hours()), int(d.Minutes())%60)
	default:
		return fmt.Sprintf("%dd%dh ago", int(d.Hours())/24, int(d.Hours())%24)
	}
}
