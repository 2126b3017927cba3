package benchmarks

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// steady runs t's syncpipe while transactions arrive at opt.SteadyRate changes
// per second for opt.SteadyFor and returns each transaction's lag: from
// its commit returning to the client until the first published checkpoint
// that includes it. Every transaction also sets the marker row's seq, and
// the marker's op at a checkpoint says which transactions it includes.
func (sr *streamRun) steady(ctx context.Context, t *streamTarget) (lags []time.Duration, achieved float64, st ChildStats, err error) {
	opt := sr.opt
	child, err := sr.startChild(ctx, t)
	if err != nil {
		return nil, 0, st, err
	}
	defer func() {
		cst, stopErr := child.Stop()
		st = cst
		if err == nil {
			err = stopErr
		}
	}()
	if _, err := sr.waitCaughtUp(ctx, t, child); err != nil {
		return nil, 0, st, err
	}
	obs, err := pgx.Connect(ctx, t.storageURI())
	if err != nil {
		return nil, 0, st, fmt.Errorf("connect to storage: %w", err)
	}
	defer obs.Close(context.WithoutCancel(ctx))
	opsRel, err := opsRelation(ctx, obs)
	if err != nil {
		return nil, 0, st, err
	}
	if _, err := obs.Exec(ctx, "LISTEN syncpipe_checkpoints"); err != nil {
		return nil, 0, st, err
	}
	var base int64
	if err := sr.src.QueryRow(ctx, `SELECT seq FROM bench_marks WHERE id = 1`).Scan(&base); err != nil {
		return nil, 0, st, err
	}

	var mu sync.Mutex
	committed := map[int64]time.Time{}
	var last int64 // highest seq committed
	genDone := make(chan error, 1)
	logf(opt.Log, "%s: steady load: %d changes/s for %s…", t.name(), opt.SteadyRate, opt.SteadyFor)
	start := time.Now()
	go func() {
		every := time.Duration(float64(time.Second) * float64(opt.SteadyTxnRows) / float64(opt.SteadyRate))
		tick := time.NewTicker(every)
		defer tick.Stop()
		seq := base
		for time.Since(start) < opt.SteadyFor {
			seq++
			_, err := sr.src.Exec(ctx, `WITH u AS (UPDATE todos SET completed = NOT completed WHERE id = ANY($1::uuid[]) RETURNING 1)
				UPDATE bench_marks SET seq = $2 WHERE id = 1`, sr.take(opt.SteadyTxnRows), seq)
			if err != nil {
				genDone <- fmt.Errorf("steady load: %w", err)
				return
			}
			mu.Lock()
			committed[seq], last = time.Now(), seq
			mu.Unlock()
			select {
			case <-tick.C:
			case <-ctx.Done():
				genDone <- ctx.Err()
				return
			}
		}
		genDone <- nil
	}()

	seen := map[int64]time.Time{}
	covered := base
	generating := true
	var stopped time.Time
	for {
		if generating {
			select {
			case err := <-genDone:
				if err != nil {
					return nil, 0, st, err
				}
				generating, stopped = false, time.Now()
			default:
			}
		}
		mu.Lock()
		final := last
		mu.Unlock()
		if !generating && covered >= final {
			break
		}
		if !generating && time.Since(stopped) > 30*time.Second {
			return nil, 0, st, fmt.Errorf("steady load: checkpoints cover %d of %d transactions 30 s after the load stopped\n%s", covered-base, final-base, child.Tail())
		}
		// Short waits, so the end of the load is noticed without a
		// notification; a timeout leaves the connection usable.
		wctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		n, err := obs.WaitForNotification(wctx)
		cancel()
		if err != nil {
			if ctx.Err() != nil || !pgconn.Timeout(err) {
				return nil, 0, st, fmt.Errorf("steady load: waiting for checkpoints: %w", err)
			}
			continue
		}
		at := time.Now()
		var note checkpointNote
		if err := json.Unmarshal([]byte(n.Payload), &note); err != nil {
			return nil, 0, st, fmt.Errorf("checkpoint notification %q: %w", n.Payload, err)
		}
		var data string
		err = obs.QueryRow(ctx, `SELECT data FROM `+opsRel+` WHERE group_id = $1 AND bucket_name = $2 AND op_id <= $3
			ORDER BY op_id DESC LIMIT 1`, note.Group, fmt.Sprintf("%d#marks[]", note.Group), note.Checkpoint).Scan(&data)
		if err != nil {
			return nil, 0, st, fmt.Errorf("read the marker at checkpoint %d: %w", note.Checkpoint, err)
		}
		var mark struct{ Seq int64 }
		if err := json.Unmarshal([]byte(data), &mark); err != nil {
			return nil, 0, st, fmt.Errorf("marker data %q: %w", data, err)
		}
		for s := covered + 1; s <= mark.Seq; s++ {
			seen[s] = at
		}
		covered = max(covered, mark.Seq)
	}
	elapsed := time.Since(start)
	mu.Lock()
	defer mu.Unlock()
	for s, c := range committed {
		// A checkpoint can be seen before the generator's Exec returned
		// on a busy machine: that lag is zero, not negative.
		lags = append(lags, max(seen[s].Sub(c), 0))
	}
	return lags, float64(len(committed)*opt.SteadyTxnRows) / min(elapsed, opt.SteadyFor).Seconds(), st, nil
}
