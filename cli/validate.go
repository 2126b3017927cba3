package cli

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/syncpipe/syncpipe/config"
	"github.com/syncpipe/syncpipe/sinks"
	_ "github.com/syncpipe/syncpipe/sinks/bucketstore" // registers the bucketstore sink
	_ "github.com/syncpipe/syncpipe/sinks/jsonl"       // registers the jsonl sink
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
		errs := append(config.AsErrors(cfg.CheckSinks(sinks.Names())), config.AsErrors(sinks.CheckSettings(cfg))...)
		if len(errs) > 0 {
			errs.Sort()
			err = errs
		}
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
	offline := fs.Bool("offline", false, "judge the file alone: do not check the sync rules against the source's tables and columns")
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
		sw, err := checkSourceSchema(ctx, cfg, rules, min(cfg.Source.ConnectTimeout, validateSourceTimeout))
		if err != nil {
			fmt.Fprintf(stderr, "%s: source not checked (%s); judged the file alone (--offline skips this)\n", *path, oneLine(err))
			checked = "source not reachable"
		} else {
			warnings = append(warnings, sw...)
			checked = "checked against the source"
		}
	}
	for _, w := range warnings {
		fmt.Fprintln(stderr, w.Error())
	}
	what := fmt.Sprintf("%d bucket definition(s)", len(rules.Definitions()))
	if rules.StreamsLine() > 0 {
		what = fmt.Sprintf("%d sync stream(s)", len(rules.StreamNames()))
	}
	fmt.Fprintf(stdout, "%s: ok (%d pipeline(s), %s over %d table(s), %d warning(s), %s)\n",
		*path, len(cfg.EffectivePipelines()), what, len(rules.Tables()), len(warnings), checked)
	return nil
}
