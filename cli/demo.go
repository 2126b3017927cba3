package cli

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/syncpipe/syncpipe/config"
	"github.com/syncpipe/syncpipe/internal/pgcluster"
	"github.com/syncpipe/syncpipe/internal/replication"
	"github.com/syncpipe/syncpipe/internal/telemetry"
	"github.com/syncpipe/syncpipe/internal/todos"
	"github.com/syncpipe/syncpipe/sinks/bucketstore"
)

// runDemo starts a throwaway cluster with a source and a storage database,
// loads the sample todo lists and keeps running until interrupted, then
// stops the cluster and removes its directory.
func runDemo(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("demo", stderr)
	lists := fs.Int("lists", todos.Demo.Lists, "number of todo lists to generate")
	nTodos := fs.Int("todos", todos.Demo.Todos, "number of todos to generate")
	exit := fs.Bool("exit", false, "stop after loading instead of waiting for Ctrl-C (for scripts)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *lists < 1 || *nTodos < 0 {
		return usagef("demo: --lists must be ≥ 1 and --todos ≥ 0")
	}
	log, err := telemetry.NewLogger(stderr, "info", "auto")
	if err != nil {
		return err
	}

	fmt.Fprintln(stdout, "syncpipe demo: starting a throwaway PostgreSQL cluster…")
	cluster, err := pgcluster.Start(ctx, pgcluster.Options{Logger: log})
	if err != nil {
		return fmt.Errorf("start postgres: %w", err)
	}
	defer func() {
		if err := cluster.Stop(); err != nil {
			fmt.Fprintf(stderr, "syncpipe demo: cleaning up %s: %v\n", cluster.Dir(), err)
			return
		}
		fmt.Fprintf(stdout, "syncpipe demo: PostgreSQL stopped and %s removed.\n", cluster.Dir())
	}()

	for _, db := range []string{"app", "syncpipe"} {
		if err := cluster.CreateDatabase(ctx, db); err != nil {
			return err
		}
	}
	size := todos.Size{Lists: *lists, Todos: *nTodos, Seed: todos.Demo.Seed}
	start := time.Now()
	conn, err := pgx.Connect(ctx, cluster.URI("app"))
	if err != nil {
		return fmt.Errorf("connect to the source database: %w", err)
	}
	_, err = todos.Load(ctx, conn, size)
	var version, list string
	if err == nil {
		err = conn.QueryRow(ctx, "SELECT current_setting('server_version')").Scan(&version)
	}
	if err == nil {
		// A list of the demo's user, to subscribe to its todos.
		err = conn.QueryRow(ctx, "SELECT coalesce(min(id::text), '') FROM lists WHERE owner_id = $1", demoUser).Scan(&list)
	}
	_ = conn.Close(context.Background())
	if err != nil {
		return err
	}
	loadTime := time.Since(start)

	cfgPath, err := writeDemoFiles(cluster)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, `
  PostgreSQL %s   127.0.0.1:%d   (data in %s)
  source   %s   %d lists, %d todos loaded in %s
  storage  %s
  config   %s

`, version, cluster.Port(), cluster.Dir(),
		cluster.URI("app"), size.Lists, size.Todos, loadTime.Round(time.Millisecond),
		cluster.URI("syncpipe"), cfgPath)

	cfg, err := config.Load(cfgPath)
	if err != nil {
		return err
	}
	store, err := bucketstore.Open(ctx, bucketstore.Config{URI: cfg.Storage.URI, ConnectTimeout: cfg.Storage.ConnectTimeout, Logger: log})
	if err != nil {
		return err
	}
	defer store.Close()
	snapshotDone := make(chan struct{})
	start = time.Now()
	rep := replication.New(replication.Options{Config: cfg, Store: store, Logger: log,
		OnSnapshotDone: func(int) { close(snapshotDone) }})
	runCtx, stop := context.WithCancel(ctx)
	errc := make(chan error, 1)
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		errc <- rep.Run(runCtx)
	}()
	// Replication has stopped before the store closes: its units give
	// their leases up as they stop, which a closed pool cannot do (a WARN
	// at every Ctrl-C).
	defer func() {
		stop()
		<-stopped
	}()
	fmt.Fprintln(stdout, "syncpipe demo: replicating…")
	select {
	case <-snapshotDone:
	case err := <-errc:
		if ctx.Err() != nil {
			return nil // interrupted
		}
		return fmt.Errorf("replication stopped: %w", err)
	case <-ctx.Done():
		return nil
	}
	elapsed := time.Since(start)
	ops, buckets, err := store.Size(ctx)
	if err != nil {
		return err
	}
	tel, err := telemetry.Setup(ctx, telemetry.Options{})
	if err != nil {
		return err
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = tel.Shutdown(sctx)
	}()
	api, err := startAPI(ctx, cfg, store, tel, log)
	if err != nil {
		return err
	}
	defer api.shutdown(time.Second)
	token, err := mintToken(cfg.API.Auth, demoUser, 24*time.Hour)
	if err != nil {
		return err
	}
	endpoint := "http://" + api.Addr()
	fmt.Fprintf(stdout, `syncpipe demo: snapshot done in %s: %d ops in %d buckets (%.0f rows/s); now streaming changes.

  Sync API  %s   (token for user %q, valid 24h below)
  The rules are Sync Streams (%s): the user's lists sync by default,
  a list's todos once the app subscribes to list_todos with its list_id.
  Connect the real PowerSync client (@powersync/node, installed from npm) and subscribe:
    (cd testdata/client && npm ci --no-audit --no-fund) && \
    echo '{"cmd":"subscribe","stream":"list_todos","params":{"list_id":"%s"}}' | \
    testdata/client/node_modules/.bin/node testdata/client/sync.mjs --endpoint %s --token %s
  Or watch the raw protocol:
    curl -sN -H 'Authorization: Token %s' -d '{"raw_data":true,"streams":{"subscriptions":[{"stream":"list_todos","parameters":{"list_id":"%s"}}]}}' %s/sync/stream | head -c 600
  Change the source:  psql '%s' -c "UPDATE todos SET completed = true WHERE list_id = '%s'"
  See the new ops:    psql '%s' -c "SELECT op_id, op, bucket_name, object_id FROM syncpipe.bucket_data ORDER BY op_id DESC LIMIT 5"
`, elapsed.Round(time.Millisecond), ops, buckets, float64(size.Lists+size.Todos)/elapsed.Seconds(),
		endpoint, demoUser, filepath.Join(cluster.Dir(), "rules.yaml"), list, endpoint, token, token, list, endpoint,
		cluster.URI("app"), list, cluster.URI("syncpipe"))

	if *exit {
		return nil
	}
	fmt.Fprintln(stdout, "\nPress Ctrl-C to stop.")
	select {
	case <-ctx.Done():
	case err := <-errc:
		if ctx.Err() == nil {
			return fmt.Errorf("replication stopped: %w", err)
		}
	}
	fmt.Fprintln(stdout, "\nsyncpipe demo: stopping…")
	return nil
}

// writeDemoFiles writes the sync rules and a syncpipe config next to the
// cluster so a user can read them (and run syncpipe against the cluster
// themselves); they disappear with the cluster.
func writeDemoFiles(c *pgcluster.Cluster) (string, error) {
	rules := filepath.Join(c.Dir(), "rules.yaml")
	if err := os.WriteFile(rules, []byte(todos.StreamRules), 0o644); err != nil {
		return "", fmt.Errorf("write demo rules: %w", err)
	}
	cfg := fmt.Sprintf(`# written by syncpipe demo
source:      {uri: %q}
storage:     {uri: %q}
sync_rules:  {path: rules.yaml}
replication: {workers_per_process: 2}
api:
  listen: 127.0.0.1:0
  auth:
    audience: [syncpipe]
    hs256_secrets: [%q]
telemetry:   {metrics_listen: "", tracing: {exporter: none}}
`, c.URI("app"), c.URI("syncpipe"), randomSecret())
	path := filepath.Join(c.Dir(), "syncpipe.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		return "", fmt.Errorf("write demo config: %w", err)
	}
	return path, nil
}

// demoUser is the user the demo's token is for: the owner of every
// hundredth list of the sample data (todos.Load).
const demoUser = "user1"

func randomSecret() string {
	b := make([]byte, 24)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
