package freelist

import "testing"

func TestList(t *testing.T) {
	var l List[*int]
	if _, ok := l.Get(); ok {
		t.Fatal("Get on an empty list found a value")
	}
	a, b := new(int), new(int)
	l.Put(a)
	l.Put(b)
	if v, _ := l.Get(); v != b {
		t.Fatal("Get did not return the value put last")
	}
	if v, _ := l.Get(); v != a {
		t.Fatal("second Get did not return the first value")
	}
	bounded := List[int]{Max: 2}
	for i := range 5 {
		bounded.Put(i)
	}
	if n := bounded.Len(); n != 2 {
		t.Fatalf("a list of Max 2 holds %d values", n)
	}
}
