package benchmarks

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestIdleSmoke runs P0 once at a tiny scale through the code path of
// `-scenario idle`, in both topologies: a syncpipe child per topology
// snapshots, catches up and is measured idle and under one write a
// second. It asserts the outputs are there and sane — every phase, the
// writes, the slot moving and storage writing in the write phase, the
// three bars, the report files — never a timing or a bar's verdict.
func TestIdleSmoke(t *testing.T) {
	ctx, h := smokeHarness(t, 3*time.Minute)
	const window = 2 * time.Second
	var log strings.Builder
	opt := IdleOptions{Todos: 2000, Lists: 20, Window: window, Topologies: []string{OneCluster, TwoClusters}, Log: &log, Harness: h}
	res, targets, err := runIdle(ctx, opt)
	if err != nil {
		t.Fatalf("%v\nlog:\n%s", err, log.String())
	}
	t.Log(log.String())
	if len(targets) != 2 || !targets[0].twoClusters() || targets[1].twoClusters() {
		t.Fatalf("targets %+v, want two clusters, then one", targets)
	}
	for _, tg := range targets {
		if len(tg.phases) != 2 || tg.phases[0].name != idlePhaseIdle || tg.phases[1].name != idlePhaseWrite {
			t.Fatalf("%s: phases %+v, want idle, then one write a second", tg.label(), tg.phases)
		}
		idle, write := tg.phases[0], tg.phases[1]
		for _, ph := range tg.phases {
			if ph.elapsed < window || ph.peakRSS <= 0 || ph.xids < 0 {
				t.Errorf("%s, %s: %+v; want ≥ %s long, a peak RSS, no negative commit count", tg.label(), ph.name, ph, window)
			}
		}
		if idle.writes != 0 || write.writes < 1 {
			t.Errorf("%s: %d writes idle, %d in the write phase; want 0 and ≥ 1", tg.label(), idle.writes, write.writes)
		}
		// The writes are the source's: its WAL grows and syncpipe stores
		// them (a storage write transaction at least). Not that the slot
		// moved: syncpipe confirms every 10 s, longer than these phases.
		if write.sourceWAL <= 0 || write.srcXids < int64(write.writes) || write.xids < 1 || write.storageWAL <= 0 {
			t.Errorf("%s, write phase %+v: want source WAL, ≥ %d source xids, storage commits and WAL", tg.label(), write, write.writes)
		}
		if idle.slotStart <= 0 || write.slotEnd < idle.slotStart || write.slotBehind < 0 {
			t.Errorf("%s: slot from %d to %d, %d behind at the end; want a slot found, never moving back", tg.label(), idle.slotStart, write.slotEnd, write.slotBehind)
		}
	}
	if len(res.Rows) != 4 || res.Rows[0].Name != "idle, two clusters" || res.Rows[3].Name != "one write a second, one cluster" {
		t.Errorf("rows %+v, want idle and one write a second per topology, two clusters first", res.Rows)
	}
	if len(res.Bars) != 3 {
		t.Fatalf("bars %+v, want 3", res.Bars)
	}
	for _, b := range res.Bars {
		if b.ID != "P0" || !strings.Contains(b.Value, "two clusters") || !strings.Contains(b.Value, "one cluster") {
			t.Errorf("bar %+v: want P0 with both topologies' figures", b)
		}
	}
	dir := t.TempDir()
	if err := res.Save(dir); err != nil {
		t.Fatal(err)
	}
	md, err := os.ReadFile(filepath.Join(dir, "idle.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"| one cluster | idle |", "| two clusters | one write a second |", "How storage commits are counted", "| P0 | idle storage commits by syncpipe"} {
		if !strings.Contains(string(md), s) {
			t.Errorf("idle.md lacks %q:\n%s", s, md)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "idle.json")); err != nil {
		t.Error(err)
	}
	t.Log(string(md))
}
