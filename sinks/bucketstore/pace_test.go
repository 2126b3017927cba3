package bucketstore

import (
	"context"
	"testing"
	"time"
)

// TestPacerShare: a pacer pauses only after a stretch of work, for as long
// as keeps the work at its share, never at full speed, and returns at
// once when its context ends.
func TestPacerShare(t *testing.T) {
	ctx := context.Background()
	for _, share := range []float64{0, 1} {
		p := newPacer(share)
		p.since = time.Now().Add(-time.Second)
		began := time.Now()
		if err := p.rest(ctx); err != nil || time.Since(began) > 500*time.Millisecond {
			t.Errorf("share %g: rest took %s (err %v); full speed never pauses", share, time.Since(began), err)
		}
	}
	p := newPacer(0.5)
	before := p.since
	if err := p.rest(ctx); err != nil || p.since != before {
		t.Errorf("rest after less than a stretch of work paused (err %v)", err)
	}
	p.since = time.Now().Add(-40 * time.Millisecond) // 40 ms of work at a share of 1/2: 40 ms of rest
	began := time.Now()
	if err := p.rest(ctx); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(began); took < 40*time.Millisecond {
		t.Errorf("rested %s after 40ms of work at a share of 0.5, want ≥ 40ms", took)
	}
	if time.Since(p.since) > time.Second {
		t.Error("the next stretch does not start at the end of the pause")
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	p = newPacer(0.01)
	p.since = time.Now().Add(-time.Second) // would rest 99 s
	began = time.Now()
	if err := p.rest(cctx); err == nil || time.Since(began) > 5*time.Second {
		t.Errorf("rest with an ended context: err %v after %s", err, time.Since(began))
	}
}
