package crash

import (
	"context"

	"github.com/syncpipe/syncpipe/internal/testkit/harness"
)

// maxOpID is the highest op id in storage.
func maxOpID(ctx context.Context, e *harness.Env) int64 {
	e.T.Helper()
	var n int64
	if err := e.Storage.QueryRow(ctx, "SELECT coalesce(max(op_id), 0) FROM syncpipe.bucket_ops").Scan(&n); err != nil {
		e.T.Fatal(err)
	}
	return n
}

// onePutPerRow checks that the ops after op id before are exactly one PUT
// for each of rows todos (each is in one bucket) and nothing else.
func onePutPerRow(ctx context.Context, e *harness.Env, before int64, rows int) {
	e.T.Helper()
	var puts, distinct, other int
	err := e.Storage.QueryRow(ctx, `SELECT count(*) FILTER (WHERE op = 1),
			count(DISTINCT (bucket_name, object_id)) FILTER (WHERE op = 1), count(*) FILTER (WHERE op <> 1)
		FROM syncpipe.bucket_ops WHERE op_id > $1 AND object_type = 'todos'`, before).Scan(&puts, &distinct, &other)
	if err != nil {
		e.T.Fatal(err)
	}
	if puts != rows || distinct != rows || other != 0 {
		e.T.Fatalf("the transaction of %d row updates wrote %d PUTs for %d rows and %d other ops; want one PUT per row", rows, puts, distinct, other)
	}
}

// walsenders counts the source's walsender processes: those on this
// test's source database (the cluster is shared by the package's tests).
func walsenders(ctx context.Context, e *harness.Env) int {
	e.T.Helper()
	var n int
	if err := e.Src.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
		WHERE backend_type = 'walsender' AND datname = current_database()`).Scan(&n); err != nil {
		e.T.Fatal(err)
	}
	return n
}
