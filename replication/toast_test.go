package replication

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/syncpipe/syncpipe/config"
	"github.com/syncpipe/syncpipe/internal/testkit/bucketcheck"
	"github.com/syncpipe/syncpipe/internal/testkit/pgtest"
	"github.com/syncpipe/syncpipe/sinks/bucketstore"
)

const toastSchema = `
CREATE TABLE docs (id int PRIMARY KEY, body text, j jsonb, rev int);
ALTER TABLE docs ALTER COLUMN body SET STORAGE EXTERNAL, ALTER COLUMN j SET STORAGE EXTERNAL;
INSERT INTO docs SELECT i, repeat('original-' || i || ' ', 400), NULL, 1 FROM generate_series(1, 4) i;
INSERT INTO docs SELECT 5, NULL, (SELECT jsonb_agg(1) FROM generate_series(1, 175)), 1;
INSERT INTO docs VALUES (6, 'small', NULL, 1);
`

const toastRules = `bucket_definitions:
  all:
    data:
      - SELECT id, body, j, rev FROM docs
`

// TestUnchangedToastMergedFromStorage checks that an UPDATE which leaves a
// TOASTed value unchanged gets it from the row's previous state in the
// stream, not from the source's current row: with the replicator stopped,
// each row goes through several versions; the ops written for every
// version must show the value that version had, which a re-read of the
// source (already at the last version) would get wrong. With one source
// transaction per storage batch every version gets its own ops; with all
// of them in one batch, the writer keeps only each row's last version and
// the merges come from the batch itself.
func TestUnchangedToastMergedFromStorage(t *testing.T) {
	t.Parallel()
	t.Run("one transaction per batch", func(t *testing.T) {
		t.Parallel()
		testUnchangedToast(t, "batch_max_rows: 1", map[string][]string{
			"1": {"rev 1 body original-1", "rev 2 body original-1", "rev 2 body second-1", "rev 3 body second-1"},
			"2": {"rev 1 body original-2", "rev 2 body second-2", "rev 3 body second-2", "rev 4 body third-2"},
		})
	})
	t.Run("one batch", func(t *testing.T) {
		t.Parallel()
		// Nine rows and a wait far longer than the stream needs to read
		// them: the nine updates fill exactly one batch whatever the
		// timing (with batch_max_wait 0 the stream would write whatever
		// had arrived whenever the writer was free).
		testUnchangedToast(t, "batch_max_rows: 9, batch_max_wait: 5s", map[string][]string{
			"1": {"rev 1 body original-1", "rev 3 body second-1"},
			"2": {"rev 1 body original-2", "rev 4 body third-2"},
		})
	})
}

func testUnchangedToast(t *testing.T, streamCfg string, want map[string][]string) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	source, storage := pgtest.NewDB(t), pgtest.NewDB(t)
	src := pgtest.Connect(t, source)
	if _, err := src.Exec(ctx, toastSchema); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.LoadBytes("toast.yaml", fmt.Appendf(nil, "source: {uri: %q}\nstorage: {uri: %q}\nreplication: {stream: {%s}}\nsync_rules:\n  content: |\n%s",
		source, storage, streamCfg, indentLines(toastRules, "    ")))
	if err != nil {
		t.Fatal(err)
	}
	store, err := bucketstore.Open(ctx, bucketstore.Config{URI: storage})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	e := &env{source: source, storage: storage, src: src, store: store, cfg: cfg}
	run := func() (*Replicator, func()) {
		rctx, stop := context.WithCancel(ctx)
		r := New(Options{Config: cfg, Store: store})
		errc := make(chan error, 1)
		go func() { errc <- r.Run(rctx) }()
		e.waitCheckpoint(t, ctx)
		return r, func() {
			stop()
			if err := <-errc; err != nil && rctx.Err() == nil {
				t.Errorf("replicator: %v", err)
			}
		}
	}
	_, stop := run()
	stop()

	// Versions per row while nothing replicates (rev numbers them):
	//   1: rev 2 (body unchanged), then body B2, then rev 3 (body B2 unchanged)
	//   2: body B2, rev 3 (unchanged B2), body B3: the middle version's body
	//      is B2 although the source has B3 by the time the stream reads it
	//   3: key change to 30 with body unchanged
	//   5: rev 2 with a jsonb value unchanged
	//   6: small row: nothing TOASTed, nothing stored, sent whole
	for _, q := range []string{
		`UPDATE docs SET rev = 2 WHERE id = 1`,
		`UPDATE docs SET body = repeat('second-1 ', 400) WHERE id = 1`,
		`UPDATE docs SET rev = 3 WHERE id = 1`,
		`UPDATE docs SET body = repeat('second-2 ', 400), rev = 2 WHERE id = 2`,
		`UPDATE docs SET rev = 3 WHERE id = 2`,
		`UPDATE docs SET body = repeat('third-2 ', 400), rev = 4 WHERE id = 2`,
		`UPDATE docs SET id = 30, rev = 2 WHERE id = 3`,
		`UPDATE docs SET rev = 2 WHERE id = 5`,
		`UPDATE docs SET rev = 2 WHERE id = 6`,
	} {
		if _, err := src.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	r, stop := run()
	stop()

	// Every PUT of a doc, in op order: the body each version had.
	rows, err := store.Pool().Query(ctx, `SELECT object_id, data FROM syncpipe.bucket_ops WHERE op = 1 ORDER BY op_id`)
	if err != nil {
		t.Fatal(err)
	}
	history := map[string][]string{}
	for rows.Next() {
		var id, data string
		if err := rows.Scan(&id, &data); err != nil {
			t.Fatal(err)
		}
		var doc struct {
			Body *string
			J    *string
			Rev  int
		}
		if err := json.Unmarshal([]byte(data), &doc); err != nil {
			t.Fatal(err)
		}
		v := fmt.Sprintf("rev %d", doc.Rev)
		if doc.Body != nil {
			v += " body " + strings.Fields(*doc.Body)[0]
		}
		if doc.J != nil {
			v += fmt.Sprintf(" j %d chars", len(*doc.J))
		}
		history[id] = append(history[id], v)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	want["30"] = []string{"rev 2 body original-3"}
	want["5"] = []string{"rev 1 j 525 chars", "rev 2 j 525 chars"}
	want["6"] = []string{"rev 1 body small", "rev 2 body small"}
	for id, w := range want {
		if got := history[id]; strings.Join(got, " | ") != strings.Join(w, " | ") {
			t.Errorf("doc %s versions:\n got %q\nwant %q", id, got, w)
		}
	}
	if n, re := r.toastMerged.Load(), r.toastReread.Load(); n != 5 || re != 0 {
		t.Errorf("%d updates merged from stored row data and %d re-read from the source, want 5 (docs 1 twice, 2, 30 and 5) and 0", n, re)
	}

	// And the bucket equals the source.
	got, err := bucketcheck.Stored(ctx, store.Pool(), "syncpipe")
	if err != nil {
		t.Fatal(err)
	}
	wantState := bucketcheck.State{"1#all[]": {}}
	qrows, err := src.Query(ctx, `SELECT id::text, json_build_object('id', id, 'body', body, 'j', j::text, 'rev', rev)::text FROM docs`)
	if err != nil {
		t.Fatal(err)
	}
	for qrows.Next() {
		var id, data string
		if err := qrows.Scan(&id, &data); err != nil {
			t.Fatal(err)
		}
		wantState["1#all[]"]["docs/"+id] = data
	}
	if err := bucketcheck.Diff(got, wantState); err != nil {
		t.Fatal(err)
	}
}
