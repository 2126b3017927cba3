package benchmarks

import (
	"encoding/json"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestLoadSmoke runs the load scenario at a tiny scale through the same
// code paths (a `syncpipe run --role all` child, HTTP clients, the
// published-checkpoint watch): every client must end holding exactly the
// source's rows, no stream may fail, every arrival must be split at a
// checkpoint the watch saw, and the report and bar must be rendered. No
// timing is asserted.
func TestLoadSmoke(t *testing.T) {
	loadSmoke(t, false)
}

// TestLoadSmokeWebSocket is TestLoadSmoke with the clients over
// WebSocket (the load-ws scenario).
func TestLoadSmokeWebSocket(t *testing.T) {
	loadSmoke(t, true)
}

func loadSmoke(t *testing.T, ws bool) {
	ctx, h := smokeHarness(t, 5*time.Minute)
	opt := LoadOptions{Clients: 12, ListsPerUser: 5, TodosPerList: 2, Rate: 400, TxnRows: 20, For: 4 * time.Second,
		WebSocket: ws, Harness: h}
	res, fig, err := runLoad(ctx, opt)
	if err != nil {
		t.Fatal(err)
	}
	if fig.errors != 0 || fig.mismatched != 0 {
		t.Errorf("%d stream errors (%v), %d clients not matching the source", fig.errors, fig.errorText, fig.mismatched)
	}
	if len(fig.lat.total) == 0 || len(fig.lat.replication) != len(fig.lat.total) || len(fig.lat.api) != len(fig.lat.total) {
		t.Errorf("%d arrivals, %d split at a published checkpoint, want the same non-zero count", len(fig.lat.total), len(fig.lat.replication))
	}
	if fig.committed != int64(fig.txns*opt.TxnRows) || fig.txns == 0 {
		t.Errorf("%d changes committed in %d transactions of %d rows", fig.committed, fig.txns, opt.TxnRows)
	}
	if want := map[bool]string{false: "Load", true: "Load (WebSocket)"}[ws]; len(res.Bars) == 1 && res.Bars[0].ID != want {
		t.Errorf("bar %q, want %q", res.Bars[0].ID, want)
	}
	if len(res.Rows) != 1 || len(res.Bars) != 1 || res.PeakRSS <= 0 {
		t.Errorf("%d rows, %d bars, peak RSS %d; want 1, 1, > 0", len(res.Rows), len(res.Bars), res.PeakRSS)
	}
	t.Log(res.Notes[0])
}

// TestLoadClientArrivals: a client records a transaction once per
// checkpoint that brings it, and a (re)started stream's full sync records
// nothing.
func TestLoadClientArrivals(t *testing.T) {
	c := &loadClient{user: "u", rows: map[string]int64{}, pending: map[int64]bool{}}
	put := func(id string, seq int64) {
		t.Helper()
		row, _ := json.Marshal(map[string]any{"id": id, "seq": seq})
		data := string(row)
		if err := c.apply(loadLine{Data: &loadBucketData{Data: []loadOp{{Op: "PUT", ObjectID: id, Data: &data}}}}); err != nil {
			t.Fatal(err)
		}
	}
	t0 := time.Now()
	c.restart()
	put("a", 0)
	put("b", 3) // a full sync of rows last changed by transaction 3
	if !c.complete(10, t0) {
		t.Fatal("the first checkpoint_complete is not reported as the first")
	}
	put("a", 4)
	put("b", 4)
	put("c", 5)
	if c.complete(11, t0.Add(time.Second)) {
		t.Fatal("a later checkpoint_complete is reported as the first")
	}
	c.restart()
	put("a", 4)
	c.complete(12, t0.Add(2*time.Second))

	lc := &loadClients{list: []*loadClient{c}}
	committed := map[int64]time.Time{3: t0, 4: t0.Add(500 * time.Millisecond), 5: t0.Add(800 * time.Millisecond)}
	published := map[int64]time.Time{11: t0.Add(900 * time.Millisecond)}
	l, ops := lc.latencies(committed, published)
	if len(l.total) != 2 || len(l.replication) != 2 || ops != 6 {
		t.Fatalf("latencies %+v, ops %d; want two arrivals (transactions 4 and 5 at checkpoint 11) and 6 ops", l, ops)
	}
	want := map[time.Duration]bool{500 * time.Millisecond: true, 200 * time.Millisecond: true}
	for i, d := range l.total {
		if !want[d] || l.api[i] != 100*time.Millisecond || l.replication[i]+l.api[i] != d {
			t.Errorf("arrival %d: total %s = replication %s + api %s; want 500 or 200 ms with 100 ms in the API", i, d, l.replication[i], l.api[i])
		}
	}
	if !c.holds(map[string]int64{"a": 4}) { // what the restarted stream brought
		t.Errorf("client holds %v", c.rows)
	}
}

// TestLoadCompareSmoke runs the load scenario as a comparison run at a
// tiny scale, the old binary being the new one: one measurement per
// binary, a row each, a comparison table with a ratio for each headline
// figure, and the first sync measured in pairs.
func TestLoadCompareSmoke(t *testing.T) {
	ctx, h := smokeHarness(t, 8*time.Minute)
	h.Compare = h.Syncpipe
	res, err := RunLoad(ctx, LoadOptions{Clients: 12, ListsPerUser: 5, TodosPerList: 2, Rate: 400, TxnRows: 20, For: 4 * time.Second,
		FirstSyncPairs: 2, Harness: h})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Rows) != 2 || res.Rows[1].Name != res.Rows[0].Name+compareSuffix || len(res.Bars) != 1 {
		t.Fatalf("rows %+v, bars %+v; want a row per binary and one bar", res.Rows, res.Bars)
	}
	var md strings.Builder
	res.WriteMarkdown(&md)
	if !strings.Contains(md.String(), "New build vs old build") {
		t.Fatalf("report lacks the comparison table:\n%s", md.String())
	}
	if !regexp.MustCompile(`First sync of all 12 clients, in 2 pairs .* per-pair ratios new / old \*\*\d+\.\d{3}\*\* \(per pair: \d+\.\d{3}, \d+\.\d{3}\)`).MatchString(md.String()) {
		t.Errorf("report lacks the paired first syncs:\n%s", md.String())
	}
	for _, fg := range loadFigureList {
		if !regexp.MustCompile(`(?m)^\| ` + regexp.QuoteMeta(fg.name) + `.* \| \*\*-?\d+\.\d{3}\*\* \| -?\d+\.\d{3} \|$`).MatchString(md.String()) {
			t.Errorf("comparison table lacks a ratio for %q:\n%s", fg.name, md.String())
		}
	}
	t.Log(res.Notes[0])
}
