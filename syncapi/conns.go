package syncapi

import (
	"container/list"
	"context"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"
)

// evictionLogInterval spaces the warnings about closed connections: an
// attack closes thousands a second.
const evictionLogInterval = 10 * time.Second

// ConnGuard bounds the connections of the API's HTTP server that are not
// sync streams: connections being accepted, sending a request (headers or
// body), waiting for a short answer, or idle between requests. Sync
// streams are bounded by Config.MaxConcurrentConnections; without this
// bound, clients that never finish a request (one body byte a second) or
// never send one held a file descriptor each until the process ran out
// and stopped answering anything, /healthz included.
//
// Beyond the bound, each accepted connection closes the one among them
// whose current phase (accepted, request started, idle) began earliest:
// legitimate requests take milliseconds, so the oldest are the stalled
// ones, and a new connection (a health check, a client starting its
// stream) always gets in. Use Listener, ConnState and ConnContext
// together on one http.Server.
type ConnGuard struct {
	max int
	log *slog.Logger

	mu      sync.Mutex
	pending list.List // of *guardedConn, oldest phase first
	evicted int       // since the last warning
	warned  time.Time
}

// NewConnGuard returns a guard keeping at most limit connections that
// are not sync streams (at least 1); log receives a warning when it
// closes some (nil discards).
func NewConnGuard(limit int, log *slog.Logger) *ConnGuard {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &ConnGuard{max: max(limit, 1), log: log}
}

// guardedConn is an accepted connection. Its fields are guarded by the
// guard's mu.
type guardedConn struct {
	net.Conn
	g    *ConnGuard
	elem *list.Element // in g.pending; nil while streaming or once closed
	gone bool          // closed: never to be tracked again
	// upgrading: a WebSocket upgrade, still counted once net/http hands it
	// over, until its SETUP takes a stream slot (streaming).
	upgrading bool
}

// Close closes the connection and stops tracking it.
func (c *guardedConn) Close() error {
	c.g.untrack(c, true)
	return c.Conn.Close()
}

// innerConn returns the connection a guarded one wraps (else c): a taken
// over stream writes to it, because net.Buffers writes a *net.TCPConn
// with one writev and anything else, a wrapper too, with a write per
// buffer — three syscalls and, with Nagle off, three segments per line.
func innerConn(c net.Conn) net.Conn {
	if gc, ok := c.(*guardedConn); ok {
		return gc.Conn
	}
	return c
}

// Listener wraps ln so that its connections are counted.
func (g *ConnGuard) Listener(ln net.Listener) net.Listener { return &guardListener{Listener: ln, g: g} }

type guardListener struct {
	net.Listener
	g *ConnGuard
}

func (l *guardListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	gc := &guardedConn{Conn: c, g: l.g}
	l.g.admit(gc)
	return gc, nil
}

// ConnState is the http.Server.ConnState hook: a connection starting a
// request or going idle starts a new phase; a closed or hijacked one is
// no longer counted.
func (g *ConnGuard) ConnState(c net.Conn, state http.ConnState) {
	gc, ok := c.(*guardedConn)
	if !ok {
		return
	}
	switch state {
	case http.StateActive, http.StateIdle:
		g.requeue(gc)
	case http.StateHijacked:
		g.mu.Lock()
		upgrading := gc.upgrading
		g.mu.Unlock()
		if !upgrading { // a taken-over HTTP stream: it holds a slot
			g.untrack(gc, true)
		}
	case http.StateClosed:
		g.untrack(gc, true)
	}
}

// connKey is the context key of a request's *guardedConn.
type connKey struct{}

// ConnContext is the http.Server.ConnContext hook: it lets the sync
// stream handler tell the guard that its connection became a stream.
func (g *ConnGuard) ConnContext(ctx context.Context, c net.Conn) context.Context {
	if gc, ok := c.(*guardedConn); ok {
		return context.WithValue(ctx, connKey{}, gc)
	}
	return ctx
}

// markStreaming stops counting the request's connection while it serves
// a sync stream (the next ConnState counts it again). A no-op without a
// guard.
func markStreaming(ctx context.Context) {
	if gc, ok := ctx.Value(connKey{}).(*guardedConn); ok {
		gc.g.untrack(gc, false)
	}
}

// markUpgrading keeps the request's connection counted after net/http
// hands it over for a WebSocket, until the connection's streaming is
// called: between the upgrade and the SETUP it is pending like a request,
// and evicted like one. It returns the connection, nil without a guard.
func markUpgrading(ctx context.Context) *guardedConn {
	gc, ok := ctx.Value(connKey{}).(*guardedConn)
	if !ok {
		return nil
	}
	gc.g.mu.Lock()
	gc.upgrading = true
	gc.g.mu.Unlock()
	return gc
}

// streaming stops counting a WebSocket connection whose SETUP took a
// stream slot (the slots bound it from then on). A no-op on nil.
func (c *guardedConn) streaming() {
	if c != nil {
		c.g.untrack(c, false)
	}
}

// admit counts a new connection and closes the oldest beyond the bound.
func (g *ConnGuard) admit(c *guardedConn) {
	g.mu.Lock()
	c.elem = g.pending.PushBack(c)
	var victims []*guardedConn
	for g.pending.Len() > g.max {
		v := g.pending.Remove(g.pending.Front()).(*guardedConn)
		v.elem, v.gone = nil, true
		victims = append(victims, v)
	}
	g.evicted += len(victims)
	warn := g.evicted > 0 && time.Since(g.warned) >= evictionLogInterval
	n := g.evicted
	if warn {
		g.evicted, g.warned = 0, time.Now()
	}
	g.mu.Unlock()
	for _, v := range victims {
		_ = v.Conn.Close() // the server's goroutine for it then ends
	}
	if warn {
		g.log.Warn("sync API: closed the oldest connections that were not sync streams: more were open than the bound "+
			"(slow or stalled clients sending requests, idle keep-alives); streams are not affected",
			"closed", n, "bound", g.max)
	}
}

// requeue moves c to the back: its new phase is the youngest.
func (g *ConnGuard) requeue(c *guardedConn) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if c.gone {
		return
	}
	if c.elem != nil {
		g.pending.MoveToBack(c.elem)
		return
	}
	c.elem = g.pending.PushBack(c)
}

// untrack stops counting c: for good when it is gone (closed), else
// until its next phase.
func (g *ConnGuard) untrack(c *guardedConn, gone bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if c.elem != nil {
		g.pending.Remove(c.elem)
		c.elem = nil
	}
	c.gone = c.gone || gone
}
