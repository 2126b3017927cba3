package cli

import (
	"context"
	"sync"
	"time"
)

// scrapeCache keeps one read behind a metrics callback for the scrapes
// that come within ttl of it: several Prometheus replicas (and the
// autoscaling adapter) scrape every process, and a read of storage or the
// source per scrape would cost the servers more than the figures are
// worth. Each read is bounded by timeout. A failed read is not kept: the
// next scrape reads again, and this one reports nothing rather than a
// misleading figure.
type scrapeCache[T any] struct {
	ttl, timeout time.Duration
	read         func(ctx context.Context) (T, error)

	mu   sync.Mutex
	at   time.Time
	last T
}

// get returns the kept read, or a new one once ttl has passed; ok is false
// when that read failed.
func (c *scrapeCache[T]) get(ctx context.Context) (v T, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if time.Since(c.at) > c.ttl {
		rctx, cancel := context.WithTimeout(ctx, c.timeout)
		v, err := c.read(rctx)
		cancel()
		if err != nil {
			return v, false
		}
		c.last, c.at = v, time.Now()
	}
	return c.last, true
}
