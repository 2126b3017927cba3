package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/syncpipe/syncpipe/config"
	"github.com/syncpipe/syncpipe/internal/pgauth"
	"github.com/syncpipe/syncpipe/replication"
	_ "github.com/syncpipe/syncpipe/sinks/bucketstore" // registers the bucketstore sink
	_ "github.com/syncpipe/syncpipe/sinks/jsonl"       // registers the jsonl sink
	"github.com/syncpipe/syncpipe/stages/syncrules"
)

// configFlag registers the --config flag every config-driven command takes.
func configFlag(fs *flag.FlagSet) *string {
	return fs.String("config", "", "path of the syncpipe YAML configuration (required)")
}

// loadConfig loads and validates the file, printing every problem with its
// position to stderr. Problems in the file are usage errors (exit code 2).
func loadConfig(path string, stderr io.Writer) (*config.Config, error) {
	if path == "" {
		return nil, usagef("--config is required")
	}
	cfg, err := config.Load(path)
	if err == nil {
		// Sinks register themselves by name, with the spec of their
		// settings; YAML may only name those, with those settings.
		err = replication.CheckSinks(cfg)
	}
	if err != nil {
		errs := config.AsErrors(err)
		for _, e := range errs {
			fmt.Fprintln(stderr, e.Error())
		}
		return nil, usagef("%s: %d problem(s) found", path, len(errs))
	}
	return cfg, nil
}

// validateSourceTimeout bounds validate's look at the source, so that an
// unreachable host costs seconds, not the configured connect timeout.
const validateSourceTimeout = 3 * time.Second

// oneLine joins a multi-line error (pgx lists every address it tried).
func oneLine(err error) string {
	return strings.Join(strings.Fields(strings.ReplaceAll(err.Error(), "\n", " ; ")), " ")
}

func runValidate(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("validate", stderr)
	path := configFlag(fs)
	offline := fs.Bool("offline", false, "judge the file alone, connecting nowhere (without it, validate also checks the sync rules, and what run needs, against the source)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	cfg, err := loadConfig(*path, stderr)
	if err != nil {
		return err
	}
	// What `run` (role all) refuses at start-up, validate refuses too;
	// every problem is listed at once.
	var problems []string
	if err := cfg.ValidateServe(); err != nil {
		for _, e := range config.AsErrors(err) {
			problems = append(problems, e.Error())
		}
	}
	rules, err := loadRules(cfg, "1")
	if err != nil {
		problems = append(problems, ruleProblems(err)...)
	}
	if len(problems) > 0 {
		for _, p := range problems {
			fmt.Fprintln(stderr, p)
		}
		return usagef("%s: %d problem(s) found", *path, len(problems))
	}
	warnings := rules.Warnings()
	checked := "not checked against the source (--offline)"
	if !*offline {
		var rep replication.SourceReport
		rep, checked, err = validateSource(ctx, cfg, *path, rules, stderr)
		if err != nil {
			return err
		}
		warnings = append(warnings, rep.Warnings...)
		for _, p := range rep.Problems {
			problems = append(problems, fmt.Sprintf("%s: source: %v", *path, p))
		}
	}
	for _, w := range warnings {
		fmt.Fprintln(stderr, w.Error())
	}
	if len(problems) > 0 {
		for _, p := range problems {
			fmt.Fprintln(stderr, p)
		}
		return usagef("%s: %d problem(s) found: `syncpipe run` would refuse this source", *path, len(problems))
	}
	what := fmt.Sprintf("%d bucket definition(s)", len(rules.Definitions()))
	if rules.StreamsLine() > 0 {
		what = fmt.Sprintf("%d sync stream(s)", len(rules.StreamNames()))
	}
	fmt.Fprintf(stdout, "%s: ok (%d pipeline(s), %s over %d table(s), %d warning(s), %s)\n",
		*path, len(cfg.EffectivePipelines()), what, len(rules.Tables()), len(warnings), checked)
	return nil
}

// validateSource checks the rules and what `run` needs against the
// sources (checkSource) and says how far it got. A source that was not
// reached (refused, DNS, timeout) is a warning — the file may be judged on
// a machine that cannot reach it — and the file is judged alone; one
// whose URI or server said no (malformed URI, credentials, TLS) is a
// usage error.
func validateSource(ctx context.Context, cfg *config.Config, path string, rules *syncrules.Rules, stderr io.Writer) (replication.SourceReport, string, error) {
	rep, err := checkSource(ctx, cfg, rules, min(cfg.Source.ConnectTimeout, validateSourceTimeout))
	var un *replication.UnreachedSource
	switch {
	case errors.As(err, &un):
		f := pgauth.Explain(un.Err, un.Key)
		if noHost(un.URI) {
			f = pgauth.Failure{Fatal: true, Reason: "invalid URI in " + un.Key +
				": it names no host (and PGHOST is not set), and the default local socket does not answer: write postgres://user:password@host:5432/database"}
		}
		if f.Fatal {
			fmt.Fprintf(stderr, "%s: cannot connect to the source: %s\n", path, f.Reason)
			return rep, "", usagef("%s: 1 problem(s) found", path)
		}
		fmt.Fprintf(stderr, "%s: source not checked (%s); judged the file alone (--offline skips this)\n", path, f.Reason)
		return rep, "source not reachable", nil
	case err != nil:
		fmt.Fprintf(stderr, "%s: source not checked (%s); judged the file alone (--offline skips this)\n", path, oneLine(err))
		return rep, "source not checked", nil
	}
	return rep, "checked against the source", nil
}

// noHost reports a URI that names no host, in itself or in PGHOST: libpq
// and pgx then try a local socket.
func noHost(uri string) bool {
	u, err := url.Parse(uri)
	return err == nil && u.Host == "" && u.Query().Get("host") == "" && os.Getenv("PGHOST") == ""
}
