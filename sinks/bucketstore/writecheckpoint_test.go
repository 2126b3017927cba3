package bucketstore

import (
	"context"
	"testing"

	"github.com/jackc/pglogrepl"
)

func TestWriteCheckpoints(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, _ := openStore(t)
	lsn := func(v uint64) pglogrepl.LSN { return pglogrepl.LSN(v) }
	at := func(user, client string, cpLSN uint64) (int64, bool) {
		t.Helper()
		n, ok, err := s.Reader().WriteCheckpointFor(ctx, user, client, lsn(cpLSN))
		if err != nil {
			t.Fatal(err)
		}
		return n, ok
	}
	if _, ok := at("u1", "c1", 1<<40); ok {
		t.Fatal("write checkpoint before any was created")
	}
	for i, src := range []uint64{100, 250} {
		n, err := s.Reader().CreateWriteCheckpoint(ctx, "u1", "c1", lsn(src))
		if err != nil || n != int64(i+1) {
			t.Fatalf("create #%d: %d %v", i+1, n, err)
		}
	}
	// The newest (2, at LSN 250) is due only once a checkpoint reaches 250.
	if _, ok := at("u1", "c1", 249); ok {
		t.Fatal("write checkpoint 2 reported at LSN 249")
	}
	if n, ok := at("u1", "c1", 250); !ok || n != 2 {
		t.Fatalf("at 250: %d %v, want 2", n, ok)
	}
	// A request that read an older LSN but upserted later must not lower the
	// LSN: write checkpoint 3 is due no earlier than 250.
	if n, err := s.Reader().CreateWriteCheckpoint(ctx, "u1", "c1", lsn(200)); err != nil || n != 3 {
		t.Fatalf("create #3: %d %v", n, err)
	}
	if _, ok := at("u1", "c1", 220); ok {
		t.Fatal("write checkpoint 3 reported below the LSN of 2")
	}
	if n, ok := at("u1", "c1", 300); !ok || n != 3 {
		t.Fatalf("at 300: %d %v, want 3", n, ok)
	}
	// Clients and users are separate.
	if _, ok := at("u1", "c2", 1<<40); ok {
		t.Fatal("another client's write checkpoint leaked")
	}
	if n, err := s.Reader().CreateWriteCheckpoint(ctx, "u2", "c1", lsn(10)); err != nil || n != 1 {
		t.Fatalf("u2: %d %v", n, err)
	}
}

// TestRequestWriteCheckpoint: a client-numbered write checkpoint keeps
// the larger of the stored and requested ids, and is due at the latest
// source position any request saw.
func TestRequestWriteCheckpoint(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, _ := openStore(t)
	for _, c := range []struct {
		req  int64
		lsn  uint64
		want int64
	}{{5, 100, 5}, {3, 150, 5}, {9, 120, 9}} {
		if n, err := s.Reader().RequestWriteCheckpoint(ctx, "u1", "c1", c.req, pglogrepl.LSN(c.lsn)); err != nil || n != c.want {
			t.Fatalf("request %d at %d: %d %v, want %d", c.req, c.lsn, n, err, c.want)
		}
	}
	if _, ok, _ := s.Reader().WriteCheckpointFor(ctx, "u1", "c1", 149); ok {
		t.Fatal("write checkpoint reported below the largest source position a request saw (150)")
	}
	if n, ok, err := s.Reader().WriteCheckpointFor(ctx, "u1", "c1", 150); err != nil || !ok || n != 9 {
		t.Fatalf("at 150: %d %v %v, want 9", n, ok, err)
	}
}
