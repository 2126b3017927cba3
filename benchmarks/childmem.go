package benchmarks

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// childMemory is a syncpipe child's memory at one point: its RSS and its
// live memory — the heap its last GC found live plus goroutine stacks,
// read from its /metrics.
type childMemory struct {
	rss, live int64
	settled   bool // a GC ran after the measurement was asked for
}

// gcSettleWait is the longest settledMemory waits for the child's next
// GC: the Go runtime forces one two minutes after the last.
const gcSettleWait = 150 * time.Second

// settledMemory measures the child once a GC ran after the call, waiting
// at most wait (0: measure at once). Right after a burst of work (the
// snapshot, the clients' first syncs) the heap in use and the RSS still
// hold the burst's garbage, which the runtime collects only once the heap
// grows again or two minutes after its last GC: measured at once, how much
// memory the idle connections take depended on how much garbage happened
// to be left from before them.
func settledMemory(ctx context.Context, c *Child, metricsURL string, wait time.Duration) (childMemory, error) {
	var m childMemory
	gcs, err := scrapeMetrics(ctx, metricsURL, "go_gc_duration_seconds_count")
	if err != nil {
		return m, err
	}
	deadline := time.Now().Add(wait)
	for time.Now().Before(deadline) && !m.settled {
		select {
		case <-ctx.Done():
			return m, ctx.Err()
		case <-time.After(time.Second):
		}
		now, err := scrapeMetrics(ctx, metricsURL, "go_gc_duration_seconds_count")
		if err != nil {
			return m, err
		}
		m.settled = now["go_gc_duration_seconds_count"] > gcs["go_gc_duration_seconds_count"]
	}
	v, err := scrapeMetrics(ctx, metricsURL, "go_gc_heap_live_bytes", "go_memstats_stack_inuse_bytes")
	if err != nil {
		return m, err
	}
	m.live = int64(v["go_gc_heap_live_bytes"] + v["go_memstats_stack_inuse_bytes"])
	m.rss = lowestRSS(c)
	return m, nil
}

// scrapeMetrics reads the named unlabelled samples from a Prometheus
// text endpoint; a name it does not find is an error.
func scrapeMetrics(ctx context.Context, url string, names ...string) (map[string]float64, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("scrape %s: %w", url, err)
	}
	defer resp.Body.Close()
	want := make(map[string]bool, len(names))
	for _, n := range names {
		want[n] = true
	}
	out := make(map[string]float64, len(names))
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		name, value, ok := strings.Cut(sc.Text(), " ")
		if !ok || !want[name] {
			continue
		}
		f, err := strconv.ParseFloat(strings.TrimSpace(value), 64)
		if err != nil {
			return nil, fmt.Errorf("scrape %s: %s: %w", url, name, err)
		}
		out[name] = f
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("scrape %s: %w", url, err)
	}
	for _, n := range names {
		if _, ok := out[n]; !ok {
			return nil, fmt.Errorf("scrape %s: no %s", url, n)
		}
	}
	return out, nil
}
