package replication

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/syncpipe/syncpipe/sinks/bucketstore"
)

// TestStateFilesKeepAPipelinesState walks a pipeline's state through a
// state file as a SinkRunner does — version, plan (kept once stored),
// snapshot done, stream position, an error stored and cleared — reading
// it back each time through a second StateFiles, as a restarted process
// or `syncpipe status` would.
func TestStateFilesKeepAPipelinesState(t *testing.T) {
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "state")
	path := func(name string) string { return filepath.Join(dir, name+".state.json") }
	f := NewStateFiles(path)
	reread := func() bucketstore.SinkPipeline {
		t.Helper()
		p, ok, err := NewStateFiles(path).SinkPipeline(ctx, "audit")
		if err != nil || !ok {
			t.Fatalf("read back: ok %v, err %v", ok, err)
		}
		return p
	}

	if _, ok, err := f.SinkPipeline(ctx, "audit"); ok || err != nil {
		t.Fatalf("before any version: ok %v, err %v; want nothing", ok, err)
	}
	if err := f.MarkSinkPipelineSnapshotDone(ctx, "audit"); err == nil {
		t.Error("a pipeline without a version was updated")
	}
	v1 := bucketstore.SinkPipeline{Name: "audit", Version: 1, Fingerprint: "fp", SinkType: "jsonl", Tables: []string{"todos"}, SlotName: "syncpipe_p_audit"}
	if err := f.StartSinkPipelineVersion(ctx, v1); err != nil {
		t.Fatal(err)
	}
	if p := reread(); p.Version != 1 || p.Fingerprint != "fp" || p.SinkType != "jsonl" || p.SlotName != v1.SlotName ||
		len(p.Tables) != 1 || p.Plan != nil || p.SnapshotDone || p.StreamLSN != 0 || p.UpdatedAt.IsZero() {
		t.Fatalf("after the version: %+v", p)
	}

	plan := []byte(`{"public.todos":[{"lo":null}]}`)
	if got, err := f.SetSinkPipelinePlan(ctx, "audit", plan); err != nil || string(got) != string(plan) {
		t.Fatalf("plan = %s, %v", got, err)
	}
	if got, err := f.SetSinkPipelinePlan(ctx, "audit", []byte(`{"other":[]}`)); err != nil || string(got) != string(plan) {
		t.Errorf("a second plan replaced the first: %s, %v", got, err)
	}
	if err := f.MarkSinkPipelineSnapshotDone(ctx, "audit"); err != nil {
		t.Fatal(err)
	}
	if err := f.SetSinkPipelineStream(ctx, "audit", 0x16B3748); err != nil {
		t.Fatal(err)
	}
	if err := f.ReportSinkPipelineError(ctx, "audit", "wal_level is not logical"); err != nil {
		t.Fatal(err)
	}
	p := reread()
	if string(p.Plan) != string(plan) || !p.SnapshotDone || p.StreamLSN.String() != "0/16B3748" ||
		p.LastError != "wal_level is not logical" || p.LastErrorAt == nil {
		t.Fatalf("after plan, snapshot, stream and error: %+v", p)
	}
	if err := f.ClearSinkPipelineError(ctx, "audit"); err != nil {
		t.Fatal(err)
	}
	if p := reread(); p.LastError != "" || p.LastErrorAt != nil || !p.SnapshotDone {
		t.Errorf("after clearing the error: %+v", p)
	}

	// A new version starts over: no plan, no snapshot, no error.
	if err := f.ReportSinkPipelineError(ctx, "audit", "boom"); err != nil {
		t.Fatal(err)
	}
	if err := f.StartSinkPipelineVersion(ctx, bucketstore.SinkPipeline{Name: "audit", Version: 2, Fingerprint: "fp2"}); err != nil {
		t.Fatal(err)
	}
	if p := reread(); p.Version != 2 || p.Plan != nil || p.SnapshotDone || p.StreamLSN != 0 || p.LastError != "" {
		t.Errorf("after version 2: %+v", p)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 || entries[0].Name() != "audit.state.json" {
		t.Errorf("state dir holds %v; want audit.state.json alone (no temporary files)", entries)
	}
}

// TestStateFilesRefuseAnotherPipelinesFile checks that a state file copied
// or renamed onto another pipeline is refused rather than adopted.
func TestStateFilesRefuseAnotherPipelinesFile(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	f := NewStateFiles(func(name string) string { return filepath.Join(dir, name+".state.json") })
	if err := f.StartSinkPipelineVersion(ctx, bucketstore.SinkPipeline{Name: "a", Version: 1}); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(dir, "a.state.json"), filepath.Join(dir, "b.state.json")); err != nil {
		t.Fatal(err)
	}
	if _, _, err := f.SinkPipeline(ctx, "b"); err == nil || !strings.Contains(err.Error(), `of pipeline "a"`) {
		t.Errorf("err = %v; want a refusal naming pipeline a", err)
	}
}
