package api

import (
	"bytes"
	"context"
	"encoding/binary"
	"io"
	"net"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/syncpipe/syncpipe/internal/testkit/harness"
	"github.com/syncpipe/syncpipe/internal/todos"
)

// silentReplicationProxy relays PostgreSQL connections to upstream, except
// replication connections (startup parameter replication): those it
// accepts and never answers, like a network path that blackholes them.
func silentReplicationProxy(t *testing.T, upstream string) (uri string) {
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
	var mu sync.Mutex
	var conns []net.Conn
	t.Cleanup(func() {
		_ = ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			_ = c.Close()
		}
	})
	go func() {
		for {
			client, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, client)
			mu.Unlock()
			go func() {
				startup, replication, err := readStartup(client)
				if err != nil || replication {
					return // silent: the client's connect timeout must fire
				}
				server, err := net.Dial("tcp", target)
				if err != nil {
					_ = client.Close()
					return
				}
				mu.Lock()
				conns = append(conns, server)
				mu.Unlock()
				if _, err := server.Write(startup); err != nil {
					return
				}
				go func() { _, _ = io.Copy(server, client) }()
				_, _ = io.Copy(client, server)
			}()
		}
	}()
	return u.String()
}

// readStartup reads a client's startup message (answering an SSL or GSS
// request with "no" first) and reports whether it asks for replication.
func readStartup(c net.Conn) (msg []byte, replication bool, err error) {
	for {
		var head [8]byte
		if _, err := io.ReadFull(c, head[:]); err != nil {
			return nil, false, err
		}
		n := int(binary.BigEndian.Uint32(head[:4]))
		code := binary.BigEndian.Uint32(head[4:])
		body := make([]byte, n-8)
		if _, err := io.ReadFull(c, body); err != nil {
			return nil, false, err
		}
		if code == 80877103 || code == 80877104 { // SSLRequest, GSSENCRequest
			if _, err := c.Write([]byte{'N'}); err != nil {
				return nil, false, err
			}
			continue
		}
		params := bytes.Split(body, []byte{0})
		for i := 0; i+1 < len(params); i += 2 {
			if string(params[i]) == "replication" {
				replication = true
			}
		}
		return append(head[:], body...), replication, nil
	}
}

// TestSourceConnectTimeoutBoundsReplicationConnections runs `syncpipe run`
// against a source whose replication connections are never answered:
// source.connect_timeout must bound them (replication connections too), so
// the process reports the failure instead of hanging. A source that does
// not answer is waited for: the group's start is retried in the
// background, saying so each time.
func TestSourceConnectTimeoutBoundsReplicationConnections(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	e := harness.New(t, harness.Options{Data: &todos.Size{Lists: 2, Todos: 10, Seed: 1}})
	proxied := silentReplicationProxy(t, e.SourceURI)
	cfg, err := os.ReadFile(e.Config)
	if err != nil {
		t.Fatal(err)
	}
	from := []byte(`source: {uri: "` + e.SourceURI + `"}`)
	if !bytes.Contains(cfg, from) {
		t.Fatalf("the config has no %s:\n%s", from, cfg)
	}
	cfg = bytes.Replace(cfg, from, []byte(`source: {uri: "`+proxied+`", connect_timeout: 1s}`), 1)
	if err := os.WriteFile(e.Config, cfg, 0o644); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	c := e.Start()
	e.WaitFor(ctx, "the replication connection's timeout to be reported", func() bool {
		return c.Count(`"msg":"retrying after error","group":1,"unit":"group 1 start","attempt":2,`) > 0
	})
	// Two attempts of 1 s each and a backoff of at most 200 ms; generous
	// for a loaded machine, far from the 2 minutes of a hang.
	if took := time.Since(start); took > 30*time.Second {
		t.Fatalf("two replication connection attempts took %s with connect_timeout 1s", took.Round(time.Second))
	}
	if !strings.Contains(e.TailLogs(8<<10), "for replication: failed to connect") || !e.Logged("timeout") {
		t.Fatalf("the replication connection's timeout is not what was reported; logs:\n%s", e.TailLogs(4096))
	}
}

// TestStorageTimeoutBoundsStreamWrites locks the storage table every
// stream commit needs while `syncpipe run` streams:
// replication.storage_timeout must fail the blocked commit (logged, then
// retried) rather than let it wait for the lock, and replication must go
// on once the lock is gone.
func TestStorageTimeoutBoundsStreamWrites(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	e := harness.New(t, harness.Options{
		Replication: "storage_timeout: 300ms",
		Data:        &todos.Size{Lists: 5, Todos: 500, Seed: 2},
	})
	e.Start()
	e.WaitCaughtUp(ctx)
	tx, err := e.Storage.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(context.Background()) }()
	if _, err := tx.Exec(ctx, `LOCK TABLE syncpipe.groups IN ACCESS EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}
	e.Exec(ctx, `UPDATE todos SET description = 'while storage is locked' WHERE id IN (SELECT id FROM todos LIMIT 3)`)
	e.WaitFor(ctx, "the blocked storage write to time out", func() bool {
		return e.Logged(`"retrying after error"`) && strings.Contains(e.TailLogs(64<<10), "deadline exceeded")
	})
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	e.WaitCaughtUp(ctx)
	e.Alive()
}
