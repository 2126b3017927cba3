package benchmarks

import (
	"strings"
	"testing"
	"time"
)

func TestInterleaved(t *testing.T) {
	vs := []string{"new", "old"}
	var got []string
	for k := range 4 {
		got = append(got, strings.Join(interleaved(vs, k), " "))
	}
	if s := strings.Join(got, " | "); s != "new old | old new | new old | old new" {
		t.Fatalf("interleaved: %s", s)
	}
	if vs[0] != "new" {
		t.Fatalf("interleaved changed its argument: %v", vs)
	}
}

func TestCompareNote(t *testing.T) {
	s := func(rows int64, d time.Duration) Sample { return Sample{Rows: rows, Duration: d} }
	rows := []Row{
		{Name: "syncpipe, 2 worker(s)", Samples: []Sample{s(100, time.Second), s(120, time.Second), s(90, time.Second)}},
		{Name: "syncpipe, 2 worker(s)" + compareSuffix, Samples: []Sample{s(100, time.Second), s(100, time.Second), s(100, time.Second)}},
		{Name: "raw COPY→COPY ceiling", Samples: []Sample{s(200, time.Second)}},
	}
	got := compareNote(rows, "source rows/s")
	for _, want := range []string{"New build vs old build", "| syncpipe, 2 worker(s) | 100 (90–120) | 100 (100–100) | **1.000** | 1.000, 1.200, 0.900 |"} {
		if !strings.Contains(got, want) {
			t.Errorf("compareNote lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "ceiling") {
		t.Errorf("compareNote lists a row measured once:\n%s", got)
	}
	if compareNote(rows[2:], "x") != "" {
		t.Error("compareNote without pairs is not empty")
	}
}

func TestParseTopologies(t *testing.T) {
	for in, want := range map[string]string{"both": "two one", "": "two one", "one": "one", "two": "two", "two-clusters": "two"} {
		got, err := ParseTopologies(in)
		if err != nil || strings.Join(got, " ") != want {
			t.Errorf("ParseTopologies(%q) = %v, %v; want %s", in, got, err, want)
		}
	}
	if _, err := ParseTopologies("three"); err == nil {
		t.Error("ParseTopologies(three): no error")
	}
}
