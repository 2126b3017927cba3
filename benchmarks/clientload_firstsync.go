package benchmarks

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"
)

// The first sync of a comparison run, measured in pairs. A whole load run
// per binary (runLoadCompare) gives one first sync each, on clusters of
// its own, and those differ run to run by more than builds do (the build
// that runs second is favoured: page cache, the machine's state). So the
// comparison also measures the first sync of every client many times on
// ONE environment: the same clusters and stored data, a child of each
// build in turn (interleaved: A B, B A, …), each started fresh (an empty
// checksum cache, as after a deployment), and judges the builds on the
// median of the per-pair ratios.

// firstSyncPairs runs opt.FirstSyncPairs pairs on one fresh environment
// and returns each binary's first sync times, in pair order, by suffix.
func firstSyncPairs(ctx context.Context, opt LoadOptions, vs []variant) (map[string][]time.Duration, error) {
	o := opt
	o.Harness = vs[0].h
	e, err := startLoadEnv(ctx, o)
	if err != nil {
		return nil, err
	}
	defer e.close(ctx)
	if _, err := e.child.Stop(); err != nil { // the snapshot's child
		return nil, err
	}
	e.child = nil
	times := map[string][]time.Duration{}
	for k := range opt.FirstSyncPairs {
		for _, v := range interleaved(vs, k) {
			o.Harness = v.h
			d, err := firstSyncOnce(ctx, o, e)
			if err != nil {
				return nil, fmt.Errorf("first sync pair %d, %s build: %w", k+1, buildName(v.suffix), err)
			}
			times[v.suffix] = append(times[v.suffix], d)
			logf(opt.Log, "load: first sync pair %d, %s build: %s", k+1, buildName(v.suffix), d.Round(time.Millisecond))
		}
	}
	return times, nil
}

// firstSyncOnce starts a child of opt's binary on e's storage, waits
// until it serves (one client's first sync), and times the first sync of
// every client from their connecting at once.
func firstSyncOnce(ctx context.Context, opt LoadOptions, e *loadEnv) (time.Duration, error) {
	child, url, err := startLoadChild(ctx, opt, e.cluster.URI("app"), e.storage.URI("storage"))
	if err != nil {
		return 0, err
	}
	defer func() { _, _ = child.Stop() }()
	if _, err := syncAll(ctx, url, e.users[:1]); err != nil {
		return 0, fmt.Errorf("the child serves no checkpoint: %w\n%s", err, child.Tail())
	}
	d, err := syncAll(ctx, url, e.users)
	if err != nil {
		return 0, fmt.Errorf("%w\n%s", err, child.Tail())
	}
	return d, nil
}

// syncAll connects a client per user at once and returns the time until
// every one has read its first checkpoint_complete; then it disconnects
// them.
func syncAll(ctx context.Context, url string, users []string) (time.Duration, error) {
	lc := newLoadClients(users, false)
	cctx, stop := context.WithCancel(ctx)
	var clients sync.WaitGroup
	defer func() { stop(); clients.Wait() }()
	return lc.connectAll(cctx, url, &clients, 2*time.Minute)
}

// firstSyncNote reports the paired first syncs: both builds' medians and
// the median of the per-pair ratios, new / old.
func firstSyncNote(opt LoadOptions, times map[string][]time.Duration) string {
	news, olds := times[""], times[compareSuffix]
	n := min(len(news), len(olds))
	if n == 0 {
		return ""
	}
	ratios := make([]float64, n)
	var pairs []string
	for i := range n {
		ratios[i] = news[i].Seconds() / max(olds[i].Seconds(), 1e-9)
		pairs = append(pairs, fmt.Sprintf("%.3f", ratios[i]))
	}
	secs := func(ds []time.Duration) []float64 {
		out := make([]float64, len(ds))
		for i, d := range ds {
			out[i] = d.Seconds()
		}
		return out
	}
	nv, ov := secs(news), secs(olds)
	var b strings.Builder
	fmt.Fprintf(&b, "First sync of all %d clients, in %d pairs on one environment (same clusters and stored data; a fresh child of each build in turn, interleaved; see clientload_firstsync.go): ", opt.Clients, n)
	fmt.Fprintf(&b, "new %.3f s (%.3f–%.3f), old %.3f s (%.3f–%.3f); median of the per-pair ratios new / old **%.3f** (per pair: %s).",
		median(nv), slices.Min(nv), slices.Max(nv), median(ov), slices.Min(ov), slices.Max(ov), median(ratios), strings.Join(pairs, ", "))
	return b.String()
}
