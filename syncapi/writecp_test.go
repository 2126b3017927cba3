package syncapi

import (
	"context"
	"testing"

	"github.com/jackc/pglogrepl"

	"github.com/syncpipe/syncpipe/sinks/bucketstore"
)

// wcStore answers write checkpoint reads from a map and counts them.
type wcStore struct {
	WriteCheckpointStore
	have        map[bucketstore.WriteCheckpointClient]int64
	reads, ones int
}

func (s *wcStore) WriteCheckpointsFor(_ context.Context, cs []bucketstore.WriteCheckpointClient, _ pglogrepl.LSN) (map[bucketstore.WriteCheckpointClient]int64, error) {
	s.reads++
	out := map[bucketstore.WriteCheckpointClient]int64{}
	for _, c := range cs {
		if n, ok := s.have[c]; ok {
			out[c] = n
		}
	}
	return out, nil
}

func (s *wcStore) WriteCheckpointFor(_ context.Context, userID, clientID string, _ pglogrepl.LSN) (int64, bool, error) {
	s.ones++
	n, ok := s.have[bucketstore.WriteCheckpointClient{UserID: userID, ClientID: clientID}]
	return n, ok, nil
}

// TestWriteCheckpointPeek: peek answers only from a finished read at the
// LSN that included the client — as get would — and never reads itself.
func TestWriteCheckpointPeek(t *testing.T) {
	a := bucketstore.WriteCheckpointClient{UserID: "a", ClientID: "1"}
	b := bucketstore.WriteCheckpointClient{UserID: "b", ClientID: "1"}
	late := bucketstore.WriteCheckpointClient{UserID: "c", ClientID: "1"}
	st := &wcStore{have: map[bucketstore.WriteCheckpointClient]int64{a: 7, late: 9}}
	w := newWriteCheckpoints(st)
	defer w.register(a)()
	defer w.register(b)()
	if _, _, ok := w.peek(a, 100); ok {
		t.Fatal("peek answered before any read")
	}
	if n, due, err := w.get(context.Background(), a, 100); err != nil || !due || n != 7 {
		t.Fatalf("get a: %d %v %v, want 7 due", n, due, err)
	}
	defer w.register(late)()
	for _, c := range []struct {
		client bucketstore.WriteCheckpointClient
		lsn    pglogrepl.LSN
		n      int64
		due    bool
		ok     bool
	}{
		{a, 100, 7, true, true},
		{b, 100, 0, false, true},
		{late, 100, 0, false, false}, // registered after the read: get reads for it alone
		{a, 200, 0, false, false},    // no read at this LSN yet
	} {
		n, due, ok := w.peek(c.client, c.lsn)
		if n != c.n || due != c.due || ok != c.ok {
			t.Errorf("peek %s at %d: %d %v %v, want %d %v %v", c.client.UserID, c.lsn, n, due, ok, c.n, c.due, c.ok)
		}
	}
	if st.reads != 1 || st.ones != 0 {
		t.Errorf("%d shared reads and %d single ones, want 1 and 0", st.reads, st.ones)
	}
}
