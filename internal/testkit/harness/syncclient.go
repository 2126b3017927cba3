package harness

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"syscall"
	"time"

	"github.com/klauspost/compress/zstd"
	"go.mongodb.org/mongo-driver/v2/bson"
)

// SyncClient is a minimal PowerSync protocol client for tests that watch
// what clients see while syncpipe goes through failures: it keeps its
// buckets across checkpoints and reconnects (resuming with the op ids it
// has), verifies every bucket's checksum at each checkpoint_complete and
// hands the complete state to observe. Its connections alternate between
// what the SDKs ask for — BSON documents, here zstd-compressed — and
// NDJSON with gzip, so both encodings of the real binary are followed
// across reconnects and resumes.
type SyncClient struct {
	url, token string
	// observe gets every complete checkpoint: its op id and the rows of
	// every bucket ("type/id" → data).
	observe func(checkpoint string, rows map[string]map[string]string)

	// http makes the client's requests (nil: http.DefaultClient); pause
	// stops its reads (PauseAtFirstData). Both are set before Run.
	http  *http.Client
	pause *pauseGate

	mu      sync.Mutex
	buckets map[string]*clientBucket
	target  map[string]int32 // the checkpoint's bucket checksums
	errs    []error
	seen    int // complete checkpoints
	conns   int // connections made
}

type clientBucket struct {
	after string
	sum   uint32
	rows  map[string]string
}

// NewSyncClient returns a client of the sync API at api (host:port) that
// authenticates with token and hands every complete checkpoint to observe.
func NewSyncClient(api, token string, observe func(string, map[string]map[string]string)) *SyncClient {
	return &SyncClient{url: "http://" + api + "/sync/stream", token: token, observe: observe,
		buckets: map[string]*clientBucket{}, target: map[string]int32{}}
}

// Run syncs until ctx ends, reconnecting after every failure.
func (c *SyncClient) Run(ctx context.Context) {
	for ctx.Err() == nil {
		if err := c.once(ctx); err != nil && ctx.Err() == nil {
			select {
			case <-ctx.Done():
			case <-time.After(100 * time.Millisecond):
			}
		}
	}
}

// Failures returns the protocol errors seen (checksum mismatches, bad
// lines); connection failures are not errors, they are retried.
func (c *SyncClient) Failures() []error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]error(nil), c.errs...)
}

// Complete returns how many complete checkpoints the client saw.
func (c *SyncClient) Complete() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.seen
}

func (c *SyncClient) once(ctx context.Context) error {
	c.mu.Lock()
	var have []map[string]string
	for name, b := range c.buckets {
		have = append(have, map[string]string{"name": name, "after": b.after})
	}
	c.conns++
	asSDK := c.conns%2 == 1
	c.mu.Unlock()
	body, _ := json.Marshal(map[string]any{"buckets": have, "raw_data": true, "include_checksum": true, "client_id": "test"})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Token "+c.token)
	req.Header.Set("Content-Type", "application/json")
	if asSDK {
		req.Header.Set("Accept", "application/vnd.powersync.bson-stream;q=0.9,application/x-ndjson;q=0.8")
		req.Header.Set("Accept-Encoding", "zstd, gzip")
	}
	hc := c.http
	if hc == nil {
		hc = http.DefaultClient
	}
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("sync stream: %s", resp.Status)
	}
	next, done, err := c.reader(resp, asSDK)
	if err != nil {
		c.fail(err)
		return err
	}
	defer done()
	for {
		b, err := next()
		if errors.Is(err, errBadLine) {
			c.fail(err)
			return err
		}
		if err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err // the connection went: retried
		}
		data, err := c.line(b)
		if err != nil {
			c.fail(err)
			return err
		}
		if data && c.pause != nil {
			c.pause.hold(ctx)
		}
	}
}

// fail records a protocol error.
func (c *SyncClient) fail(err error) {
	c.mu.Lock()
	c.errs = append(c.errs, err)
	c.mu.Unlock()
}

// errBadLine marks a line the client could not read: a protocol error.
var errBadLine = errors.New("bad sync line")

// reader returns the reader of resp's lines as JSON and what to call once
// done, checking that the server answered in what was asked for.
func (c *SyncClient) reader(resp *http.Response, asSDK bool) (next func() ([]byte, error), done func(), err error) {
	ct, ce := resp.Header.Get("Content-Type"), resp.Header.Get("Content-Encoding")
	if !asSDK {
		if ct != "application/x-ndjson" || !resp.Uncompressed {
			return nil, nil, fmt.Errorf("NDJSON request with gzip: got %s, uncompressed by the client %v", ct, resp.Uncompressed)
		}
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 1<<20), 64<<20)
		return func() ([]byte, error) {
			if sc.Scan() {
				return sc.Bytes(), nil
			}
			if err := sc.Err(); err != nil {
				return nil, err
			}
			return nil, io.EOF
		}, func() {}, nil
	}
	if ct != "application/vnd.powersync.bson-stream" || ce != "zstd" {
		return nil, nil, fmt.Errorf("the SDK's request: got %s with %q, want BSON with zstd", ct, ce)
	}
	d, err := zstd.NewReader(resp.Body, zstd.WithDecoderConcurrency(1))
	if err != nil {
		return nil, nil, err
	}
	r := bufio.NewReader(d)
	return func() ([]byte, error) {
		var n [4]byte
		if _, err := io.ReadFull(r, n[:]); err != nil {
			return nil, err
		}
		size := int(binary.LittleEndian.Uint32(n[:]))
		if size < 5 || size > 64<<20 {
			return nil, fmt.Errorf("%w: BSON document of %d bytes", errBadLine, size)
		}
		doc := append(n[:], make([]byte, size-4)...)
		if _, err := io.ReadFull(r, doc[4:]); err != nil {
			return nil, err
		}
		js, err := bson.MarshalExtJSON(bson.Raw(doc), false, false)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", errBadLine, err)
		}
		return js, nil
	}, d.Close, nil
}

type wireBucket struct {
	Bucket   string `json:"bucket"`
	Checksum int32  `json:"checksum"`
}

type wireLine struct {
	Checkpoint *struct {
		LastOpID string       `json:"last_op_id"`
		Buckets  []wireBucket `json:"buckets"`
	} `json:"checkpoint"`
	Diff *struct {
		LastOpID string       `json:"last_op_id"`
		Updated  []wireBucket `json:"updated_buckets"`
		Removed  []string     `json:"removed_buckets"`
	} `json:"checkpoint_diff"`
	Data *struct {
		Bucket    string `json:"bucket"`
		NextAfter string `json:"next_after"`
		Data      []struct {
			OpID       string `json:"op_id"`
			Op         string `json:"op"`
			ObjectType string `json:"object_type"`
			ObjectID   string `json:"object_id"`
			Data       string `json:"data"`
			Checksum   uint32 `json:"checksum"`
		} `json:"data"`
	} `json:"data"`
	Complete *struct {
		LastOpID string `json:"last_op_id"`
	} `json:"checkpoint_complete"`
}

// line handles one line and reports whether it was a data line.
func (c *SyncClient) line(b []byte) (data bool, err error) {
	var l wireLine
	if err := json.Unmarshal(b, &l); err != nil {
		return false, fmt.Errorf("line %q: %w", b, err)
	}
	return l.Data != nil, c.apply(&l)
}

// apply applies a line to the client's buckets, verifying the checksums
// at checkpoint_complete.
func (c *SyncClient) apply(l *wireLine) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case l.Checkpoint != nil:
		c.target = map[string]int32{}
		for _, wb := range l.Checkpoint.Buckets {
			c.target[wb.Bucket] = wb.Checksum
		}
		for name := range c.buckets {
			if _, ok := c.target[name]; !ok {
				delete(c.buckets, name)
			}
		}
	case l.Diff != nil:
		for _, wb := range l.Diff.Updated {
			c.target[wb.Bucket] = wb.Checksum
		}
		for _, name := range l.Diff.Removed {
			delete(c.target, name)
			delete(c.buckets, name)
		}
	case l.Data != nil:
		bk := c.buckets[l.Data.Bucket]
		if bk == nil {
			bk = &clientBucket{rows: map[string]string{}}
			c.buckets[l.Data.Bucket] = bk
		}
		for _, op := range l.Data.Data {
			bk.sum += op.Checksum
			key := op.ObjectType + "/" + op.ObjectID
			switch op.Op {
			case "PUT":
				bk.rows[key] = op.Data
			case "REMOVE":
				delete(bk.rows, key)
			case "MOVE": // compacted: only its checksum counts
			case "CLEAR": // compacted: it replaces everything before it
				clear(bk.rows)
				bk.sum = op.Checksum
			default:
				return fmt.Errorf("op %s in bucket %s: unexpected %q", op.OpID, l.Data.Bucket, op.Op)
			}
		}
		bk.after = l.Data.NextAfter
	case l.Complete != nil:
		rows := map[string]map[string]string{}
		for name, want := range c.target {
			bk := c.buckets[name]
			var sum uint32
			if bk != nil {
				sum = bk.sum
				rows[name] = bk.rows
			}
			if int32(sum) != want {
				return fmt.Errorf("checkpoint %s: bucket %s checksum %d, want %d", l.Complete.LastOpID, name, int32(sum), want)
			}
		}
		c.seen++
		if c.observe != nil {
			c.observe(l.Complete.LastOpID, rows)
		}
	}
	return nil
}

// pauseGate stops a client's reads once (PauseAtFirstData).
type pauseGate struct {
	once   sync.Once
	paused chan struct{}
	resume chan struct{}
}

// hold stops the caller the first time, until resume closes or ctx ends.
func (g *pauseGate) hold(ctx context.Context) {
	g.once.Do(func() {
		close(g.paused)
		select {
		case <-g.resume:
		case <-ctx.Done():
		}
	})
}

// smallReceiveBuffer is the socket receive buffer of a client that
// PauseAtFirstData slows down until it is resumed; resumedReceiveBuffer
// is its buffer after that. Left at 4 KB, a resumed client read about
// 100 KB/s (each 4 KB window waits for a delayed ACK), so that a test's
// download of a few megabytes after a resume took a minute.
const (
	smallReceiveBuffer   = 4 << 10
	resumedReceiveBuffer = 1 << 20
)

// PauseAtFirstData makes the client stop reading once it has read its
// first data line, until resume is called: a slow client, whose first
// download a test makes span something (a takeover, say). Until resume its
// connections read through a small socket receive buffer, so that while it
// is paused the server's writes wait for it instead of filling buffers of
// megabytes; resume enlarges them. paused closes when it has stopped. Call
// it before Run.
func (c *SyncClient) PauseAtFirstData() (paused <-chan struct{}, resume func()) {
	g := &pauseGate{paused: make(chan struct{}), resume: make(chan struct{})}
	c.pause = g
	d := &net.Dialer{Timeout: 10 * time.Second}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	var mu sync.Mutex
	var slowed []*net.TCPConn
	resumed := false
	tr.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		mu.Lock()
		defer mu.Unlock()
		if tc, ok := conn.(*net.TCPConn); ok && !resumed {
			if err := tc.SetReadBuffer(smallReceiveBuffer); err != nil {
				conn.Close()
				return nil, err
			}
			slowed = append(slowed, tc)
		}
		return conn, nil
	}
	c.http = &http.Client{Transport: tr}
	var once sync.Once
	return g.paused, func() {
		once.Do(func() {
			mu.Lock()
			resumed = true
			for _, tc := range slowed {
				widen(tc) // a closed one fails: nothing to do
			}
			mu.Unlock()
			close(g.resume)
		})
	}
}

// widen gives a connection slowed by PauseAtFirstData its receive buffer
// back. Enlarging SO_RCVBUF alone is not enough: Linux clamped the
// connection's window to the small buffer (TCP_WINDOW_CLAMP) and keeps it
// there.
func widen(tc *net.TCPConn) {
	_ = tc.SetReadBuffer(resumedReceiveBuffer)
	if rc, err := tc.SyscallConn(); err == nil {
		_ = rc.Control(func(fd uintptr) {
			_ = syscall.SetsockoptInt(int(fd), syscall.IPPROTO_TCP, syscall.TCP_WINDOW_CLAMP, resumedReceiveBuffer)
		})
	}
}

// CountRows counts the rows of every bucket whose name has prefix … (any
// group) and definition def, e.g. `by_list[`.
func CountRows(rows map[string]map[string]string, def string) int {
	n := 0
	for name, rs := range rows {
		if i := bytes.IndexByte([]byte(name), '#'); i >= 0 && bytes.HasPrefix([]byte(name[i+1:]), []byte(def)) {
			n += len(rs)
		}
	}
	return n
}

// Sync runs a SyncClient of the Env's sync API, authenticated as sub
// (through Token), until the test ends: the test's cleanup stops it and
// waits for it, so it never outlives the test's connections.
func (e *Env) Sync(sub string, observe func(checkpoint string, rows map[string]map[string]string)) *SyncClient {
	e.T.Helper()
	c := NewSyncClient(e.API, e.Token(sub), observe)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		c.Run(ctx)
	}()
	e.T.Cleanup(func() {
		cancel()
		<-done
	})
	return c
}
