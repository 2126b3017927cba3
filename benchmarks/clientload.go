package benchmarks

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/syncpipe/syncpipe/internal/pgcluster"
)

// LoadOptions configures the load scenario (issue 17's "Load"; SPEC §9:
// 1,000 sync connections + 5k changes/s, commit → checkpoint_complete
// p99 < 100 ms, RSS < 500 MB).
type LoadOptions struct {
	// Clients connect, each as its own user owning ListsPerUser lists (one
	// bucket each, through a parameter query) of TodosPerList todos.
	Clients, ListsPerUser, TodosPerList int
	// Rate changes per second arrive for For, in transactions of TxnRows
	// single-row updates of random todos.
	Rate, TxnRows int
	For           time.Duration
	// Replication is the child's replication section in YAML flow style
	// ("": {workers_per_process: 2}).
	Replication string
	// SettleFor bounds the wait for the child's next GC before each memory
	// measurement (see settledMemory); 0 measures at once.
	SettleFor time.Duration
	// Runs is the number of runs per binary of a comparison run
	// (Harness.Compare; 0 = 1); without one the scenario runs once.
	Runs int
	// FirstSyncPairs is the number of pairs (one first sync of every
	// client per binary) a comparison run measures on one environment
	// after its whole runs (clientload_firstsync.go); 0: none.
	FirstSyncPairs int
	// WebSocket: the clients connect over the WebSocket transport (GET
	// /sync/stream, RSocket), as the SDKs with connectionMethod
	// 'web-socket' do, instead of HTTP streams; the result is the
	// scenario load-ws.
	WebSocket bool
	Log       io.Writer
	Harness   *Harness
}

// LoadPreset returns the options for a scale: "full" is the SPEC load
// (1,000 clients × 50 buckets, 5k changes/s) for 2 minutes; "soak" the
// same for 10 minutes; "small" 100 clients and 1k changes/s for 20 s.
func LoadPreset(scale string) LoadOptions {
	o := LoadOptions{Clients: 1000, ListsPerUser: 50, TodosPerList: 2, Rate: 5000, TxnRows: 100, For: 2 * time.Minute,
		SettleFor: gcSettleWait, FirstSyncPairs: 20}
	switch scale {
	case "soak":
		o.For = 10 * time.Minute
	case "small":
		o.Clients, o.Rate, o.For, o.FirstSyncPairs = 100, 1000, 20*time.Second, 6
	}
	return o
}

// loadRules give each user a bucket per list it owns.
const loadRules = `bucket_definitions:
  by_list:
    parameters: SELECT id AS list_id FROM lists WHERE owner_id = request.user_id()
    data:
      - SELECT * FROM todos WHERE list_id = bucket.list_id
`

// Bars of the load scenario.
const (
	loadLatencyBar = 100 * time.Millisecond
	loadIdleBar    = 50 << 10 // bytes per idle connection
)

// loadFigures are what one load run measured, for the report and the
// smoke test.
type loadFigures struct {
	clients, buckets   int
	webSocket          bool          // the clients were over WebSocket (load-ws)
	firstSync          time.Duration // connect → every client's first checkpoint_complete
	memBefore, memIdle childMemory   // the child before the clients and with them idle
	peakRSS            int64
	committed          int64 // changes committed by the load
	txns               int
	elapsed            time.Duration // of the load
	lat                loadLatencies
	ops                int64           // data ops the clients read during the load
	stmts              []statementStat // storage statements during the load, busiest first (nil: not counted)
	xacts              int64           // storage transactions during the load
	cpu                loadCPU
	errors             int64 // client streams that failed
	errorText          []string
	mismatched         int // clients whose final rows differ from the source
}

// RunLoad measures the sync API under many connections while changes
// stream in: a `syncpipe run --role all` child (snapshot, stream and API
// in one process, storage on a cluster of its own), Clients HTTP sync
// streams each entitled to ListsPerUser buckets, then Rate changes/s for
// For. Per (client, transaction) it records commit → the client's
// checkpoint_complete that brought it; at the end every client must hold
// exactly the source's rows.
//
// With Harness.Compare the measurement is made with both binaries (see
// runLoadCompare); over WebSocket it is not, since a build of an earlier
// commit may have no WebSocket transport.
func RunLoad(ctx context.Context, opt LoadOptions) (Result, error) {
	if opt.Harness != nil && opt.Harness.Compare != "" {
		if opt.WebSocket {
			return Result{}, errors.New("load-ws: no comparison run (-compare-bin/-compare-rev): a build of an earlier commit may not serve WebSocket; compare the HTTP scenario, load")
		}
		return runLoadCompare(ctx, opt)
	}
	res, _, err := runLoad(ctx, opt)
	return res, err
}

func runLoad(ctx context.Context, opt LoadOptions) (Result, loadFigures, error) {
	scenario, transport := "load", "HTTP (`POST /sync/stream`, raw_data)"
	if opt.WebSocket {
		scenario, transport = "load-ws", "WebSocket (`GET /sync/stream`, RSocket: BSON lines, 10 requested, REQUEST_N 1 per line handled, raw_data; per-message deflate offered, as by @powersync/node)"
	}
	res := Result{Scenario: scenario, Date: time.Now(),
		Params: fmt.Sprintf("Load: %d sync clients over %s, each its own user with %d buckets (a parameter query) of %d todos; "+
			"%d changes/s in %d-row transactions of single-row UPDATEs of random todos for %s; one `syncpipe run --role all` child (snapshot, stream, API; storage VACUUM ANALYZEd and checkpointed after the snapshot), "+
			"source and storage on two clusters (fsync on), storage synchronous_commit=off. Latency: per client and transaction, commit returned → the client's checkpoint_complete bringing it",
			opt.Clients, transport, opt.ListsPerUser, opt.TodosPerList, opt.Rate, opt.TxnRows, opt.For)}
	var fig loadFigures
	e, err := startLoadEnv(ctx, opt)
	if err != nil {
		return res, fig, err
	}
	defer e.close(ctx)
	fig.clients, fig.buckets, fig.webSocket = opt.Clients, opt.ListsPerUser, opt.WebSocket
	child, url, src, storage := e.child, e.url, e.src, e.storage
	if fig.memBefore, err = settledMemory(ctx, child, url+"/metrics", opt.SettleFor); err != nil {
		return res, fig, err
	}

	lc := newLoadClients(e.users, opt.WebSocket)
	cctx, stopClients := context.WithCancel(ctx)
	var clients sync.WaitGroup
	defer func() { stopClients(); clients.Wait() }()
	logf(opt.Log, "load: %d clients connecting…", opt.Clients)
	if fig.firstSync, err = lc.connectAll(cctx, url, &clients, 5*time.Minute); err != nil {
		return res, fig, fmt.Errorf("%w\n%s", err, child.Tail())
	}
	if fig.memIdle, err = settledMemory(ctx, child, url+"/metrics", opt.SettleFor); err != nil {
		return res, fig, err
	}
	logf(opt.Log, "load: %d clients synced in %s; RSS %d MiB before, %d MiB with them idle; live %d MiB before, %d MiB with them idle",
		opt.Clients, fig.firstSync.Round(time.Millisecond), fig.memBefore.rss>>20, fig.memIdle.rss>>20, fig.memBefore.live>>20, fig.memIdle.live>>20)

	stmts, err := openLoadStatements(ctx, storage, e.statements)
	if err != nil {
		return res, fig, err
	}
	if stmts != nil {
		defer stmts.Close(context.WithoutCancel(ctx))
	}
	pub, err := watchPublished(ctx, storage.URI("storage"))
	if err != nil {
		return res, fig, err
	}
	defer pub.stop()
	s0, x0, err := storageCounts(ctx, stmts, storage)
	if err != nil {
		return res, fig, err
	}
	cpu0 := sampleLoadCPU(child, e.cluster, storage)
	committed, err := loadChanges(ctx, src, opt, e.owners, &fig, 1)
	if err != nil {
		return res, fig, err
	}
	fig.cpu = sampleLoadCPU(child, e.cluster, storage).since(cpu0)
	s1, x1, err := storageCounts(ctx, stmts, storage)
	if err != nil {
		return res, fig, err
	}
	fig.stmts, fig.xacts = statementsSince(s0, s1), x1-x0
	if err := loadVerify(ctx, src, lc, &fig); err != nil {
		return res, fig, fmt.Errorf("%w\n%s", err, child.Tail())
	}
	stopClients()
	clients.Wait()
	published, err := pub.stop()
	if err != nil {
		return res, fig, err
	}
	fig.lat, fig.ops = lc.latencies(committed, published)
	fig.errors = lc.failed.Load()
	fig.errorText = lc.errs
	st, err := child.Stop()
	e.child = nil
	if err != nil {
		return res, fig, err
	}
	fig.peakRSS = st.PeakRSS
	res.PeakRSS = st.PeakRSS
	res.Rows = []Row{{Name: fmt.Sprintf("%d clients, %d changes/s", opt.Clients, opt.Rate),
		Samples: []Sample{{Duration: fig.elapsed, Rows: fig.committed, Ops: fig.ops, PeakRSS: st.PeakRSS}}}}
	res.Notes = append(res.Notes, loadReport(fig))
	if len(st.Stages.Stages) > 0 {
		// Where the child's time went: whether replication or the API
		// fell behind shows in the stream's busiest stage.
		var sb strings.Builder
		if err := st.Stages.WriteTable(&sb); err == nil {
			res.Notes = append(res.Notes, fmt.Sprintf("Stage-time summary of the child (snapshot and stream, busiest stage per worker: **%s**):\n\n```\n%s```",
				st.Stages.Busiest(), sb.String()))
		}
	}
	res.Bars = append(res.Bars, loadBar(fig))
	return res, fig, nil
}

// loadEnv is what a load run stands on: the source and storage clusters
// (storage with pg_stat_statements when the server has it), the data and a
// `syncpipe run --role all` child past its snapshot, serving the API at url.
type loadEnv struct {
	cluster, storage *pgcluster.Cluster
	src              *pgx.Conn
	statements       bool // pg_stat_statements is preloaded in storage
	users            []string
	owners           map[string]string // todo id → its owner
	child            *Child
	url              string
}

func startLoadEnv(ctx context.Context, opt LoadOptions) (e *loadEnv, err error) {
	if opt.Harness == nil {
		return nil, fmt.Errorf("load scenario: no syncpipe harness")
	}
	e = &loadEnv{}
	defer func() {
		if err != nil {
			e.close(ctx)
		}
	}()
	if e.cluster, e.src, err = startCluster(ctx, "app"); err != nil {
		return e, err
	}
	settings, _ := statementSettings()
	e.statements = settings != nil
	if e.storage, err = pgcluster.Start(ctx, pgcluster.Options{Durable: true, Settings: settings}); err != nil {
		return e, err
	}
	if err := e.storage.CreateDatabase(ctx, "storage"); err != nil {
		return e, err
	}
	if e.users, e.owners, err = loadData(ctx, e.src, opt); err != nil {
		return e, err
	}
	if e.child, e.url, err = startLoadChild(ctx, opt, e.cluster.URI("app"), e.storage.URI("storage")); err != nil {
		return e, err
	}
	if _, err = e.child.WaitFor(ctx, "snapshot done"); err != nil {
		return e, err
	}
	return e, settleStorage(ctx, e.storage.URI("storage"))
}

// settleStorage vacuums and analyzes storage and checkpoints its cluster
// after the snapshot, so that every first sync meets storage in the same
// state. Otherwise autovacuum's pass over the fresh ops, and the
// checkpoint after them, overlap the first sync or not depending on when
// the child's next GC ends the memory settle before it (settledMemory),
// which varies from run to run and build to build.
func settleStorage(ctx context.Context, uri string) error {
	conn, err := pgx.Connect(ctx, uri)
	if err != nil {
		return fmt.Errorf("settle storage: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	for _, q := range []string{"VACUUM (ANALYZE)", "CHECKPOINT"} {
		if _, err := conn.Exec(ctx, q); err != nil {
			return fmt.Errorf("settle storage: %s: %w", q, err)
		}
	}
	return nil
}

// close stops what is still running.
func (e *loadEnv) close(ctx context.Context) {
	if e.child != nil {
		_, _ = e.child.Stop()
	}
	if e.src != nil {
		e.src.Close(context.WithoutCancel(ctx))
	}
	for _, c := range []*pgcluster.Cluster{e.storage, e.cluster} {
		if c != nil {
			_ = c.Stop()
		}
	}
}

// loadData creates the scenario's source tables: per user ListsPerUser
// lists of TodosPerList todos, each todo with the seq of the load
// transaction that last changed it (0 at first). It returns the user names
// and each todo id's owner.
func loadData(ctx context.Context, src *pgx.Conn, opt LoadOptions) ([]string, map[string]string, error) {
	logf(opt.Log, "load: creating %d users × %d lists × %d todos…", opt.Clients, opt.ListsPerUser, opt.TodosPerList)
	_, err := src.Exec(ctx, fmt.Sprintf(`
		CREATE TABLE lists (id uuid PRIMARY KEY, owner_id text NOT NULL, name text NOT NULL);
		CREATE TABLE todos (id uuid PRIMARY KEY, list_id uuid NOT NULL, description text NOT NULL, seq bigint NOT NULL DEFAULT 0);
		CREATE INDEX ON lists (owner_id);
		INSERT INTO lists SELECT gen_random_uuid(), 'user-' || lpad((i / %[2]d)::text, 5, '0'), 'list ' || i
			FROM generate_series(0, %[1]d * %[2]d - 1) i;
		INSERT INTO todos SELECT gen_random_uuid(), l.id, 'todo ' || n || ' of ' || l.name, 0
			FROM lists l, generate_series(1, %[3]d) n;
		ANALYZE lists; ANALYZE todos;`, opt.Clients, opt.ListsPerUser, opt.TodosPerList))
	if err != nil {
		return nil, nil, fmt.Errorf("create the load data: %w", err)
	}
	owners := map[string]string{}
	rows, err := src.Query(ctx, `SELECT t.id::text, l.owner_id FROM todos t JOIN lists l ON l.id = t.list_id`)
	if err != nil {
		return nil, nil, fmt.Errorf("read todo owners: %w", err)
	}
	for rows.Next() {
		var id, owner string
		if err := rows.Scan(&id, &owner); err != nil {
			return nil, nil, fmt.Errorf("read todo owners: %w", err)
		}
		owners[id] = owner
	}
	if err := rows.Err(); err != nil {
		return nil, nil, fmt.Errorf("read todo owners: %w", err)
	}
	users := make([]string, opt.Clients)
	for i := range users {
		users[i] = fmt.Sprintf("user-%05d", i)
	}
	return users, owners, nil
}

// startLoadChild starts `syncpipe run --role all` serving the API on a
// free port.
func startLoadChild(ctx context.Context, opt LoadOptions, source, storage string) (*Child, string, error) {
	port, err := pgcluster.FreePort()
	if err != nil {
		return nil, "", err
	}
	replication := cmp.Or(opt.Replication, "{workers_per_process: 2}")
	cfg := fmt.Sprintf(`source: {uri: %q, slot_prefix: bench_load_}
storage: {uri: %q, max_conns: 32, synchronous_commit: "off"}
sync_rules:
  content: |
%s
replication: %s
api:
  listen: "127.0.0.1:%d"
  auth: {audience: [%q], hs256_secrets: [%q], max_lifetime: 24h}
  max_concurrent_connections: %d
telemetry: {metrics_listen: ""}
log: {level: info, format: json}
`, source, storage, indent(loadRules, "    "), replication, port, p5Audience, p5Secret, opt.Clients+100)
	return startListening(ctx, opt.Harness.childOptions(cfg, "all"), port)
}

// loadChanges commits opt.Rate changes/s for opt.For, each transaction
// setting its todos' seq to its own number (from firstSeq on), and returns
// each seq's commit time. A transaction that takes longer than its share of a second delays
// the next one: the achieved rate is reported.
func loadChanges(ctx context.Context, src *pgx.Conn, opt LoadOptions, owners map[string]string, fig *loadFigures, firstSeq int64) (map[int64]time.Time, error) {
	ids := make([]string, 0, len(owners))
	for id := range owners {
		ids = append(ids, id)
	}
	rng := rand.New(rand.NewPCG(17, 71))
	committed := map[int64]time.Time{}
	every := time.Duration(float64(time.Second) * float64(opt.TxnRows) / float64(opt.Rate))
	tick := time.NewTicker(every)
	defer tick.Stop()
	logf(opt.Log, "load: %d changes/s for %s…", opt.Rate, opt.For)
	start := time.Now()
	batch := make([]string, min(opt.TxnRows, len(ids)))
	picked := map[int]bool{}
	for seq := firstSeq; time.Since(start) < opt.For; seq++ {
		// Distinct todos: each change of a transaction is one row.
		clear(picked)
		for i := range batch {
			for {
				j := rng.IntN(len(ids))
				if !picked[j] {
					picked[j], batch[i] = true, ids[j]
					break
				}
			}
		}
		tag, err := src.Exec(ctx, `UPDATE todos SET seq = $2 WHERE id = ANY($1::uuid[])`, batch, seq)
		if err != nil {
			return nil, fmt.Errorf("load transaction %d: %w", seq, err)
		}
		committed[seq] = time.Now()
		fig.committed += tag.RowsAffected()
		fig.txns++
		select {
		case <-tick.C:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	fig.elapsed = time.Since(start)
	return committed, nil
}

// loadVerify waits until every client holds exactly its rows of the
// source, with their last seq; clients that never get there are counted.
func loadVerify(ctx context.Context, src *pgx.Conn, lc *loadClients, fig *loadFigures) error {
	want := map[string]map[string]int64{}
	rows, err := src.Query(ctx, `SELECT l.owner_id, t.id::text, t.seq FROM todos t JOIN lists l ON l.id = t.list_id`)
	if err != nil {
		return fmt.Errorf("read the final rows: %w", err)
	}
	for rows.Next() {
		var owner, id string
		var seq int64
		if err := rows.Scan(&owner, &id, &seq); err != nil {
			return fmt.Errorf("read the final rows: %w", err)
		}
		if want[owner] == nil {
			want[owner] = map[string]int64{}
		}
		want[owner][id] = seq
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("read the final rows: %w", err)
	}
	behind := func() int {
		n := 0
		for _, c := range lc.list {
			if !c.holds(want[c.user]) {
				n++
			}
		}
		return n
	}
	if err := waitUntil(ctx, time.Minute, func() bool { return behind() == 0 }); err != nil {
		fig.mismatched = behind()
		return fmt.Errorf("load: %d of %d clients do not hold the source's rows a minute after the load", fig.mismatched, len(lc.list))
	}
	return nil
}

// loadCPU is the CPU time of the load's processes: the syncpipe child, the
// harness (its 1,000 clients, which in production run on client devices),
// each cluster's processes, and the machine's busy share.
type loadCPU struct {
	syncpipe, harness, source, storage time.Duration
	machine                            cpuTimes
	busy                               float64 // set by since
}

func sampleLoadCPU(child *Child, source, storage *pgcluster.Cluster) loadCPU {
	return loadCPU{syncpipe: child.CPU(), harness: selfCPU(), source: clusterCPU(filepath.Join(source.Dir(), "data")),
		storage: clusterCPU(filepath.Join(storage.Dir(), "data")), machine: readCPU()}
}

func (c loadCPU) since(c0 loadCPU) loadCPU {
	return loadCPU{syncpipe: c.syncpipe - c0.syncpipe, harness: c.harness - c0.harness, source: c.source - c0.source,
		storage: c.storage - c0.storage, busy: busySince(c0.machine, c.machine)}
}

// lowestRSS is the child's lowest RSS over 5 s: the garbage of what it
// just did (a snapshot, the first syncs) is collected meanwhile, so the
// lowest sample is its steady footprint.
func lowestRSS(c *Child) int64 {
	rss := c.RSS()
	for range 10 {
		time.Sleep(500 * time.Millisecond)
		rss = min(rss, c.RSS())
	}
	return rss
}

// publishedWatch records when each checkpoint was announced in storage.
type publishedWatch struct {
	cancel context.CancelFunc
	done   chan struct{}
	at     map[int64]time.Time // checkpoint op id → seen
	err    error
}

// watchPublished LISTENs for storage's checkpoint notifications until
// stop.
func watchPublished(ctx context.Context, uri string) (*publishedWatch, error) {
	conn, err := pgx.Connect(ctx, uri)
	if err != nil {
		return nil, fmt.Errorf("connect to storage: %w", err)
	}
	if _, err := conn.Exec(ctx, "LISTEN syncpipe_checkpoints"); err != nil {
		conn.Close(context.WithoutCancel(ctx))
		return nil, fmt.Errorf("listen for checkpoints: %w", err)
	}
	wctx, cancel := context.WithCancel(ctx)
	w := &publishedWatch{cancel: cancel, done: make(chan struct{}), at: map[int64]time.Time{}}
	go func() {
		defer close(w.done)
		defer conn.Close(context.WithoutCancel(ctx))
		for {
			n, err := conn.WaitForNotification(wctx)
			if err != nil {
				if wctx.Err() == nil {
					w.err = fmt.Errorf("wait for checkpoints: %w", err)
				}
				return
			}
			var note checkpointNote
			if err := json.Unmarshal([]byte(n.Payload), &note); err != nil {
				w.err = fmt.Errorf("checkpoint notification %q: %w", n.Payload, err)
				return
			}
			w.at[note.Checkpoint] = time.Now()
		}
	}()
	return w, nil
}

// stop ends the watch and returns what it saw.
func (w *publishedWatch) stop() (map[int64]time.Time, error) {
	w.cancel()
	<-w.done
	return w.at, w.err
}

// waitUntil polls cond every 50 ms until it holds or limit passes.
func waitUntil(ctx context.Context, limit time.Duration, cond func() bool) error {
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			return fmt.Errorf("not within %s", limit)
		}
		select {
		case <-time.After(50 * time.Millisecond):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// openLoadStatements connects for pg_stat_statements when it is preloaded.
func openLoadStatements(ctx context.Context, storage *pgcluster.Cluster, preloaded bool) (*pgx.Conn, error) {
	if !preloaded {
		return nil, nil
	}
	return openStatements(ctx, storage.URI("postgres"))
}

// storageCounts reads the statements (pg_stat_statements, nil without
// it) and transactions storage has executed so far.
func storageCounts(ctx context.Context, stmts *pgx.Conn, storage *pgcluster.Cluster) (statements []statementStat, xacts int64, err error) {
	if stmts != nil {
		if statements, err = readStatements(ctx, stmts, "storage"); err != nil {
			return nil, 0, err
		}
	}
	conn, err := pgx.Connect(ctx, storage.URI("storage"))
	if err != nil {
		return nil, 0, fmt.Errorf("connect to storage: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	err = conn.QueryRow(ctx, `SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = 'storage'`).Scan(&xacts)
	if err != nil {
		return nil, 0, fmt.Errorf("read storage transactions: %w", err)
	}
	return statements, xacts, nil
}

// statementsSince returns what each statement of after executed since
// before, the busiest (by execution time) first.
func statementsSince(before, after []statementStat) []statementStat {
	was := map[string]statementStat{}
	for _, s := range before {
		was[s.query] = s
	}
	var out []statementStat
	for _, s := range after {
		b := was[s.query]
		if d := (statementStat{query: s.query, calls: s.calls - b.calls, rows: s.rows - b.rows, time: s.time - b.time}); d.calls > 0 {
			out = append(out, d)
		}
	}
	slices.SortFunc(out, func(a, b statementStat) int { return cmp.Compare(b.time, a.time) })
	return out
}

// loadReport renders the run's figures.
func loadReport(f loadFigures) string {
	perIdle := f.perIdle()
	var calls int64
	var busy time.Duration
	for _, s := range f.stmts {
		calls += s.calls
		busy += s.time
	}
	stmts := fmt.Sprintf("%.0f", float64(calls)/f.elapsed.Seconds())
	if f.stmts == nil {
		stmts = "not counted (no pg_stat_statements)"
	}
	pct := func(ds []time.Duration) string {
		l := p5LatencyOf(ds)
		return fmt.Sprintf("%s / %s / %s", l.p50, l.p99, l.max)
	}
	var b strings.Builder
	b.WriteString("| clients × buckets | first sync of all clients | RSS before clients / with them idle | live memory before clients / with them idle | memory per idle connection: live (RSS) | changes committed (txns) | changes/s achieved | arrivals (client, txn) | commit → checkpoint_complete p50 / p99 / max | of which commit → checkpoint published | published → checkpoint_complete | data ops read (first syncs included) | storage statements/s | storage txns/s | stream errors | clients not matching the source | peak RSS |\n")
	b.WriteString("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n")
	fmt.Fprintf(&b, "| %d × %d | %s | %d / %d MiB | %.1f / %.1f MiB | %.1f KiB (%.1f KiB) | %d (%d) | %.0f | %d | %s | %s | %s | %d | %s | %.0f | %d | %d | %d MiB |\n",
		f.clients, f.buckets, f.firstSync.Round(time.Millisecond), f.memBefore.rss>>20, f.memIdle.rss>>20,
		float64(f.memBefore.live)/(1<<20), float64(f.memIdle.live)/(1<<20), float64(perIdle)/1024, float64(f.perIdleRSS())/1024,
		f.committed, f.txns, float64(f.committed)/f.elapsed.Seconds(), len(f.lat.total), pct(f.lat.total), pct(f.lat.replication), pct(f.lat.api),
		f.ops, stmts, float64(f.xacts)/f.elapsed.Seconds(), f.errors, f.mismatched, f.peakRSS>>20)
	cores := func(d time.Duration) string { return fmt.Sprintf("%.2f", d.Seconds()/f.elapsed.Seconds()) }
	fmt.Fprintf(&b, "\nCPU during the load, in cores (of 2): syncpipe %s, the harness's clients %s, source cluster %s, storage cluster %s; machine %.0f %% busy (neighbours included).\n",
		cores(f.cpu.syncpipe), cores(f.cpu.harness), cores(f.cpu.source), cores(f.cpu.storage), 100*f.cpu.busy)
	if len(f.stmts) > 0 {
		b.WriteString("\nStorage's busiest statements during the load (pg_stat_statements):\n\n| statement | calls/s | rows/call | mean | share of execution time |\n| --- | ---: | ---: | ---: | ---: |\n")
		for _, s := range f.stmts[:min(len(f.stmts), 8)] {
			fmt.Fprintf(&b, "| `%s` | %.0f | %.1f | %s | %.0f %% |\n", strings.ReplaceAll(shortStatement(s.query, 120), "|", "\\|"), float64(s.calls)/f.elapsed.Seconds(),
				float64(s.rows)/float64(s.calls), (s.time / time.Duration(s.calls)).Round(time.Microsecond), 100*s.time.Seconds()/max(busy.Seconds(), 1e-9))
		}
	}
	if len(f.errorText) > 0 {
		fmt.Fprintf(&b, "\nFirst stream errors: %s\n", strings.Join(f.errorText, "; "))
	}
	settled := "each measured after the child's next GC (the runtime forces one two minutes after its last), so neither holds the garbage of the snapshot or of the first syncs"
	if !f.memBefore.settled || !f.memIdle.settled {
		settled = "measured without waiting for a GC (the figures include garbage not yet collected)"
	}
	b.WriteString("\nMemory per idle connection = (the child's memory with every client synced and idle − its memory after the snapshot, before the first client) / clients, " +
		settled + ". Live memory = the heap the child's last GC found live (go_gc_heap_live_bytes) + goroutine stacks (go_memstats_stack_inuse_bytes); the bar applies to it. " +
		"RSS (lowest over 5 s) also holds the GC's headroom over the whole heap (GOGC=100: up to as much again) and freed memory the runtime has not returned yet. " +
		"Published = the harness's LISTEN on storage received the checkpoint's notification.")
	return b.String()
}

// perIdle is the live memory per idle connection; perIdleRSS the RSS.
func (f loadFigures) perIdle() int64 {
	return (f.memIdle.live - f.memBefore.live) / int64(max(f.clients, 1))
}

func (f loadFigures) perIdleRSS() int64 {
	return (f.memIdle.rss - f.memBefore.rss) / int64(max(f.clients, 1))
}

// loadBar decides the load bar: p99 commit → checkpoint_complete < 100 ms,
// peak RSS < 500 MB, memory per idle connection < 50 KB, no stream error
// and every client matching the source.
func loadBar(f loadFigures) Bar {
	l := p5LatencyOf(f.lat.total)
	perIdle := f.perIdle()
	id, conns := "Load", "sync connections"
	if f.webSocket {
		id, conns = "Load (WebSocket)", "WebSocket sync connections"
	}
	return Bar{ID: id, Measure: fmt.Sprintf("%d %s + %.0f changes/s", f.clients, conns, float64(f.committed)/f.elapsed.Seconds()),
		Bar: "commit → checkpoint_complete p99 < 100 ms; RSS < 500 MB; < 50 KB per idle connection",
		Value: fmt.Sprintf("p99 %s (p50 %s, %d arrivals); peak RSS %d MiB; %.1f KiB live per idle connection (RSS %.1f KiB); %d stream errors",
			l.p99, l.p50, len(f.lat.total), f.peakRSS>>20, float64(perIdle)/1024, float64(f.perIdleRSS())/1024, f.errors),
		Met: len(f.lat.total) > 0 && l.p99 < loadLatencyBar && f.peakRSS < RSSBar && perIdle < loadIdleBar && f.errors == 0 && f.mismatched == 0}
}
