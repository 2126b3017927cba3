package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/syncpipe/syncpipe/internal/pgcluster"
	"github.com/syncpipe/syncpipe/internal/telemetry"
	"github.com/syncpipe/syncpipe/internal/todos"
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
	var version string
	if err == nil {
		err = conn.QueryRow(ctx, "SELECT current_setting('server_version')").Scan(&version)
	}
	_ = conn.Close(context.Background())
	if err != nil {
		return err
	}
	loadTime := time.Since(start)

	rulesPath, err := writeDemoFiles(cluster)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, `
  PostgreSQL %s   127.0.0.1:%d   (data in %s)
  source   %s   %d lists, %d todos loaded in %s
  storage  %s
  rules    %s

  Explore the source:   psql '%s' -c 'SELECT * FROM todos LIMIT 5'
  Replication and the sync API join the demo as they land (see README "Status").
`, version, cluster.Port(), cluster.Dir(),
		cluster.URI("app"), size.Lists, size.Todos, loadTime.Round(time.Millisecond),
		cluster.URI("syncpipe"), rulesPath, cluster.URI("app"))

	if *exit {
		return nil
	}
	fmt.Fprintln(stdout, "\nPress Ctrl-C to stop.")
	<-ctx.Done()
	fmt.Fprintln(stdout, "\nsyncpipe demo: stopping…")
	return nil
}

// writeDemoFiles writes the sync rules next to the cluster so a user can
// read and edit them; they disappear with the cluster.
func writeDemoFiles(c *pgcluster.Cluster) (string, error) {
	path := c.Dir() + "/rules.yaml"
	if err := os.WriteFile(path, []byte(todos.Rules), 0o644); err != nil {
		return "", fmt.Errorf("write demo rules: %w", err)
	}
	return path, nil
}
