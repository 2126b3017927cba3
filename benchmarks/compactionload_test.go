package benchmarks

import (
	"strings"
	"testing"
	"time"
)

// TestCompactionLoadSmoke runs the compaction-under-load scenario at a
// tiny scale through the same paths (a `syncpipe run --role all` child,
// `syncpipe compact` children in a loop, latency and checking clients):
// the compacting phase must have compacted (MOVEs and CLEARs added), no
// checking client may see a checksum failure, and every phase must have
// latencies and its clients holding the source. No timing is asserted.
func TestCompactionLoadSmoke(t *testing.T) {
	ctx, h := smokeHarness(t, 5*time.Minute)
	opt := CompactionLoadOptions{Load: LoadOptions{Clients: 4, ListsPerUser: 5, TodosPerList: 2, Rate: 200, TxnRows: 10, For: 4 * time.Second,
		Harness: h}, Backlog: 10, Phases: 2}
	res, phases, err := runCompactionLoad(ctx, opt)
	if err != nil {
		t.Fatal(err)
	}
	if len(phases) != 2 || phases[0].compacting || !phases[1].compacting {
		t.Fatalf("phases %+v, want one without and one with compaction", phases)
	}
	for i, ph := range phases {
		if len(ph.fig.lat.replication) == 0 || ph.fig.txns == 0 {
			t.Errorf("phase %d: %d transactions, %d arrivals split at a published checkpoint", i+1, ph.fig.txns, len(ph.fig.lat.replication))
		}
	}
	// Not the completed passes: on a slow machine the phase's 4 s can end
	// the first pass before it completes, and an interrupted pass keeps
	// what it compacted (the CLEARs count it).
	if on := phases[1]; on.clears <= 0 || on.compactCPU <= 0 {
		t.Errorf("the compacting phase: %d compact passes, %d CLEARs added, compact CPU %s; want CLEARs and CPU > 0", on.passes, on.clears, on.compactCPU)
	}
	if off := phases[0]; off.passes != 0 || off.moved != 0 || off.clears != 0 {
		t.Errorf("the phase without compaction compacted: %d passes, %d MOVEs, %d CLEARs", off.passes, off.moved, off.clears)
	}
	if len(res.Bars) != 1 || len(res.Rows) != 2 {
		t.Fatalf("%d bars, %d rows; want 1, 2", len(res.Bars), len(res.Rows))
	}
	if v := res.Bars[0].Value; !strings.Contains(v, " 0 checksum failures") || strings.Contains(v, " 0 checkpoints") {
		t.Errorf("bar value %q: want 0 checksum failures in some checkpoints", v)
	}
	t.Log(res.Bars[0].Value)
	t.Log(res.Notes[0])
}
