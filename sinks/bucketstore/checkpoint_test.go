package bucketstore

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"

	"github.com/syncpipe/syncpipe/model"
)

// observation is what a reader saw in one consistent snapshot: a published
// checkpoint and how many ops at or below it were visible.
type observation struct {
	checkpoint int64
	visible    int
}

// TestCheckpointNeverAheadOfUncommittedOps is the checkpoint invariant
// under concurrency: 4 writers with random delays before their commits, each
// publishing after its write, and a reader polling checkpoints. The writes
// are snapshot writes, which run concurrently in one group (the pipelined
// flush writers of a unit, several units); a group's stream writes take
// turns under its stream lock. At the end,
// for every checkpoint C the reader saw, the ops ≤ C it saw must be all the
// ops ≤ C that ever committed: a checkpoint published while an op ≤ C was
// still uncommitted would show fewer.
func TestCheckpointNeverAheadOfUncommittedOps(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	s, g, todos := streamingStore(t)
	const writers, iterations = 4, 1000
	var lsn atomic.Uint64
	var next atomic.Int64
	done := make(chan struct{})
	var obs []observation
	readerErr := make(chan error, 1)
	go func() { readerErr <- pollCheckpoints(ctx, s, g.ID, done, &obs) }()

	var wg sync.WaitGroup
	errs := make(chan error, writers)
	published := atomic.Int64{}
	for wi := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w, err := s.Writes().NewWriter(ctx, g.ID)
			if err != nil {
				errs <- err
				return
			}
			defer w.Close()
			rng := rand.New(rand.NewPCG(uint64(wi), 7))
			w.beforeCommit = func() { time.Sleep(time.Duration(rng.IntN(2000)) * time.Microsecond) }
			for {
				i := next.Add(1)
				if i > iterations {
					return
				}
				var cs []model.Change
				for j := range 1 + rng.IntN(8) {
					n := int(i)*16 + j
					cs = append(cs, model.Change{Table: todos, Kind: model.Upsert, Key: key(n),
						Puts: []model.Put{put(fmt.Sprintf(`1#by_list["%d"]`, n%5), "todos", fmt.Sprint(n), `{}`)}})
				}
				res, err := w.WriteSnapshot(ctx, cs)
				if err != nil {
					errs <- err
					return
				}
				_, ok, err := s.Writes().Commit(ctx, g.ID, pglogrepl.LSN(lsn.Add(1)), res.MaxOpID)
				if err != nil {
					errs <- err
					return
				}
				if ok {
					published.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	close(done)
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if err := <-readerErr; err != nil {
		t.Fatal(err)
	}
	// A final keepalive publishes whatever was parked.
	cp, _, err := s.Writes().Commit(ctx, g.ID, pglogrepl.LSN(lsn.Add(1)), 0)
	if err != nil {
		t.Fatal(err)
	}
	all := ops(t, s, g.ID)
	if cp.OpID < all[len(all)-1].OpID {
		t.Fatalf("final checkpoint %d is below the last op %d", cp.OpID, all[len(all)-1].OpID)
	}
	committedAtOrBelow := func(c int64) int {
		n := 0
		for _, o := range all {
			if o.OpID <= c {
				n++
			}
		}
		return n
	}
	distinct := map[int64]bool{}
	for _, o := range obs {
		if want := committedAtOrBelow(o.checkpoint); o.visible != want {
			t.Fatalf("reader saw checkpoint %d with %d ops ≤ it visible, but %d such ops committed: checkpoint ran ahead of an uncommitted writer",
				o.checkpoint, o.visible, want)
		}
		distinct[o.checkpoint] = true
	}
	if len(obs) < 100 || len(distinct) < 20 || published.Load() < 20 {
		t.Fatalf("test too weak: %d observations of %d distinct checkpoints, %d publishes", len(obs), len(distinct), published.Load())
	}
	t.Logf("%d observations, %d distinct checkpoints, %d publishes, %d ops", len(obs), len(distinct), published.Load(), len(all))
}

// pollCheckpoints reads, in one REPEATABLE READ snapshot each time (as a
// sync client's view would be), the group's checkpoint and the ops at or
// below it, until done is closed.
func pollCheckpoints(ctx context.Context, s *Store, group int, done <-chan struct{}, obs *[]observation) error {
	lay, err := s.layout(ctx, group)
	if err != nil {
		return err
	}
	opsTable := lay.ops
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return err
	}
	defer conn.Release()
	for {
		select {
		case <-done:
			return nil
		default:
		}
		var o observation
		err := pgx.BeginTxFunc(ctx, conn, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
			if err := tx.QueryRow(ctx, "SELECT coalesce(last_checkpoint, 0) FROM groups WHERE id = $1", group).Scan(&o.checkpoint); err != nil {
				return err
			}
			return tx.QueryRow(ctx, "SELECT count(*) FROM "+opsTable+" WHERE group_id = $1 AND op_id <= $2", group, o.checkpoint).Scan(&o.visible)
		})
		if err != nil {
			return fmt.Errorf("poll checkpoint: %w", err)
		}
		if o.checkpoint > 0 {
			*obs = append(*obs, o)
		}
	}
}

// TestOpIDsUniqueUnderConcurrentWriters writes from 4 writers at once and
// checks every op id is used once and all ops arrived.
func TestOpIDsUniqueUnderConcurrentWriters(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, g := openStore(t)
	todos := registerTable(t, s, g.ID, "todos")
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for wi := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w, err := s.Writes().NewWriter(ctx, g.ID)
			if err != nil {
				errs <- err
				return
			}
			defer w.Close()
			for b := range 20 {
				var cs []model.Change
				for j := range 50 {
					n := wi*100000 + b*100 + j
					cs = append(cs, model.Change{Table: todos, Kind: model.Upsert, Key: key(n),
						Puts: []model.Put{put(`1#global[]`, "todos", fmt.Sprint(n), `{}`), put(`1#by_list["x"]`, "todos", fmt.Sprint(n), `{}`)}})
				}
				write := w.WriteChanges
				if b%2 == 0 {
					write = w.WriteSnapshot
				}
				if _, err := write(ctx, cs); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	var total, distinct int
	err := s.pool.QueryRow(ctx, "SELECT count(*), count(DISTINCT op_id) FROM "+testLayout(t, s, g.ID).ops+" WHERE group_id = $1", g.ID).Scan(&total, &distinct)
	if err != nil {
		t.Fatal(err)
	}
	if total != 4*20*50*2 || distinct != total {
		t.Fatalf("%d ops with %d distinct op ids, want %d unique", total, distinct, 4*20*50*2)
	}
}
