package logrepl_test

import (
	"context"
	"errors"
	"log"
	"time"

	"github.com/syncpipe/syncpipe/sources/postgres/logrepl"
)

// Example shows the streaming loop: read whole transactions, make them
// durable, then acknowledge. store stands for the caller's storage.
func Example() {
	ctx := context.Background()
	var store interface {
		Resume() logrepl.LSN         // last durable EndLSN (0: none yet)
		Write(b logrepl.Batch) error // durable when it returns nil
	}
	conn, err := logrepl.Connect(ctx, "postgres://syncpipe@db/app")
	if err != nil {
		log.Fatal(err) // one actionable line, e.g. a missing REPLICATION grant
	}
	defer conn.Close(ctx)
	if _, err := logrepl.CreateSlot(ctx, conn, "syncpipe_1"); err != nil {
		log.Fatal(err)
	}
	s, err := logrepl.Start(ctx, conn, logrepl.Config{Slot: "syncpipe_1", StartLSN: store.Resume()})
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close(ctx)
	for {
		b, err := s.Next(ctx, logrepl.BatchLimits{MaxChanges: 5000, MaxWait: 50 * time.Millisecond})
		if errors.Is(err, logrepl.ErrSlotMissing) || errors.Is(err, logrepl.ErrSlotLost) {
			log.Fatal(err) // start a new replication group
		}
		if err != nil {
			log.Print(err) // e.g. ErrReceiveTimeout: reconnect and Start from store.Resume()
			return
		}
		if err := store.Write(b); err != nil {
			log.Fatal(err)
		}
		s.Ack(b.EndLSN) // no-op for a Partial batch (EndLSN 0)
	}
}
