package postgres_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/syncpipe/syncpipe/pipeline"
	"github.com/syncpipe/syncpipe/sources/postgres"
)

// Snapshot one table in up to four key ranges (sequentially here; each range
// can have its own connection and run in parallel), committing the LastKey
// of every chunk as its resume point.
func Example() {
	ctx := context.Background()
	cfg, err := postgres.ConnConfig("postgres://app@127.0.0.1:5432/app", postgres.KeepAlive{})
	if err != nil {
		panic(err)
	}
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		panic(err)
	}
	defer conn.Close(ctx)

	if err := postgres.Preflight(ctx, conn, postgres.PreflightOptions{Tables: []string{"public.todos"}}); err != nil {
		panic(err) // one actionable line per problem
	}
	tables, err := postgres.Discover(ctx, conn, []string{"public.todos"})
	if err != nil {
		panic(err)
	}
	ranges, err := postgres.SplitRanges(ctx, conn, tables[0], 4, 250000)
	if err != nil {
		panic(err)
	}
	for _, rng := range ranges {
		r := postgres.NewSnapshotReader(conn, tables[0], rng, postgres.SnapshotOptions{ChunkRows: 10000})
		for {
			ch, err := r.Next(ctx)
			if errors.Is(err, pipeline.ErrEndOfInput) {
				break
			}
			if err != nil {
				panic(err)
			}
			fmt.Println(len(ch.Rows), "rows up to key", ch.LastKey)
		}
	}
}
