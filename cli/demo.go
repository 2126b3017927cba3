package cli

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/syncpipe/syncpipe/config"
	"github.com/syncpipe/syncpipe/internal/pgcluster"
	"github.com/syncpipe/syncpipe/internal/telemetry"
	"github.com/syncpipe/syncpipe/internal/todos"
	"github.com/syncpipe/syncpipe/replication"
	"github.com/syncpipe/syncpipe/sinks/bucketstore"
)

// demoOptions are the demo's flags.
type demoOptions struct {
	size todos.Size
	port int  // of the sync API; 0 picks a free one
	exit bool // stop after loading instead of waiting for Ctrl-C
}

// parseDemoFlags reads and checks the demo's flags.
func parseDemoFlags(args []string, stderr io.Writer) (demoOptions, error) {
	fs := newFlags("demo", stderr)
	lists := fs.Int("lists", todos.Demo.Lists, "number of todo lists to generate")
	nTodos := fs.Int("todos", todos.Demo.Todos, "number of todos to generate")
	port := fs.Int("port", 0, "port of the sync API (and its /metrics) on 127.0.0.1; 0 picks a free one")
	exit := fs.Bool("exit", false, "stop after loading instead of waiting for Ctrl-C (for scripts)")
	if err := parseFlags(fs, args); err != nil {
		return demoOptions{}, err
	}
	if *lists < 1 || *nTodos < 0 {
		return demoOptions{}, usagef("demo: --lists must be ≥ 1 and --todos ≥ 0")
	}
	if err := checkDemoPort(*port); err != nil {
		return demoOptions{}, err
	}
	return demoOptions{size: todos.Size{Lists: *lists, Todos: *nTodos, Seed: todos.Demo.Seed}, port: *port, exit: *exit}, nil
}

// checkDemoPort rejects a --port out of range, and one that is taken now:
// otherwise the demo would find that out only after starting a cluster
// and loading it.
func checkDemoPort(port int) error {
	if port < 0 || port > 65535 {
		return usagef("demo: --port %d: want a TCP port, 1-65535 (or 0 for a free one)", port)
	}
	if port == 0 {
		return nil
	}
	ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		return usagef("demo: --port %d is not free: %v", port, err)
	}
	_ = ln.Close()
	return nil
}

// runDemo starts a throwaway cluster with a source and a storage database,
// loads the sample todo lists and keeps running until interrupted (or its
// stdout is gone), then stops the cluster and removes its directory.
func runDemo(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	opt, err := parseDemoFlags(args, stderr)
	if err != nil {
		return err
	}
	log, err := telemetry.NewLogger(stderr, "info", "auto")
	if err != nil {
		return err
	}
	ctx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	// Unless SIGPIPE is asked for, the Go runtime kills the process when a
	// write to stdout finds its pipe closed (`syncpipe demo | tee out.txt`,
	// tee gone at Ctrl-C), before any deferred cleanup runs and with the
	// cluster's directory left behind. Asked for, the write fails with
	// EPIPE instead, and stdoutGuard turns that into a clean stop. The
	// channel is not read: SIGPIPEs of closed network connections (a sync
	// client that hung up) arrive on it too, and they are no reason to stop.
	sigpipe := make(chan os.Signal, 1)
	signal.Notify(sigpipe, syscall.SIGPIPE)
	defer signal.Stop(sigpipe)
	err = demo(ctx, opt, stdoutGuard{w: stdout, stop: stop}, stderr, log)
	if ctx.Err() != nil {
		return nil // stopped as asked: a signal, or nobody reads stdout any more
	}
	return err
}

// stdoutGuard passes writes on to the demo's stdout and stops the demo at
// the first that fails: the reader is gone (`| tee` or `| head` ended),
// and a demo nobody sees should not keep its cluster.
type stdoutGuard struct {
	w    io.Writer
	stop context.CancelCauseFunc
}

func (g stdoutGuard) Write(p []byte) (int, error) {
	n, err := g.w.Write(p)
	if err != nil {
		g.stop(fmt.Errorf("writing to stdout failed: %w", err))
	}
	return n, err
}

// demo runs the demo on a cluster of its own, which it stops and removes
// before it returns, saying so on stderr.
func demo(ctx context.Context, opt demoOptions, stdout, stderr io.Writer, log *slog.Logger) error {
	fmt.Fprintln(stdout, "syncpipe demo: starting a throwaway PostgreSQL cluster…")
	cluster, err := pgcluster.Start(ctx, pgcluster.Options{Logger: log})
	if err != nil {
		return fmt.Errorf("start postgres: %w", err)
	}
	defer stopDemoCluster(ctx, cluster, stderr)

	start := time.Now()
	version, list, err := loadDemoData(ctx, cluster, opt.size)
	if err != nil {
		return err
	}
	loadTime := time.Since(start)
	cfgPath, err := writeDemoFiles(cluster, opt.port)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, `
  PostgreSQL %s   127.0.0.1:%d   (data in %s)
  source   %s   %d lists, %d todos loaded in %s
  storage  %s
  config   %s

`, version, cluster.Port(), cluster.Dir(),
		cluster.URI("app"), opt.size.Lists, opt.size.Todos, loadTime.Round(time.Millisecond),
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
	return replicateAndServe(ctx, demoRun{opt: opt, cfg: cfg, cfgPath: cfgPath, cluster: cluster, list: list, store: store, log: log}, stdout)
}

// stopDemoCluster stops the demo's PostgreSQL and removes its directory,
// and says so in one line on stderr (stdout may be the pipe that is gone),
// with why the demo stopped when it did not end by itself.
func stopDemoCluster(ctx context.Context, c *pgcluster.Cluster, stderr io.Writer) {
	why := ""
	if ctx.Err() != nil {
		why = fmt.Sprintf("%v; ", context.Cause(ctx))
	}
	if err := c.Stop(); err != nil {
		fmt.Fprintf(stderr, "syncpipe demo: %sstopping PostgreSQL and removing %s: %v\n", why, c.Dir(), err)
		return
	}
	fmt.Fprintf(stderr, "syncpipe demo: %sPostgreSQL stopped and %s removed\n", why, c.Dir())
}

// loadDemoData creates the source and storage databases and loads the
// sample todo lists into the source. It returns the server's version and
// a list of the demo's user, to subscribe to its todos.
func loadDemoData(ctx context.Context, cluster *pgcluster.Cluster, size todos.Size) (version, list string, err error) {
	for _, db := range []string{"app", "syncpipe"} {
		if err := cluster.CreateDatabase(ctx, db); err != nil {
			return "", "", err
		}
	}
	conn, err := pgx.Connect(ctx, cluster.URI("app"))
	if err != nil {
		return "", "", fmt.Errorf("connect to the source database: %w", err)
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = conn.Close(cctx)
	}()
	if _, err := todos.Load(ctx, conn, size); err != nil {
		return "", "", fmt.Errorf("load the sample todo lists: %w", err)
	}
	if err := conn.QueryRow(ctx, "SELECT current_setting('server_version')").Scan(&version); err != nil {
		return "", "", fmt.Errorf("read the server version: %w", err)
	}
	err = conn.QueryRow(ctx, "SELECT coalesce(min(id::text), '') FROM lists WHERE owner_id = $1", demoUser).Scan(&list)
	if err != nil {
		return "", "", fmt.Errorf("find a list of %s: %w", demoUser, err)
	}
	return version, list, nil
}

// demoRun is what the demo's replication and API run on.
type demoRun struct {
	opt     demoOptions
	cfg     *config.Config
	cfgPath string
	cluster *pgcluster.Cluster
	list    string // a list of demoUser's
	store   *bucketstore.Store
	log     *slog.Logger
}

// replicateAndServe replicates the source into storage and, once the
// snapshot is done, serves the sync API and prints how to use it; then it
// waits for ctx to end (unless --exit).
func replicateAndServe(ctx context.Context, d demoRun, stdout io.Writer) error {
	snapshotDone := make(chan struct{})
	start := time.Now()
	rep := replication.New(replication.Options{Config: d.cfg, Store: d.store, Logger: d.log,
		OnSnapshotDone: func(int) { close(snapshotDone) }})
	runCtx, stop := context.WithCancel(ctx)
	errc := make(chan error, 1)
	go func() { errc <- rep.Run(runCtx) }()
	defer func() {
		// Replication ends before storage closes and the cluster stops.
		stop()
		<-errc
	}()
	fmt.Fprintln(stdout, "syncpipe demo: replicating…")
	select {
	case <-snapshotDone:
	case err := <-errc:
		errc <- err // for the deferred wait
		return fmt.Errorf("replication stopped: %w", err)
	case <-ctx.Done():
		return nil
	}
	elapsed := time.Since(start)
	ops, buckets, err := d.store.Compactor().Size(ctx)
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
	api, err := startAPI(ctx, d.cfg, d.store, tel, d.log)
	if err != nil {
		return err
	}
	defer api.shutdown(time.Second)
	token, err := mintToken(d.cfg.API.Auth, demoUser, 24*time.Hour)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "syncpipe demo: snapshot done in %s: %d ops in %d buckets (%.0f rows/s); now streaming changes.\n",
		elapsed.Round(time.Millisecond), ops, buckets, float64(d.opt.size.Lists+d.opt.size.Todos)/elapsed.Seconds())
	printDemoUsage(stdout, d, "http://"+api.Addr(), token)

	if d.opt.exit {
		return nil
	}
	fmt.Fprintln(stdout, "\nPress Ctrl-C to stop.")
	select {
	case <-ctx.Done():
	case err := <-errc:
		errc <- err // for the deferred wait
		return fmt.Errorf("replication stopped: %w", err)
	}
	fmt.Fprintln(stdout, "\nsyncpipe demo: stopping…")
	return nil
}

// printDemoUsage prints how to connect a client, watch the protocol,
// change the source and see the result while the demo runs.
func printDemoUsage(stdout io.Writer, d demoRun, endpoint, token string) {
	c := d.cluster
	fmt.Fprintf(stdout, `
  Sync API  %s   (token for user %q, valid 24h below)
  The rules are Sync Streams (%s): the user's lists sync by default,
  a list's todos once the app subscribes to list_todos with its list_id.
  Connect the real PowerSync client (@powersync/node, installed from npm) and subscribe:
    (cd testdata/client && npm ci --no-audit --no-fund) && \
    echo '{"cmd":"subscribe","stream":"list_todos","params":{"list_id":"%s"}}' | \
    testdata/client/node_modules/.bin/node testdata/client/sync.mjs --endpoint %s --token %s
  Or watch the raw protocol:
    curl -sN -H 'Authorization: Token %s' -d '{"raw_data":true,"streams":{"subscriptions":[{"stream":"list_todos","parameters":{"list_id":"%s"}}]}}' %s/sync/stream | head -c 600
  Replication status: %s status --config %s
  Change the source:  psql '%s' -c "UPDATE todos SET completed = true WHERE list_id = '%s'"
  See the new ops:    psql '%s' -c "SELECT op_id, op, bucket_name, object_id FROM syncpipe.bucket_ops ORDER BY op_id DESC LIMIT 5"
`, endpoint, demoUser, filepath.Join(c.Dir(), "rules.yaml"), d.list, endpoint, token, token, d.list, endpoint,
		selfCommand(), shellQuote(d.cfgPath),
		c.URI("app"), d.list, c.URI("syncpipe"))
}

// selfCommand is how a shell runs this program again: by its name when
// PATH finds this very file under it, by its path otherwise (the binary of
// `go run`, which lasts as long as the demo does).
func selfCommand() string {
	exe, err := os.Executable()
	if err != nil {
		return "syncpipe"
	}
	name := filepath.Base(exe)
	if found, err := exec.LookPath(name); err == nil && sameFile(found, exe) {
		return name
	}
	return shellQuote(exe)
}

func sameFile(a, b string) bool {
	sa, errA := os.Stat(a)
	sb, errB := os.Stat(b)
	return errA == nil && errB == nil && os.SameFile(sa, sb)
}

// shellQuote quotes s for a POSIX shell unless it needs none.
func shellQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789/._-+:@,=") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// writeDemoFiles writes the sync rules and a syncpipe config next to the
// cluster so a user can read them (and run syncpipe against the cluster
// themselves); they disappear with the cluster. port is the sync API's.
func writeDemoFiles(c *pgcluster.Cluster, port int) (string, error) {
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
  listen: 127.0.0.1:%d
  auth:
    audience: [syncpipe]
    hs256_secrets: [%q]
telemetry:   {metrics_listen: "", tracing: {exporter: none}}
`, c.URI("app"), c.URI("syncpipe"), port, randomSecret())
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
