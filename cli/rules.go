package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/syncpipe/syncpipe/config"
	"github.com/syncpipe/syncpipe/replication"
	"github.com/syncpipe/syncpipe/stages/syncrules"
)

// loadRules compiles the configured sync rules for group. Errors keep the
// positions of the rules file, or of the config file for inline content.
func loadRules(cfg *config.Config, group string) (*syncrules.Rules, error) {
	src, err := cfg.SyncRules.Read()
	if err != nil {
		return nil, err
	}
	rules, err := syncrules.Parse(src, syncrules.Options{File: rulesFile(cfg), GroupID: group})
	if err != nil {
		var res syncrules.RuleErrors
		if errors.As(err, &res) {
			shiftRuleLines(cfg, src, res)
		}
		return nil, err
	}
	shiftRuleLines(cfg, src, rules.Warnings())
	return rules, nil
}

// rulesFile names the file rule problems point into: the rules file, or
// the config file for inline content.
func rulesFile(cfg *config.Config) string {
	if cfg.SyncRules.Path != "" {
		return cfg.SyncRules.Path
	}
	return cfg.Location("sync_rules.content").File
}

// shiftRuleLines turns rule positions of inline content (counted from its
// first line) into lines of the config file.
func shiftRuleLines(cfg *config.Config, src []byte, es syncrules.RuleErrors) {
	if cfg.SyncRules.Path != "" {
		return
	}
	offset := cfg.Location("sync_rules.content").Line - 1
	if len(src) > 0 && containsNewline(src) {
		offset++ // a block scalar starts on the line after its key
	}
	if offset <= 0 {
		return
	}
	for _, e := range es {
		if e.Line > 0 {
			e.Line += offset
		}
	}
}

func containsNewline(b []byte) bool {
	for _, c := range b {
		if c == '\n' {
			return true
		}
	}
	return false
}

// ruleProblems splits a rules error into one line per problem.
func ruleProblems(err error) []string {
	var res syncrules.RuleErrors
	if errors.As(err, &res) {
		out := make([]string, len(res))
		for i, e := range res {
			out[i] = e.Error()
		}
		return out
	}
	return []string{fmt.Sprint(err)}
}

// checkSource checks the rules against every pipeline's source
// (replication.CheckSource, as a SIGHUP reload does), with the warnings'
// positions in the config's files.
func checkSource(ctx context.Context, cfg *config.Config, rules *syncrules.Rules, timeout time.Duration) (replication.SourceReport, error) {
	src, err := cfg.SyncRules.Read()
	if err != nil {
		return replication.SourceReport{}, err
	}
	rep, err := replication.CheckSource(ctx, cfg, cfg.EffectivePipelines(), rules, timeout)
	if err != nil {
		return rep, err
	}
	shiftRuleLines(cfg, src, rep.Warnings)
	return rep, nil
}

// warnSourceSchema is run's start-up check of the rules against the
// source: one log line per problem, as the PowerSync service reports them
// (warnings; replication goes on). It returns the warnings when the source
// answered now, for replication to store with the rules' group (status
// shows them), and nil when it did not or the role reads no source (api).
// A source that cannot be read now is checked again in the background,
// with backoff, until it answers or stop is called (which waits for
// that): the warnings are then logged and handed to store.
func warnSourceSchema(ctx context.Context, cfg *config.Config, role string, log *slog.Logger,
	store func(ctx context.Context, warnings []string)) (warnings []string, stop func()) {
	rules, err := loadRules(cfg, "1")
	if role == "api" || err != nil {
		return nil, func() {} // nothing to check, or the rules' errors reported before
	}
	if warnings, ok := checkedSourceSchema(ctx, cfg, rules, log); ok {
		return warnings, func() {}
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for backoff := time.Second; ; backoff = min(2*backoff, maxSchemaCheckBackoff) {
			t := time.NewTimer(backoff)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
			if warnings, ok := checkedSourceSchema(ctx, cfg, rules, log); ok {
				store(ctx, warnings)
				return
			}
		}
	}()
	return nil, func() {
		cancel()
		<-done
	}
}

// maxSchemaCheckBackoff bounds the wait between checks of the rules
// against a source that did not answer.
const maxSchemaCheckBackoff = 30 * time.Second

// checkedSourceSchema checks the rules against the source and logs the
// warnings; ok is false when the source could not be read.
func checkedSourceSchema(ctx context.Context, cfg *config.Config, rules *syncrules.Rules, log *slog.Logger) (warnings []string, ok bool) {
	rep, err := checkSource(ctx, cfg, rules, cfg.Source.ConnectTimeout)
	if err != nil {
		log.Debug("sync rules not checked against the source yet", "err", err)
		return nil, false
	}
	return rep.LogWarnings(log, rules), true
}
