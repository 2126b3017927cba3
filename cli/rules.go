package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/syncpipe/syncpipe/config"
	"github.com/syncpipe/syncpipe/sources/postgres"
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

// checkSourceSchema checks the rules against the tables and columns of
// their sources, as PowerSync's validation does: each pipeline's source
// is asked (sources/postgres.Discover) for the rule tables that pipeline
// carries. The result holds warnings (a missing table or column does not
// stop the rules, PowerSync only warns) with positions in the config's
// files; err reports a source that could not be read.
func checkSourceSchema(ctx context.Context, cfg *config.Config, rules *syncrules.Rules, timeout time.Duration) (syncrules.RuleErrors, error) {
	src, err := cfg.SyncRules.Read()
	if err != nil {
		return nil, err
	}
	byURI := map[string][]string{}
	var uris []string
	seen := map[string]bool{}
	for _, p := range cfg.EffectivePipelines() {
		for _, t := range rules.Tables() {
			if seen[t.String()] || (len(p.Tables) > 0 && !pipelineHas(p, t)) {
				continue
			}
			seen[t.String()] = true
			if byURI[p.Source.URI] == nil {
				uris = append(uris, p.Source.URI)
			}
			byURI[p.Source.URI] = append(byURI[p.Source.URI], t.String())
		}
	}
	// A rule table no pipeline carries is still looked up, in the source
	// section's database: otherwise it would be reported missing.
	for _, t := range rules.Tables() {
		if !seen[t.String()] {
			uri := cfg.Source.URI
			if byURI[uri] == nil {
				uris = append(uris, uri)
			}
			byURI[uri] = append(byURI[uri], t.String())
		}
	}
	schema := syncrules.Schema{}
	for _, uri := range uris {
		if err := discoverTables(ctx, uri, timeout, byURI[uri], schema); err != nil {
			return nil, err
		}
	}
	warnings := rules.CheckSchema(schema)
	shiftRuleLines(cfg, src, warnings)
	return warnings, nil
}

// pipelineHas reports whether a pipeline with explicit tables carries t.
func pipelineHas(p config.Pipeline, t syncrules.TableName) bool {
	for _, name := range p.Tables {
		if name == t.String() || (t.Schema == "public" && name == t.Name) {
			return true
		}
	}
	return false
}

// discoverTables adds the columns of tables to schema. A table that
// exists but cannot be replicated (no key) is added with unknown columns:
// replication reports that problem itself.
func discoverTables(ctx context.Context, uri string, timeout time.Duration, tables []string, schema syncrules.Schema) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	conn, err := postgres.Connect(ctx, uri, timeout)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
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

// warnSourceSchema is run's start-up check of the rules against the
// source: one log line per problem, as the PowerSync service reports them
// (warnings; replication goes on). The API role reads no source. A source
// that cannot be read now is checked again in the background, with
// backoff, until it answers or stop is called (which waits for that), so
// the warnings come when the source does.
func warnSourceSchema(ctx context.Context, cfg *config.Config, role string, log *slog.Logger) (stop func()) {
	rules, err := loadRules(cfg, "1")
	if role == "api" || err != nil || checkedSourceSchema(ctx, cfg, rules, log) {
		return func() {} // nothing to check, the rules' errors reported before, or checked
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
			if checkedSourceSchema(ctx, cfg, rules, log) {
				return
			}
		}
	}()
	return func() {
		cancel()
		<-done
	}
}

// maxSchemaCheckBackoff bounds the wait between checks of the rules
// against a source that did not answer.
const maxSchemaCheckBackoff = 30 * time.Second

// checkedSourceSchema checks the rules against the source and logs the
// warnings; false when the source could not be read.
func checkedSourceSchema(ctx context.Context, cfg *config.Config, rules *syncrules.Rules, log *slog.Logger) bool {
	warnings, err := checkSourceSchema(ctx, cfg, rules, cfg.Source.ConnectTimeout)
	if err != nil {
		log.Debug("sync rules not checked against the source yet", "err", err)
		return false
	}
	for _, w := range append(rules.Warnings(), warnings...) {
		log.Warn("sync rules: " + w.Error())
	}
	return true
}
