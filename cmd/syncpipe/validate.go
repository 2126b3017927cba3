package main

import (
	"context"
	"flag"
	"fmt"
	"io"

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
		// Sinks register themselves by name; YAML may only name those.
		err = cfg.CheckSinks(sinks.Names())
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

func runValidate(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("validate", stderr)
	path := configFlag(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	cfg, err := loadConfig(*path, stderr)
	if err != nil {
		return err
	}
	rules, err := loadRules(cfg, "1")
	if err != nil {
		problems := ruleProblems(err)
		for _, p := range problems {
			fmt.Fprintln(stderr, p)
		}
		return usagef("%s: %d problem(s) in the sync rules", *path, len(problems))
	}
	fmt.Fprintf(stdout, "%s: ok (%d pipeline(s), %d bucket definition(s) over %d table(s))\n",
		*path, len(cfg.EffectivePipelines()), len(rules.Definitions()), len(rules.Tables()))
	return nil
}
