package torture

import (
	"errors"
	"net"
	"sync"
	"time"
)

// Proxy forwards TCP connections from a local port to a target address
// and can break them: Cut closes every connection and refuses new ones
// until Heal; Stall stops forwarding bytes (connections stay open, as
// behind a dead router) until Heal.
type Proxy struct {
	Name   string
	target string
	ln     net.Listener

	mu       sync.Mutex
	conns    map[net.Conn]struct{}
	refusing bool
	stall    chan struct{} // non-nil while stalled; closed by Heal
	closed   bool
	accepted int
	dropped  int
}

// NewProxy listens on a free loopback port and forwards to target.
func NewProxy(name, target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{Name: name, target: target, ln: ln, conns: map[net.Conn]struct{}{}}
	go p.serve()
	return p, nil
}

// Addr is the host:port clients should dial instead of the target.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

func (p *Proxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			time.Sleep(10 * time.Millisecond)
			continue
		}
		p.mu.Lock()
		refuse := p.refusing || p.closed
		if !refuse {
			p.accepted++
		}
		p.mu.Unlock()
		if refuse {
			_ = c.Close()
			continue
		}
		go p.handle(c)
	}
}

func (p *Proxy) handle(client net.Conn) {
	upstream, err := net.DialTimeout("tcp", p.target, 5*time.Second)
	if err != nil {
		_ = client.Close()
		return
	}
	p.mu.Lock()
	if p.refusing || p.closed {
		p.mu.Unlock()
		_ = client.Close()
		_ = upstream.Close()
		return
	}
	p.conns[client] = struct{}{}
	p.conns[upstream] = struct{}{}
	p.mu.Unlock()
	done := make(chan struct{}, 2)
	go func() { p.pipe(upstream, client); done <- struct{}{} }()
	go func() { p.pipe(client, upstream); done <- struct{}{} }()
	<-done
	// One direction ended: end both, as a TCP reset would.
	_ = client.Close()
	_ = upstream.Close()
	<-done
	p.mu.Lock()
	delete(p.conns, client)
	delete(p.conns, upstream)
	p.mu.Unlock()
}

// pipe copies src to dst, holding every chunk while the proxy stalls.
func (p *Proxy) pipe(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			p.waitStall()
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func (p *Proxy) waitStall() {
	p.mu.Lock()
	ch := p.stall
	p.mu.Unlock()
	if ch != nil {
		<-ch
	}
}

// Cut closes every open connection and refuses new ones until Heal.
func (p *Proxy) Cut() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.refusing = true
	n := 0
	for c := range p.conns {
		_ = c.Close()
		n++
	}
	p.dropped += n / 2
	return n / 2
}

// Refuse refuses new connections until Heal; open ones go on.
func (p *Proxy) Refuse() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.refusing = true
}

// Stall stops forwarding on every connection, open or new, until Heal.
func (p *Proxy) Stall() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stall == nil {
		p.stall = make(chan struct{})
	}
}

// Heal ends a cut or a stall.
func (p *Proxy) Heal() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.refusing = false
	if p.stall != nil {
		close(p.stall)
		p.stall = nil
	}
}

// Stats returns the connections accepted and dropped by cuts so far.
func (p *Proxy) Stats() (accepted, dropped int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.accepted, p.dropped
}

// Close stops the proxy and closes its connections.
func (p *Proxy) Close() {
	p.mu.Lock()
	p.closed = true
	if p.stall != nil {
		close(p.stall)
		p.stall = nil
	}
	for c := range p.conns {
		_ = c.Close()
	}
	p.mu.Unlock()
	_ = p.ln.Close()
}
