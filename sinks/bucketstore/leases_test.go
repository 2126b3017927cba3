package bucketstore

import (
	"context"
	"errors"
	"testing"
	"time"
)

func TestLeaseExclusiveAndTakenOverAfterExpiry(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, _ := openStore(t)
	a, ok, err := s.AcquireLease(ctx, "group-1/stream", "proc-a", time.Hour)
	if err != nil || !ok {
		t.Fatalf("first acquire: %v %v", ok, err)
	}
	if _, ok, err := s.AcquireLease(ctx, "group-1/stream", "proc-b", time.Hour); err != nil || ok {
		t.Fatalf("second owner got a held lease: %v %v", ok, err)
	}
	again, ok, err := s.AcquireLease(ctx, "group-1/stream", "proc-a", time.Hour)
	if err != nil || !ok || again.Token != a.Token {
		t.Fatalf("owner re-acquire: %+v %v %v, want token %d", again, ok, err, a.Token)
	}
	if err := s.RenewLease(ctx, a, time.Hour); err != nil {
		t.Fatal(err)
	}
	// Let a's lease expire (as if proc-a died) and have b take it over.
	if err := s.RenewLease(ctx, a, -time.Second); err != nil {
		t.Fatal(err)
	}
	b, ok, err := s.AcquireLease(ctx, "group-1/stream", "proc-b", time.Hour)
	if err != nil || !ok || b.Token <= a.Token {
		t.Fatalf("take-over of an expired lease: %+v %v %v", b, ok, err)
	}
	if err := s.RenewLease(ctx, a, time.Hour); !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("old holder renewed a taken-over lease: %v", err)
	}
	if err := s.ReleaseLease(ctx, b); err != nil {
		t.Fatal(err)
	}
	if _, ok, err := s.AcquireLease(ctx, "group-1/stream", "proc-c", time.Hour); err != nil || !ok {
		t.Fatalf("released lease not free: %v %v", ok, err)
	}
}
