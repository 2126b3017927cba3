package logrepl

import (
	"net"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
)

// proxy is a TCP relay in front of the test server whose server-to-client
// direction can be frozen, to make a live connection go silent.
type proxy struct {
	uri    string
	frozen atomic.Bool
	stop   chan struct{}
	mu     sync.Mutex
	conns  []net.Conn
}

func newProxy(t *testing.T, upstream string) *proxy {
	t.Helper()
	u, err := url.Parse(upstream)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	target := u.Host
	u.Host = ln.Addr().String()
	p := &proxy{uri: u.String(), stop: make(chan struct{})}
	t.Cleanup(func() {
		close(p.stop)
		_ = ln.Close()
		p.mu.Lock()
		defer p.mu.Unlock()
		for _, c := range p.conns {
			_ = c.Close()
		}
	})
	go func() {
		for {
			client, err := ln.Accept()
			if err != nil {
				return
			}
			server, err := net.Dial("tcp", target)
			if err != nil {
				_ = client.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, client, server)
			p.mu.Unlock()
			go p.pipe(server, client, false)
			go p.pipe(client, server, true)
		}
	}()
	return p
}

// freeze stops forwarding anything from the server.
func (p *proxy) freeze() { p.frozen.Store(true) }

func (p *proxy) pipe(dst, src net.Conn, fromServer bool) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if fromServer && p.frozen.Load() {
				<-p.stop // swallow the rest until the test ends
				return
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			_ = dst.Close()
			return
		}
	}
}
