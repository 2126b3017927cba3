package main

import (
	"errors"
	"fmt"

	"github.com/syncpipe/syncpipe/config"
	"github.com/syncpipe/syncpipe/stages/syncrules"
)

// loadRules compiles the configured sync rules for group. Errors keep the
// positions of the rules file, or of the config file for inline content.
func loadRules(cfg *config.Config, group string) (*syncrules.Rules, error) {
	src, err := cfg.SyncRules.Read()
	if err != nil {
		return nil, err
	}
	file, offset := cfg.SyncRules.Path, 0
	if file == "" {
		loc := cfg.Location("sync_rules.content")
		file = loc.File
		offset = loc.Line - 1
		if len(src) > 0 && containsNewline(src) {
			offset = loc.Line // a block scalar starts on the line after its key
		}
	}
	rules, err := syncrules.Parse(src, syncrules.Options{File: file, GroupID: group})
	if err != nil {
		var res syncrules.RuleErrors
		if errors.As(err, &res) && offset > 0 {
			for _, e := range res {
				if e.Line > 0 {
					e.Line += offset
				}
			}
		}
		return nil, err
	}
	return rules, nil
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
