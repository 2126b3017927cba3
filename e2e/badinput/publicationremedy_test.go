package badinput

import (
	"context"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/syncpipe/syncpipe/internal/testkit/harness"
	"github.com/syncpipe/syncpipe/internal/todos"
)

// TestPublicationRemedyAgrees: after `DROP PUBLICATION syncpipe` under a
// running syncpipe, every log line that says how to fix the publication
// gives the same statement — CREATE PUBLICATION syncpipe FOR TABLE the
// rules' tables (or their placeholder where the tables are not known) —
// and none says FOR ALL TABLES (before, the stream's error said FOR ALL
// TABLES while the start-up check said FOR TABLE public.lists, …).
func TestPublicationRemedyAgrees(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	e := harness.New(t, harness.Options{Data: &todos.Size{Lists: 2, Todos: 4, Seed: 3}})
	e.Start()
	e.WaitCaughtUp(ctx)
	e.StopAll()
	e.Exec(ctx, `DROP PUBLICATION syncpipe`)
	e.Start()
	e.Exec(ctx, `UPDATE lists SET name = 'after the drop'`)
	// The stream's error and the stored one (from the start-up check of
	// the group that replaces this one) both name a remedy.
	remedy := regexp.MustCompile(`CREATE PUBLICATION [^:;"\\]*`)
	e.WaitFor(ctx, "the stored publication error", func() bool {
		return e.Logged(`"msg":"replication needs attention"`) && len(remedy.FindAllString(e.TailLogs(1<<20), -1)) >= 2
	})
	want := regexp.MustCompile(`^CREATE PUBLICATION syncpipe FOR TABLE (public\.lists, public\.todos|<the sync-rules tables>)`)
	found := remedy.FindAllString(e.TailLogs(1<<20), -1)
	t.Logf("remedies logged: %q", found)
	for _, r := range found {
		if !want.MatchString(r) || strings.Contains(r, "ALL TABLES") {
			t.Errorf("remedy %q, want one matching %s", r, want)
		}
	}
}
