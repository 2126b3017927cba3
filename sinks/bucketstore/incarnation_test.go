package bucketstore

import (
	"context"
	"errors"
	"testing"
)

// TestWritesFencedByStorageRun checks that a write fenced with the storage
// run it read its progress from fails once storage is on another run. A
// real crash would disturb every test sharing the server, so the run
// changes the way incarnationSQL also counts: the archiver statistics are
// reset, and the pool reconnects.
func TestWritesFencedByStorageRun(t *testing.T) {
	ctx := context.Background()
	s, g := openStore(t)
	before := s.Leases().Epoch()
	if before == 0 {
		t.Fatal("an open store has seen no storage run")
	}
	f := Fence{Epoch: before}
	w := s.Writes().FencedSink(g.ID, f)
	if err := w.MakeDurable(ctx); err != nil {
		t.Fatalf("same run: %v", err)
	}
	if _, err := s.pool.Exec(ctx, "SELECT pg_stat_reset_shared('archiver')"); err != nil {
		t.Fatal(err)
	}
	s.pool.Reset() // the next connection is the first one to see the new run
	if err := w.MakeDurable(ctx); !errors.Is(err, ErrStorageRestarted) {
		t.Fatalf("MakeDurable after the run changed: %v, want ErrStorageRestarted", err)
	}
	if s.Leases().Epoch() == before {
		t.Fatalf("epoch still %d after the run changed", before)
	}
	if _, _, err := s.Writes().commitStream(ctx, g.ID, 100, f); !errors.Is(err, ErrStorageRestarted) {
		t.Fatalf("Commit after the run changed: %v, want ErrStorageRestarted", err)
	}
	if _, err := s.Writes().NewFencedWriter(ctx, g.ID, f); !errors.Is(err, ErrStorageRestarted) {
		t.Fatalf("writer after the run changed: %v, want ErrStorageRestarted", err)
	}
	fresh := s.Writes().FencedSink(g.ID, Fence{Epoch: s.Leases().Epoch()})
	if err := fresh.MakeDurable(ctx); err != nil {
		t.Fatalf("a writer fenced with the new run: %v", err)
	}
}
