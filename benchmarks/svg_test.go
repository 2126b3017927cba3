package benchmarks

import (
	"encoding/xml"
	"io"
	"strings"
	"testing"
	"time"
)

// countElements parses an SVG document (so it must be well-formed XML)
// and counts its elements by name.
func countElements(t *testing.T, doc string) map[string]int {
	t.Helper()
	n := map[string]int{}
	d := xml.NewDecoder(strings.NewReader(doc))
	for {
		tok, err := d.Token()
		if err == io.EOF {
			return n
		}
		if err != nil {
			t.Fatalf("not well-formed XML: %v\n%s", err, doc)
		}
		if se, ok := tok.(xml.StartElement); ok {
			n[se.Name.Local]++
		}
	}
}

func TestWriteSVGBothCharts(t *testing.T) {
	res := Result{
		Stages: &Breakdown{Wall: 10 * time.Second, Stages: []StageTime{
			{Stage: "read", Busy: 6 * time.Second, Blocked: 3 * time.Second, Workers: 1},
			{Stage: "flush<&>", Busy: 18 * time.Second, Workers: 2}, // names are escaped
		}},
		Rows: []Row{
			{Name: "syncpipe, 1 worker(s)", Workers: 1, Baseline: "raw", Samples: []Sample{{Duration: time.Second, Rows: 40000}}},
			{Name: "syncpipe, 2 worker(s)", Workers: 2, Baseline: "raw", Samples: []Sample{
				{Duration: time.Second, Rows: 42000}, {Duration: time.Second, Rows: 45000}, {Duration: time.Second, Rows: 41000}}},
			{Name: "raw", Samples: []Sample{{Duration: time.Second, Rows: 44000}}},
		},
	}
	var b strings.Builder
	ok, err := WriteSVG(&b, res)
	if err != nil || !ok {
		t.Fatalf("WriteSVG = %v, %v", ok, err)
	}
	n := countElements(t, b.String())
	if n["svg"] != 1 || n["polyline"] != 1 || n["circle"] != 2 {
		t.Errorf("elements %v: want one svg, one polyline and a point per worker count", n)
	}
	// background + 2 stages × (busy, blocked) + 2 legend swatches
	if n["rect"] != 7 {
		t.Errorf("%d rects, want 7", n["rect"])
	}
	if !strings.Contains(b.String(), "flush&lt;&amp;&gt;") {
		t.Error("stage name not escaped")
	}
	if !strings.Contains(b.String(), `width="960"`) {
		t.Error("two panels should make the chart 960 wide")
	}
}

func TestWriteSVGNothingToDraw(t *testing.T) {
	var b strings.Builder
	ok, err := WriteSVG(&b, Result{Rows: []Row{{Name: "x", Samples: []Sample{{Duration: time.Second, Rows: 1}}}}})
	if ok || err != nil || b.Len() != 0 {
		t.Fatalf("WriteSVG = %v, %v, %q; want nothing written", ok, err, b.String())
	}
}

func TestNiceCeil(t *testing.T) {
	for _, c := range []struct{ in, want float64 }{{0, 1}, {3, 5}, {43800, 50000}, {100, 100}, {180, 200}, {240, 250}} {
		if got := niceCeil(c.in); got != c.want {
			t.Errorf("niceCeil(%v) = %v, want %v", c.in, got, c.want)
		}
	}
}

// TestWriteSVGTimeChart draws a result without stages or workers — sizes
// and their baselines — as median times on a log scale.
func TestWriteSVGTimeChart(t *testing.T) {
	res := Result{Rows: []Row{
		{Name: "10k, LATERAL", Baseline: "10k, OR-chain", Samples: []Sample{{Duration: 40 * time.Millisecond, Rows: 1}, {Duration: 50 * time.Millisecond, Rows: 1}}},
		{Name: "10k, OR-chain", Samples: []Sample{{Duration: 3 * time.Second, Rows: 1}}},
	}}
	var b strings.Builder
	ok, err := WriteSVG(&b, res)
	if err != nil || !ok {
		t.Fatalf("WriteSVG = %v, %v", ok, err)
	}
	svg := b.String()
	for _, want := range []string{"log scale", "10k, LATERAL", "10k, OR-chain", ">10ms<", ">10s<", `fill="#a33"`} {
		if !strings.Contains(svg, want) {
			t.Errorf("chart lacks %q", want)
		}
	}
}
