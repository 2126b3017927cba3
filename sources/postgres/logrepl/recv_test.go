package logrepl

import (
	"bytes"
	"net"
	"syscall"
	"testing"
	"time"
)

// lowat reads the socket's SO_RCVLOWAT.
func lowat(t *testing.T, c *net.TCPConn) int {
	t.Helper()
	rc, err := c.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var v int
	var gerr error
	if err := rc.Control(func(fd uintptr) { v, gerr = syscall.GetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVLOWAT) }); err != nil || gerr != nil {
		t.Fatal(err, gerr)
	}
	return v
}

// tcpPair returns the two ends of a loopback TCP connection.
func tcpPair(t *testing.T) (client, server *net.TCPConn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		accepted <- c
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	s := <-accepted
	if s == nil {
		t.Fatal("accept failed")
	}
	t.Cleanup(func() { c.Close(); s.Close() })
	return c.(*net.TCPConn), s.(*net.TCPConn)
}

// TestBatchingReaderFollowsThePace: many reads in a short time turn the
// socket's batching on (SO_RCVLOWAT raised), full reads keep it on, a read
// that finds little turns it off, stop resets it, and every byte arrives in
// order throughout.
func TestBatchingReaderFollowsThePace(t *testing.T) {
	client, server := tcpPair(t)
	data := bytes.Repeat([]byte("0123456789abcdef"), 1000) // 16000 bytes: 160 reads of 100
	if _, err := server.Write(data); err != nil {
		t.Fatal(err)
	}
	b := &batchingReader{r: client}
	b.start(client)
	if lowat(t, client) != 1 {
		t.Fatal("batching on before any read")
	}
	var got []byte
	read := func(p []byte) {
		t.Helper()
		// As the stream's tick does: a read the raised mark holds back
		// ends at the deadline and is tried again.
		for end := time.Now().Add(10 * time.Second); time.Now().Before(end); {
			_ = client.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
			n, err := b.Read(p)
			got = append(got, p[:n]...)
			if n > 0 {
				return
			}
			if ne, ok := err.(net.Error); !ok || !ne.Timeout() {
				t.Fatal(err)
			}
		}
		t.Fatal("no data in 10 s")
	}
	small := make([]byte, 100)
	for !b.busy.Load() {
		if len(got) == len(data) {
			t.Fatalf("%d quick reads did not turn batching on", len(data)/len(small))
		}
		read(small)
	}
	if v := lowat(t, client); v != lowatBytes {
		t.Fatalf("SO_RCVLOWAT %d while busy, want %d", v, lowatBytes)
	}
	for len(got) < len(data) {
		read(small) // full reads: still busy
	}
	if !b.busy.Load() {
		t.Fatal("reads that filled their room turned batching off")
	}
	tail := []byte("a few bytes more")
	if _, err := server.Write(tail); err != nil {
		t.Fatal(err)
	}
	data = append(data, tail...)
	read(make([]byte, 64<<10))
	if b.busy.Load() || lowat(t, client) != 1 {
		t.Fatalf("busy %v, SO_RCVLOWAT %d after a short read", b.busy.Load(), lowat(t, client))
	}
	if !bytes.Equal(got, data) {
		t.Fatal("bytes lost or reordered")
	}
	b.batch(true)
	b.stop()
	if lowat(t, client) != 1 || b.busy.Load() {
		t.Fatal("stop left batching on")
	}
}
