package cli

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/syncpipe/syncpipe/config"
	"github.com/syncpipe/syncpipe/replication"
	"github.com/syncpipe/syncpipe/sinks/bucketstore"
)

// What status and compact print, rendered in-process: no database and no
// child process is needed. (Moved here from status_test.go and
// compact_test.go, whose child-process tests are now in e2e/commands.)

// fakeStatusStorage is statusCatalog and unitCounter held in memory, so that status output
// is tested without PostgreSQL.
type fakeStatusStorage struct {
	groups    []bucketstore.Group
	progress  []bucketstore.TableProgress
	pipelines []bucketstore.SinkPipeline
	now       time.Time
	units     bucketstore.UnitCounts
}

func (f *fakeStatusStorage) Groups(context.Context) ([]bucketstore.Group, error) {
	return f.groups, nil
}
func (f *fakeStatusStorage) SnapshotProgress(context.Context) ([]bucketstore.TableProgress, error) {
	return f.progress, nil
}
func (f *fakeStatusStorage) SinkPipelines(context.Context) ([]bucketstore.SinkPipeline, error) {
	return f.pipelines, nil
}
func (f *fakeStatusStorage) Now(context.Context) (time.Time, error) { return f.now, nil }
func (f *fakeStatusStorage) UnitCounts(context.Context) (bucketstore.UnitCounts, error) {
	return f.units, nil
}

// TestStatusOutputFromStorage renders status from a fake storage with no
// source: both pipelines, the group with its error's age, the error in
// full under ERRORS, and a table's snapshot percentage.
func TestStatusOutputFromStorage(t *testing.T) {
	path := filepath.Join(t.TempDir(), "syncpipe.yaml")
	if err := os.WriteFile(path, []byte(`source: {uri: "postgres://app@127.0.0.1:1/app"}
storage: {uri: "postgres://app@127.0.0.1:1/syncpipe"}
sync_rules: {content: "bucket_definitions: {global: {data: [SELECT * FROM todos]}}"}
pipelines:
  - name: main
  - name: audit
    tables: [todos]
    sink: {type: jsonl, settings: {dir: out}}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	st := &fakeStatusStorage{now: now,
		groups: []bucketstore.Group{{ID: 3, State: bucketstore.StateActive, StorageVersion: 2, SlotName: "syncpipe_3_ab12", SnapshotDone: true,
			LastCheckpoint: 7, LastCheckpointLSN: 0x16B3748, Stream: bucketstore.StreamProgress{LSN: 0x16B3748},
			LastError: "publication \"syncpipe\" does not exist\nremedy: CREATE PUBLICATION syncpipe FOR ALL TABLES", LastErrorAt: now.Add(-12 * time.Second),
			RulesWarnings: []string{`rules.yaml:4:26: bucket "global" data[0]: warning: column "ownr_id" does not exist in table public.lists`}}},
		progress:  []bucketstore.TableProgress{{Group: 3, Table: "public.todos", Ranges: 4, RangesDone: 1, RowsDone: 250, Estimated: 1000}},
		pipelines: []bucketstore.SinkPipeline{{Name: "audit", Version: 2, SnapshotDone: true, StreamLSN: 0x2000000}},
		units:     bucketstore.UnitCounts{TotalStreams: 1, PendingSnapshots: 3},
	}
	var out strings.Builder
	if err := writeStatus(context.Background(), &out, cfg, st, st, st.groups, nil); err != nil {
		t.Fatal(err)
	}
	lines := map[string]bool{} // every line with its cells' spacing removed
	for _, l := range strings.Split(out.String(), "\n") {
		lines[strings.Join(strings.Fields(l), " ")] = true
	}
	for _, want := range []string{
		"main bucketstore all rule tables group 3 done 0/16B3748 ? 12s ago: publication \"syncpipe\" does not exist…",
		"audit jsonl todos 2 done 0/2000000 ? —",
		"3 ACTIVE v2 syncpipe_3_ab12 done 7 0/16B3748 ? ? 12s ago: publication \"syncpipe\" does not exist…",
		"3 public.todos 1/4 250 1000 25.0%",
		"work units (all processes): streams 0 of 1 held; snapshot units 3 pending, 0 active",
		"snapshot units wait and no process works on them: start a `syncpipe run --role replication` (or replication:snapshot) process",
	} {
		if !lines[want] {
			t.Errorf("status lacks the line %q:\n%s", want, out.String())
		}
	}
	for _, want := range []string{"ERRORS\ngroup 3 (ACTIVE), 12s ago, at 2026-03-01 11:59:48Z:\n", "    remedy: CREATE PUBLICATION syncpipe FOR ALL TABLES\n",
		"SYNC RULES WARNINGS\ngroup 3 (ACTIVE):\n    rules.yaml:4:26: bucket \"global\" data[0]: warning: column \"ownr_id\" does not exist in table public.lists\n"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("status output lacks %q:\n%s", want, out.String())
		}
	}
}

// TestFormatBytes: the units compact and status print bytes in.
func TestFormatBytes(t *testing.T) {
	for n, want := range map[int64]string{0: "0 B", 1023: "1023 B", 1024: "1.0 KiB", 12_900_000: "12.3 MiB", 5 << 30: "5.0 GiB", 3 << 60: "3.0 EiB"} {
		if got := formatBytes(n); got != want {
			t.Errorf("formatBytes(%d) = %q, want %q", n, got, want)
		}
	}
}

// TestStatusOutputFromStateFiles renders status for a config without
// storage: each pipeline from its state file (one never started), and a
// stored error in full below the table.
func TestStatusOutputFromStateFiles(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	path := filepath.Join(dir, "syncpipe.yaml")
	if err := os.WriteFile(path, []byte(`source: {uri: "postgres://app@127.0.0.1:1/app"}
sync_rules: {content: "bucket_definitions: {global: {data: [SELECT * FROM todos]}}"}
state_dir: state
pipelines:
  - name: audit
    tables: [todos]
    sink: {type: jsonl, settings: {dir: audit}}
  - name: later
    sink: {type: jsonl, settings: {dir: later}}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	files := replication.NewStateFiles(cfg.StateFile)
	if err := files.StartSinkPipelineVersion(ctx, bucketstore.SinkPipeline{Name: "audit", Version: 2, SinkType: "jsonl", Tables: []string{"todos"}}); err != nil {
		t.Fatal(err)
	}
	for _, err := range []error{files.MarkSinkPipelineSnapshotDone(ctx, "audit"), files.SetSinkPipelineStream(ctx, "audit", 0x16B3748),
		files.ReportSinkPipelineError(ctx, "audit", "table public.todos has no primary key or replica identity index: add one\nsee the README")} {
		if err != nil {
			t.Fatal(err)
		}
	}
	var b strings.Builder
	if err := writeStateStatus(ctx, &b, cfg, nil, time.Now().Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"audit     jsonl  todos            2        done         0/16B3748   ?    table public.todos has no primary key or replica identity in…",
		"later     jsonl  all rule tables  —        not started  —",
		"pipeline audit needs attention (1m0s ago): table public.todos has no primary key or replica identity index: add one\nsee the README",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("status lacks %q:\n%s", want, out)
		}
	}
}
