package bucketstore

import (
	"context"
	"fmt"
	"testing"

	"github.com/jackc/pglogrepl"
)

// TestWriteCheckpointsForMany: the batched read answers, for every asked
// client, exactly what WriteCheckpointFor answers one by one.
func TestWriteCheckpointsForMany(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, _ := openStore(t)
	var clients []WriteCheckpointClient
	for u := range 4 {
		for c := range 3 {
			cl := WriteCheckpointClient{UserID: fmt.Sprintf("u%d", u), ClientID: fmt.Sprintf("c%d", c)}
			clients = append(clients, cl)
			for k := range (u + c) % 3 { // 0, 1 or 2 write checkpoints, at LSNs 100·(k+1+u)
				if _, err := s.Reader().CreateWriteCheckpoint(ctx, cl.UserID, cl.ClientID, pglogrepl.LSN(100*(k+1+u))); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	for _, at := range []pglogrepl.LSN{0, 150, 250, 1000} {
		got, err := s.Reader().WriteCheckpointsFor(ctx, clients, at)
		if err != nil {
			t.Fatal(err)
		}
		for _, cl := range clients {
			n, ok, err := s.Reader().WriteCheckpointFor(ctx, cl.UserID, cl.ClientID, at)
			if err != nil {
				t.Fatal(err)
			}
			if g, gok := got[cl]; gok != ok || g != n {
				t.Errorf("at %s, %+v: batched %d/%v, single %d/%v", at, cl, g, gok, n, ok)
			}
		}
	}
	if got, err := s.Reader().WriteCheckpointsFor(ctx, nil, 1000); err != nil || len(got) != 0 {
		t.Fatalf("no clients: %v %v", got, err)
	}
}
