package benchmarks

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/syncpipe/syncpipe/internal/pgcluster"
)

// P2 counts the statements storage executes with pg_stat_statements,
// preloaded into the scenario's cluster: every statement of the storage
// database, utility statements (COPY, BEGIN, COMMIT, SET) included, with
// its text, so lease statements are told apart from the rest by what they
// say — exact, where pg_stat_database's transaction counts or the leases
// table's tuple counters could only estimate them.

// StatementCounts are the statements a storage database executed.
type StatementCounts struct {
	// Total is every statement (pg_stat_statements calls).
	Total int64 `json:"total"`
	// Lease counts the lease statements: each single claim's transaction
	// (BEGIN, SET LOCAL lock_timeout, the INSERT … ON CONFLICT into leases,
	// COMMIT or ROLLBACK: a stream's), each batch claim of snapshot units
	// (one statement), the reads of leases, renewals and releases (UPDATE
	// leases), the lease session's opening read of pg_stat_activity and
	// its lock_timeout, and reads of the unit counts (autoscaling gauges,
	// when scraped).
	Lease int64 `json:"lease"`
	// Acquires are the claim statements, single and batched; Acquired the
	// single claims that took their lease (a batch takes several).
	Acquires int64 `json:"acquires"`
	Acquired int64 `json:"acquired"`
	Renewals int64 `json:"renewals"`
	Releases int64 `json:"releases"`
	// TotalTime and LeaseTime are their execution times (total_exec_time;
	// the claims' BEGIN and COMMIT counted pro rata).
	TotalTime time.Duration `json:"total_time_ns"`
	LeaseTime time.Duration `json:"lease_time_ns"`
}

func (c *StatementCounts) leaseShare() float64 {
	if c == nil || c.Total == 0 {
		return 0
	}
	return float64(c.Lease) / float64(c.Total)
}

func (c *StatementCounts) leaseTimeShare() float64 {
	if c == nil || c.TotalTime == 0 {
		return 0
	}
	return float64(c.LeaseTime) / float64(c.TotalTime)
}

// pingShare is the lease share with the empty `-- ping` every claim and
// renewal sends on the lease session first counted as a statement: a round
// trip, but nothing pg_stat_statements sees.
func (c *StatementCounts) pingShare() float64 {
	if c == nil || c.Total == 0 {
		return 0
	}
	pings := c.Acquires + c.Renewals
	return float64(c.Lease+pings) / float64(c.Total+pings)
}

// short is the counts in a log line's words.
func (c *StatementCounts) short(d time.Duration) string {
	if c == nil {
		return "statements not counted"
	}
	return fmt.Sprintf("%d storage statements (%.0f/s), %d lease statements (%.1f/s, %.2f %%; %d of %d claims taken)",
		c.Total, float64(c.Total)/d.Seconds(), c.Lease, float64(c.Lease)/d.Seconds(), 100*c.leaseShare(), c.Acquired, c.Acquires)
}

// statementSettings are the settings that preload pg_stat_statements, nil
// (and a note saying so) when the server has no such library.
func statementSettings() (map[string]string, string) {
	bindir, err := pgcluster.BinDir()
	if err == nil {
		if _, err = os.Stat(filepath.Join(filepath.Dir(bindir), "lib", "pg_stat_statements.so")); err == nil {
			settings := map[string]string{
				"shared_preload_libraries":          "'pg_stat_statements'",
				"pg_stat_statements.track":          "top",
				"pg_stat_statements.track_utility":  "on",
				"pg_stat_statements.max":            "10000",
				"pg_stat_statements.track_planning": "off",
				"pg_stat_statements.save":           "off",
			}
			return settings, "Statements: pg_stat_statements, preloaded in this scenario's cluster (track = top, utility statements tracked), counts every statement executed in the configuration's storage database up to the end of the timed span — COPYs, BEGIN/COMMIT, reads, fenced writes. " +
				"Lease statements are each batch claim of snapshot units (1 statement that reads the state of up to 32 queued units and takes up to 9 of them), each single claim's transaction (a stream's: BEGIN, SET LOCAL lock_timeout, the INSERT … ON CONFLICT into leases, COMMIT or ROLLBACK: 4 statements, taken or not), renewals and releases (UPDATE leases: a process renews all its snapshot leases in one statement per heartbeat; a finished range keeps its lease until it runs out), the lease session's opening read of pg_stat_activity and its SET lock_timeout, and any read of the unit counts (none here: no metrics listener). " +
				"Not counted: the fence check in every unit write (a sub-select of the write on leases, FOR SHARE, not a statement of its own), and the empty `-- ping` each single claim and renewal first sends on the lease session — a round trip but no statement (the share with the pings is given below). Execution time: pg_stat_statements total_exec_time, the claims' BEGIN and COMMIT pro rata."
		}
	}
	return nil, fmt.Sprintf("Statements were not counted: the server has no pg_stat_statements library (%v).", err)
}

// openStatements connects to the cluster's postgres database, where the
// extension's view is created: it shows the statements of every database.
func openStatements(ctx context.Context, uri string) (*pgx.Conn, error) {
	conn, err := pgx.Connect(ctx, uri)
	if err != nil {
		return nil, fmt.Errorf("connect for pg_stat_statements: %w", err)
	}
	if _, err := conn.Exec(ctx, "CREATE EXTENSION IF NOT EXISTS pg_stat_statements"); err != nil {
		conn.Close(context.WithoutCancel(ctx))
		return nil, fmt.Errorf("create pg_stat_statements: %w", err)
	}
	return conn, nil
}

// readStatements reads the pg_stat_statements entries of database db.
func readStatements(ctx context.Context, conn *pgx.Conn, db string) ([]statementStat, error) {
	rows, err := conn.Query(ctx, `SELECT s.query, s.calls, s.rows, s.total_exec_time
		FROM pg_stat_statements s JOIN pg_database d ON d.oid = s.dbid WHERE d.datname = $1`, db)
	if err != nil {
		return nil, fmt.Errorf("read pg_stat_statements: %w", err)
	}
	var stmts []statementStat
	for rows.Next() {
		var s statementStat
		var ms float64
		if err := rows.Scan(&s.query, &s.calls, &s.rows, &ms); err != nil {
			return nil, fmt.Errorf("read pg_stat_statements: %w", err)
		}
		s.time = time.Duration(ms * float64(time.Millisecond))
		stmts = append(stmts, s)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read pg_stat_statements: %w", err)
	}
	return stmts, nil
}

// statementMix lists the most frequent statements of stmts per unit (of
// units), with their kinds: what storage does for a snapshot unit.
func statementMix(stmts []statementStat, units int) string {
	var own []statementStat
	for _, s := range stmts {
		if !strings.HasPrefix(strings.TrimSpace(s.query), strings.TrimSpace(benchTag)) {
			own = append(own, s)
		}
	}
	slices.SortFunc(own, func(a, b statementStat) int { return cmp.Compare(b.calls, a.calls) })
	var b strings.Builder
	fmt.Fprintln(&b, "| calls per unit | kind | statement (normalised, shortened) |")
	fmt.Fprintln(&b, "| ---: | --- | --- |")
	for i, s := range own {
		if i == 14 {
			break
		}
		fmt.Fprintf(&b, "| %.2f | %s | `%s` |\n", float64(s.calls)/float64(max(units, 1)), statementKind(s.query), strings.ReplaceAll(shortStatement(s.query, 110), "|", "\\|"))
	}
	return strings.TrimRight(b.String(), "\n")
}

// statementStat is one pg_stat_statements entry.
type statementStat struct {
	query       string
	calls, rows int64
	time        time.Duration
}

// statementKind classifies a (normalised) statement text: acquire (the
// INSERT … ON CONFLICT of a claim), claim (its transaction's SET LOCAL
// lock_timeout), claimbatch (a claim of snapshot units: one statement
// that reads their states and takes several), holder (a read of leases:
// a unit's holder), renew, release, session (the lease session's opening
// read and lock_timeout), unitcounts (the autoscaling gauges' read), txn (BEGIN, COMMIT, ROLLBACK)
// or other.
func statementKind(q string) string {
	q = strings.Join(strings.Fields(strings.ToLower(q)), " ")
	q = strings.ReplaceAll(q, "syncpipe.leases", "leases")
	switch {
	case strings.HasPrefix(q, "insert into leases"):
		return "acquire"
	case strings.HasPrefix(q, "with u as") && strings.Contains(q, "insert into leases"):
		return "claimbatch"
	case strings.HasPrefix(q, "set local lock_timeout"):
		return "claim"
	case strings.HasPrefix(q, "update leases set expires_at = now() -"):
		return "release"
	case strings.HasPrefix(q, "update leases"):
		return "renew"
	case strings.HasPrefix(q, "select pid, backend_start from pg_stat_activity where pid = pg_backend_pid()"),
		strings.HasPrefix(q, "set lock_timeout"):
		return "session"
	case strings.HasPrefix(q, "select ") && (firstFrom(q) == "leases" || strings.Contains(q, " from leases ")):
		return "holder"
	case strings.HasPrefix(q, "with live as"):
		return "unitcounts"
	case q == "begin" || q == "commit" || q == "rollback" || strings.HasPrefix(q, "begin ") || strings.HasPrefix(q, "start transaction"):
		return "txn"
	}
	return "other"
}

// firstFrom is the relation after a statement's first FROM.
func firstFrom(q string) string {
	_, rest, ok := strings.Cut(q, " from ")
	if !ok {
		return ""
	}
	f := strings.Fields(rest)
	if len(f) == 0 {
		return ""
	}
	return strings.TrimSuffix(f[0], ";")
}

// countStatements adds up the entries. A claim is a transaction of its
// own, so each SET LOCAL lock_timeout brings a BEGIN and a COMMIT or
// ROLLBACK with it.
func countStatements(stmts []statementStat) *StatementCounts {
	c := &StatementCounts{}
	var txnCalls int64
	var txnTime time.Duration
	for _, s := range stmts {
		if strings.HasPrefix(strings.TrimSpace(s.query), strings.TrimSpace(benchTag)) {
			continue // the harness's own polling
		}
		c.Total += s.calls
		c.TotalTime += s.time
		switch statementKind(s.query) {
		case "acquire":
			c.Lease += s.calls
			c.Acquired += s.rows
			c.LeaseTime += s.time
		case "claimbatch":
			c.Acquires += s.calls // how many units each took is not counted
			c.Lease += s.calls
			c.LeaseTime += s.time
		case "claim":
			c.Acquires += s.calls
			c.Lease += 3 * s.calls // with its BEGIN and its COMMIT / ROLLBACK
			c.LeaseTime += s.time
		case "renew":
			c.Renewals += s.calls
			c.Lease += s.calls
			c.LeaseTime += s.time
		case "release":
			c.Releases += s.calls
			c.Lease += s.calls
			c.LeaseTime += s.time
		case "session", "holder", "unitcounts":
			c.Lease += s.calls
			c.LeaseTime += s.time
		case "txn":
			txnCalls += s.calls
			txnTime += s.time
		}
	}
	if txnCalls > 0 {
		c.LeaseTime += time.Duration(float64(txnTime) * float64(min(2*c.Acquires, txnCalls)) / float64(txnCalls))
	}
	return c
}

// logStatements logs the busiest statements of stmts (statementsSince's
// order) with their time per unit of work (units: changes, rows), so that
// a figure's cost per unit can be split by statement.
func logStatements(log io.Writer, title string, stmts []statementStat, units int64) {
	var b strings.Builder
	fmt.Fprintf(&b, "%s (pg_stat_statements; µs per unit of %d):", title, units)
	for _, s := range stmts[:min(len(stmts), 8)] {
		fmt.Fprintf(&b, "\n  %6.2f µs/unit  %7d calls  %8.1f rows/call  %s", float64(s.time.Microseconds())/float64(max(units, 1)), s.calls, float64(s.rows)/float64(max(s.calls, 1)), shortStatement(s.query, 100))
	}
	logf(log, "%s", b.String())
}

// shortStatement is a statement's text on one line, cut to at most n
// characters (with an ellipsis), for reports and logs.
func shortStatement(q string, n int) string {
	q = strings.Join(strings.Fields(q), " ")
	if r := []rune(q); len(r) > n {
		q = string(r[:n]) + "…"
	}
	return q
}
