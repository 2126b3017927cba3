package bucketstore

import (
	"context"
	"testing"
	"time"
)

// TestLeaseTakeoverReported: AcquireLease reports a takeover when another
// owner held the lease unreleased (here: expired), not for a first
// acquisition, a renewal, or a lease its holder released.
func TestLeaseTakeoverReported(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, _ := openStore(t)
	acquire := func(owner string) Lease {
		t.Helper()
		l, ok, err := s.Leases().AcquireLease(ctx, "unit", owner, time.Hour)
		if err != nil || !ok {
			t.Fatalf("%s: acquire: %v %v", owner, ok, err)
		}
		return l
	}
	if a := acquire("proc-a"); a.Takeover {
		t.Fatal("a first acquisition reported as a takeover")
	}
	a := acquire("proc-a")
	if a.Takeover {
		t.Fatal("the owner's re-acquisition reported as a takeover")
	}
	if err := s.Leases().RenewLease(ctx, a, -time.Second); err != nil { // expired, never released
		t.Fatal(err)
	}
	b := acquire("proc-b")
	if !b.Takeover {
		t.Fatal("taking an expired, unreleased lease not reported as a takeover")
	}
	if err := s.Leases().ReleaseLease(ctx, b); err != nil {
		t.Fatal(err)
	}
	if c := acquire("proc-c"); c.Takeover {
		t.Fatal("taking a released lease reported as a takeover")
	}
}
