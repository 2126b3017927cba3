package pipeline

import (
	"math/rand/v2"
	"testing"
)

func TestReorderReleasesInSeqOrder(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for round := range 50 {
		n := 1 + rng.IntN(500)
		perm := rng.Perm(n)
		r := newReorder[int](4) // small on purpose: forces growth with held stragglers
		var got []int
		for _, seq := range perm {
			if err := r.put(uint64(seq), seq*10); err != nil {
				t.Fatal(err)
			}
			for {
				v, ok := r.pop()
				if !ok {
					break
				}
				got = append(got, v)
			}
		}
		if len(got) != n || r.held != 0 {
			t.Fatalf("round %d: released %d of %d, %d held", round, len(got), n, r.held)
		}
		for i, v := range got {
			if v != i*10 {
				t.Fatalf("round %d: position %d released value %d", round, i, v)
			}
		}
	}
}

func TestReorderRejectsDuplicates(t *testing.T) {
	r := newReorder[int](8)
	if err := r.put(3, 0); err != nil {
		t.Fatal(err)
	}
	if err := r.put(3, 0); err == nil {
		t.Fatal("duplicate seq accepted")
	}
	if err := r.put(0, 0); err != nil {
		t.Fatal(err)
	}
	if _, ok := r.pop(); !ok {
		t.Fatal("seq 0 not released")
	}
	if err := r.put(0, 0); err == nil {
		t.Fatal("already released seq accepted")
	}
}
