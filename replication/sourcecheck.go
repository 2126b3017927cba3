package replication

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/syncpipe/syncpipe/config"
	"github.com/syncpipe/syncpipe/sources/postgres"
	"github.com/syncpipe/syncpipe/stages/syncrules"
)

// SourceReport is what the sources say of a rules version (CheckSource).
type SourceReport struct {
	// Warnings are the tables and columns the rules name that a source
	// lacks, at their positions in the rules: as with PowerSync, they do
	// not stop the rules.
	Warnings syncrules.RuleErrors
	// Problems are what replication refuses (Preflight's checks: keys and
	// replica identity, the publication, wal_level, the REPLICATION
	// attribute), one line each with the remedy.
	Problems []error
}

// UnreachedSource is CheckSource's error for a source it could not
// connect to; Key is the configuration key holding its URI.
type UnreachedSource struct {
	Key, URI string
	Err      error
}

// Error names the key and the connection's error.
func (e *UnreachedSource) Error() string { return fmt.Sprintf("%s: %v", e.Key, e.Err) }

// Unwrap returns the connection's error.
func (e *UnreachedSource) Unwrap() error { return e.Err }

// sourceCheck is what CheckSource asks of one source database.
type sourceCheck struct {
	uri, key string
	lookups  []string            // rule tables to read the columns of
	pubs     map[string][]string // publication → the tables to preflight with it
}

// LogWarnings logs rules' own warnings and rep's at WARN, one line each
// ("sync rules: file:line:col: …"), and returns them as the lines status
// shows with the rules' group: start-up and a reload report them alike.
func (rep SourceReport) LogWarnings(log *slog.Logger, rules *syncrules.Rules) []string {
	warnings := []string{}
	for _, w := range slices.Concat(rules.Warnings(), rep.Warnings) {
		log.Warn("sync rules: " + w.Error())
		warnings = append(warnings, w.Error())
	}
	return warnings
}

// CheckSource checks rules against the sources of pipelines, as `syncpipe
// validate`, run's start-up and a SIGHUP reload all do: the tables and
// columns the rules name (warnings), and what replication needs of each
// source: Preflight as the pipelines run it, as a dry run, so that a
// publication run would create (or add tables to) passes when the role
// may do that. Each source is given timeout. A rule table no pipeline
// carries is still looked up in the source section's database, or it
// would be reported missing.
func CheckSource(ctx context.Context, cfg *config.Config, pipelines []config.Pipeline, rules *syncrules.Rules, timeout time.Duration) (SourceReport, error) {
	var checks []*sourceCheck
	source := func(uri string) *sourceCheck {
		for _, c := range checks {
			if c.uri == uri {
				return c
			}
		}
		c := &sourceCheck{uri: uri, key: uriKey(cfg, uri), pubs: map[string][]string{}}
		checks = append(checks, c)
		return c
	}
	carried := map[string]bool{}
	for _, pl := range pipelines {
		c := source(pl.Source.URI)
		names := pipelineTables(pl, rules)
		c.pubs[pl.Source.Publication] = union(c.pubs[pl.Source.Publication], names)
		c.lookups = union(c.lookups, names)
		for _, t := range names {
			carried[t] = true
		}
	}
	for _, t := range rules.Tables() {
		if !carried[t.String()] {
			c := source(cfg.Source.URI)
			c.lookups = union(c.lookups, []string{t.String()})
		}
	}
	var rep SourceReport
	schema := syncrules.Schema{}
	for _, c := range checks {
		problems, err := c.run(ctx, timeout, schema)
		if err != nil {
			return SourceReport{}, err
		}
		rep.Problems = append(rep.Problems, problems...)
	}
	rep.Warnings = rules.CheckSchema(schema)
	return rep, nil
}

// run reads the columns of c's tables into schema and preflights each
// publication: the problems, without the missing tables (CheckSchema
// warns of those, at their place in the rules).
func (c *sourceCheck) run(ctx context.Context, timeout time.Duration, schema syncrules.Schema) ([]error, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	conn, err := postgres.Connect(ctx, c.uri, timeout)
	if err != nil {
		return nil, &UnreachedSource{Key: c.key, URI: c.uri, Err: err}
	}
	defer closeConn(conn)
	if err := readColumns(ctx, conn, c.lookups, schema); err != nil {
		return nil, err
	}
	var problems []error
	pubs := make([]string, 0, len(c.pubs))
	for p := range c.pubs {
		pubs = append(pubs, p)
	}
	slices.Sort(pubs)
	for _, p := range pubs {
		err := postgres.Preflight(ctx, conn, postgres.PreflightOptions{Publication: p, Tables: c.pubs[p], CreatePublication: true, DryRun: true})
		for _, e := range splitJoined(err) {
			if !errors.Is(e, postgres.ErrTableNotFound) {
				problems = append(problems, e)
			}
		}
	}
	return problems, nil
}

// readColumns adds the columns of tables to schema. A table that exists
// but cannot be replicated (no key) is added with unknown columns:
// Preflight reports that problem.
func readColumns(ctx context.Context, conn *pgx.Conn, tables []string, schema syncrules.Schema) error {
	for _, t := range tables {
		infos, err := postgres.Discover(ctx, conn, []string{t})
		switch {
		case len(infos) == 1:
			cols := make([]string, len(infos[0].Columns))
			for i, c := range infos[0].Columns {
				cols[i] = c.Name
			}
			schema[t] = cols
		case errors.Is(err, postgres.ErrTableNotFound):
			// absent from the schema: CheckSchema reports it
		case errors.Is(err, postgres.ErrNoKey):
			schema[t] = nil
		case err != nil:
			return fmt.Errorf("read the source schema: %w", err)
		}
	}
	return nil
}

// uriKey names the configuration key of a source URI.
func uriKey(cfg *config.Config, uri string) string {
	if uri == cfg.Source.URI {
		return "source.uri"
	}
	for i, p := range cfg.Pipelines {
		if p.Source.URI == uri {
			return fmt.Sprintf("pipelines[%d].source.uri", i)
		}
	}
	return "source.uri"
}

// splitJoined returns the errors (nested) errors.Joins hold, or err alone.
func splitJoined(err error) []error {
	if err == nil {
		return nil
	}
	j, ok := err.(interface{ Unwrap() []error })
	if !ok {
		return []error{err}
	}
	var out []error
	for _, e := range j.Unwrap() {
		out = append(out, splitJoined(e)...)
	}
	return out
}

// union appends to a the strings of b it lacks.
func union(a, b []string) []string {
	for _, s := range b {
		if !slices.Contains(a, s) {
			a = append(a, s)
		}
	}
	return a
}
