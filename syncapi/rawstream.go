package syncapi

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"time"
)

// streamOut is where a sync stream's bytes go: net/http's response
// (httpOut) or the connection taken over from net/http (rawOut).
type streamOut interface {
	Write(p []byte) (int, error)
	// SetWriteDeadline bounds the writes from now on; it may fail with
	// http.ErrNotSupported, and then none applies.
	SetWriteDeadline(t time.Time) error
	// Flush sends what was written so far.
	Flush() error
	// end ends the body after the last line (net/http ends it when the
	// handler returns).
	end() error
}

// httpOut is a stream answered through net/http: the fallback where the
// connection cannot be taken over (HTTP/1.0, HTTP/2, test recorders).
type httpOut struct {
	w  http.ResponseWriter
	rc *http.ResponseController
}

func (o httpOut) Write(p []byte) (int, error)        { return o.w.Write(p) }
func (o httpOut) SetWriteDeadline(t time.Time) error { return o.rc.SetWriteDeadline(t) }
func (o httpOut) Flush() error                       { return o.rc.Flush() }
func (o httpOut) end() error                         { return o.rc.Flush() }

// rawOut is a sync stream's HTTP/1.1 response written straight to its
// connection, in chunked transfer coding, after net/http handed the
// connection over (Hijack).
//
// Why: for every connection it serves, net/http keeps a goroutine whose
// stack holds its serving frames (16 KB at the depth where a stream
// waits), 4 KB read and 4 KB write buffers, a 2 KB chunking buffer, the
// request with its headers, and a second goroutine reading ahead to
// notice the client leaving: about half of what an idle stream cost
// (issue 17's bar is < 50 KB per idle connection). A taken-over stream
// keeps the connection, one small goroutine reading ahead, and its own
// state. Each line is one chunk written with one writev (no buffer), and
// the connection closes when the stream ends (clients reconnect to
// resume anyway).
type rawOut struct {
	conn net.Conn  // for deadlines and the close
	wire net.Conn  // for the writes: conn unwrapped (see innerConn)
	size [20]byte  // a chunk's size line
	vec  [3][]byte // size line, data, CRLF
}

var crlf = []byte("\r\n")

// Write sends p as one chunk. An empty p sends nothing: an empty chunk
// would end the body.
func (o *rawOut) Write(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	line := strconv.AppendUint(o.size[:0], uint64(len(p)), 16)
	line = append(line, crlf...)
	o.vec = [3][]byte{line, p, crlf}
	bufs := net.Buffers(o.vec[:])
	if _, err := bufs.WriteTo(o.wire); err != nil {
		return 0, err
	}
	return len(p), nil
}

func (o *rawOut) SetWriteDeadline(t time.Time) error { return o.conn.SetWriteDeadline(t) }

// Flush does nothing: Write sends at once.
func (o *rawOut) Flush() error { return nil }

// lastChunk ends a chunked body.
var lastChunk = []byte("0\r\n\r\n")

// end sends the last chunk (within the write deadline set).
func (o *rawOut) end() error {
	_, err := o.wire.Write(lastChunk)
	return err
}

// takeOver takes the connection of r from net/http, if it can, and
// writes the response head there: status 200, the headers set on w, and
// chunked coding. It returns the connection's writer and a context
// derived from r's values that ends when the client goes away (a
// goroutine reads ahead on the connection until it fails). out is nil
// where the connection cannot be taken over (nothing was written: answer
// through net/http), and err is set when it was taken but the head could
// not be sent (the connection is closed).
func takeOver(w http.ResponseWriter, r *http.Request) (out *rawOut, ctx context.Context, cancel context.CancelFunc, err error) {
	if !r.ProtoAtLeast(1, 1) || r.ProtoMajor != 1 {
		return nil, nil, nil, nil
	}
	// The buffers net/http hands over with the connection are dropped:
	// nothing was written to them yet, and the stream reads nothing more.
	// Hijack fails before it takes anything (not supported, or the
	// response started): then net/http answers.
	conn, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		return nil, nil, nil, nil
	}
	// net/http's deadlines (withBodyDeadline's read deadline) stay set on
	// a connection it hands over.
	_ = conn.SetDeadline(time.Time{})
	h := w.Header()
	h.Set("Date", time.Now().UTC().Format(http.TimeFormat))
	h.Set("Transfer-Encoding", "chunked")
	h.Set("Connection", "close")
	var head bytes.Buffer
	head.WriteString("HTTP/1.1 200 OK\r\n")
	_ = h.Write(&head)
	head.WriteString("\r\n")
	_ = conn.SetWriteDeadline(time.Now().Add(headWriteTimeout))
	if _, err := conn.Write(head.Bytes()); err != nil {
		_ = conn.Close()
		return nil, nil, nil, fmt.Errorf("%w: response head: %w", errClientWrite, err)
	}
	ctx, cancel = context.WithCancel(context.WithoutCancel(r.Context()))
	go readAhead(conn, cancel)
	return &rawOut{conn: conn, wire: innerConn(conn)}, ctx, cancel, nil
}

// headWriteTimeout bounds sending a taken-over stream's response head.
const headWriteTimeout = 10 * time.Second

// readAhead reads the connection until it fails — the client closed it,
// or the stream did — and then calls gone. A sync client sends nothing
// after its request; what it might send is dropped.
func readAhead(conn net.Conn, gone context.CancelFunc) {
	var buf [64]byte
	for {
		if _, err := conn.Read(buf[:]); err != nil {
			gone()
			return
		}
	}
}
