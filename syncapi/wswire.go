package syncapi

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
)

// WebSocket compression and wire bytes.
//
// The WebSocket transport takes per-message deflate when the client
// offers it, as PowerSync's service does (rsocket/doc.go "Compression"),
// and the @powersync/node client's WebSocket (undici) offers it. Without
// context takeover: each message is compressed on its own, with a flate
// writer held only while it is written, so an idle connection keeps no
// compressor (the Load scenario's thousand connections cost what they
// did). Messages under wsDeflateThreshold are sent as they are: a
// keepalive or a checkpoint_complete gains nothing.
//
// The library compresses inside the socket, so the bytes the sync API
// counts for a WebSocket stream are read off the connection itself
// (wireConn): what the client receives, frames and compression included.

// wsDeflateThreshold is the smallest message compressed: PowerSync's
// 1 KB.
const wsDeflateThreshold = 1024

// codingDeflate is the content_encoding of WebSocket streams whose
// connection negotiated per-message deflate.
const codingDeflate = "deflate"

// negotiatedDeflate reports whether the upgrade response w took
// per-message deflate (set by websocket.Accept).
func negotiatedDeflate(h http.Header) bool {
	return strings.Contains(h.Get("Sec-WebSocket-Extensions"), "permessage-deflate")
}

// wireCounter is a ResponseWriter for websocket.Accept whose hijacked
// connection counts the bytes written to it, from the first frame on.
type wireCounter struct {
	http.ResponseWriter
	written atomic.Int64
}

// Unwrap lets http.ResponseController reach the server's writer.
func (w *wireCounter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// Hijack hands over the connection, wrapped so that writes are counted.
// net/http has flushed the 101 response by then; the write buffer is
// replaced by one of the same size over the counting connection.
func (w *wireCounter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	conn, brw, err := http.NewResponseController(w.ResponseWriter).Hijack()
	if err != nil {
		return nil, nil, err
	}
	if err := brw.Flush(); err != nil {
		_ = conn.Close()
		return nil, nil, fmt.Errorf("flush the upgrade response: %w", err)
	}
	wc := &wireConn{Conn: conn, written: &w.written}
	return wc, bufio.NewReadWriter(brw.Reader, bufio.NewWriterSize(wc, brw.Writer.Size())), nil
}

// wireConn counts the bytes written to a connection.
type wireConn struct {
	net.Conn
	written *atomic.Int64
}

func (c *wireConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	c.written.Add(int64(n))
	return n, err
}
