package api

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/syncpipe/syncpipe/internal/testkit/harness"
	"github.com/syncpipe/syncpipe/internal/testkit/longtest"
	"github.com/syncpipe/syncpipe/internal/todos"
)

// attackEnv makes the test binary a slow-body client instead (see
// runAttack and TestMain): "addr|authorization|connections|redial".
const attackEnv = "SYNCPIPE_TEST_SLOWBODY_ATTACK"

// slowBodyLen is the Content-Length the slow clients announce; they send
// a byte of it a second.
const slowBodyLen = 1000

// slowConn is a client sending a sync request whose body comes a byte a
// second, and what the server did with it.
type slowConn struct {
	conn   net.Conn
	done   chan struct{} // closed when the server closed the connection
	status int           // the response's status; 0: closed without one
}

// dialSlow opens a slow-body request to addr with the Authorization
// value; it writes a body byte a second until the server closes it.
func dialSlow(addr, auth string) (*slowConn, error) {
	c, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		return nil, err
	}
	_, err = fmt.Fprintf(c, "POST /sync/stream HTTP/1.1\r\nHost: %s\r\nAuthorization: %s\r\n"+
		"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n{", addr, auth, slowBodyLen)
	if err != nil {
		c.Close()
		return nil, err
	}
	s := &slowConn{conn: c, done: make(chan struct{})}
	go s.read()
	go s.trickle()
	return s, nil
}

// read records the response status and when the server closes.
func (s *slowConn) read() {
	defer close(s.done)
	br := bufio.NewReader(s.conn)
	if l, err := br.ReadString('\n'); err == nil {
		if f := strings.Fields(l); len(f) > 1 {
			s.status, _ = strconv.Atoi(f[1])
		}
	}
	_, _ = io.Copy(io.Discard, br)
}

// trickle sends the body a byte a second until the connection closes.
func (s *slowConn) trickle() {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for range slowBodyLen - 2 {
		select {
		case <-s.done:
			return
		case <-tick.C:
			if _, err := s.conn.Write([]byte(" ")); err != nil {
				return
			}
		}
	}
}

// healthLatency times one GET /healthz on a new connection (as a probe
// makes it); err is set without a 200 within 5 s.
func healthLatency(ctx context.Context, api string) (time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+api+"/healthz", nil)
	start := time.Now()
	resp, err := client.Do(req)
	if err != nil {
		return time.Since(start), err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return time.Since(start), fmt.Errorf("HTTP %d", resp.StatusCode)
	}
	return time.Since(start), nil
}

// openFiles counts a process's file descriptors (Linux /proc).
func openFiles(pid int) int {
	fds, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	return len(fds)
}

// probeHealth runs n /healthz probes 100 ms apart (the probes' pace, not
// a wait for something to happen), failing on one that does not answer
// 200, and returns their latencies, sorted, and the most file
// descriptors pid had at a probe.
func probeHealth(t *testing.T, ctx context.Context, api string, pid, n int) (lat []time.Duration, maxFiles int) {
	t.Helper()
	for range n {
		d, err := healthLatency(ctx, api)
		if err != nil {
			t.Fatalf("/healthz did not answer 200 (%s: %v; the process has %d open files)", d, err, openFiles(pid))
		}
		lat = append(lat, d)
		maxFiles = max(maxFiles, openFiles(pid))
		time.Sleep(100 * time.Millisecond)
	}
	slices.Sort(lat)
	return lat, maxFiles
}

// startTodosAPI runs syncpipe (role all) over a small todo source and
// returns once it has caught up and its /healthz answers 200. When nofile
// is not 0, the process's open file limit (soft and hard) is set to it
// right after the start, before the API reads it.
func startTodosAPI(t *testing.T, ctx context.Context, nofile ...uint64) (*harness.Env, *harness.Proc) {
	t.Helper()
	e := harness.New(t, harness.Options{Data: &todos.Size{Lists: 3, Todos: 30, Seed: 17}})
	p := e.Start()
	if len(nofile) > 0 {
		// Set from outside, on the real binary: the process is exec'd when
		// Start returns, and reads its limit only when the API starts, after
		// it has opened and migrated storage (hundreds of ms later, under
		// -race far more). The caller checks the limit the API logged, so a
		// lost race fails loudly rather than testing the wrong limit.
		lim := unix.Rlimit{Cur: nofile[0], Max: nofile[0]}
		if err := unix.Prlimit(p.Pid(), unix.RLIMIT_NOFILE, &lim, nil); err != nil {
			t.Fatalf("prlimit RLIMIT_NOFILE=%d on syncpipe: %v", nofile[0], err)
		}
	}
	e.WaitCaughtUp(ctx)
	harness.Poll(t, ctx, p, "the API's /healthz", func() bool { code, _ := harness.Health(ctx, e.API); return code == http.StatusOK })
	return e, p
}

// TestAPISlowBodyConnections (issue 17, bounded cost per connection):
// 800 clients that send a sync request's body a byte a second — half
// with an invalid token, half with a valid one — against a syncpipe
// whose open file limit is 700, so that, held, they would use up its
// file descriptors (as 20,000 did at the default limit) and the API
// would stop answering. With the bounds: /healthz answers fast all
// along, the process stays well below its limit, the invalid tokens get
// 401 at once, every slow connection is closed within the body deadline
// (10 s; 408, or closed as the oldest when the non-stream bound is
// exceeded), and an open sync stream is untouched.
//
// Long work: that is the full size (SYNCPIPE_TEST_LONG=1). By default 600
// clients against a limit of 256 (bound (256 - 200) / 2 = 28). The invalid
// tokens' connections end at once (401), so it is the 300 valid ones that
// would be held: more than the process's descriptors. Without the bound on
// connections that are not streams the API runs out of them and /healthz
// stops answering; without the body deadline the connections the bound
// keeps stay open past it (both checked by removing them). The full size
// holds only 400 valid ones against 700 descriptors (and 3/4 of them
// allowed): it fails without the body deadline, not without the bound.
func TestAPISlowBodyConnections(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	nofile, clients := longtest.Pick(256, 700), longtest.Pick(600, 800)
	e, c := startTodosAPI(t, ctx, uint64(nofile))
	// (nofile - 200 streams) / 2: the bound leaves room for the rest.
	if want := fmt.Sprintf(`"open_file_limit":%d,"max_connections_not_streaming":%d`, nofile, (nofile-200)/2); !e.Logged(want) {
		t.Fatalf("no log line with %s:\n%s", want, e.TailLogs(4<<10))
	}
	stream := harness.OpenStream(t, ctx, e.API, e.Token("alice"), "")
	if !stream.Until(t, ctx, `"checkpoint_complete"`) {
		t.Fatal("the stream ended before its first checkpoint")
	}
	idle, _ := probeHealth(t, ctx, e.API, c.Pid(), 5)

	valid := "Token " + e.Token("bob")
	var conns []*slowConn
	t.Cleanup(func() {
		for _, s := range conns {
			s.conn.Close()
		}
	})
	for i := range clients {
		auth := "Token not.a.jwt"
		if i%2 == 1 {
			auth = valid
		}
		s, err := dialSlow(e.API, auth)
		if err != nil {
			t.Fatalf("slow client %d: %v", i, err)
		}
		conns = append(conns, s)
	}
	dialed := time.Now()
	lat, maxFiles := probeHealth(t, ctx, e.API, c.Pid(), 30)
	t.Logf("/healthz with %d slow-body clients: p50 %s, max %s (idle: p50 %s); syncpipe had at most %d open files of %d",
		clients, lat[len(lat)/2], lat[len(lat)-1], idle[len(idle)/2], maxFiles, nofile)
	// The bar is 100 ms; this bound leaves room for a race build
	// on shared cores, and a held connection per client would fail it.
	if p50 := lat[len(lat)/2]; p50 > 100*time.Millisecond || lat[len(lat)-1] > time.Second {
		t.Errorf("/healthz took p50 %s, max %s with %d slow clients, want p50 < 100ms", p50, lat[len(lat)-1], clients)
	}
	if maxFiles > nofile*3/4 {
		t.Errorf("syncpipe had %d open files of its %d", maxFiles, nofile)
	}
	checkSlowClosed(t, conns, dialed)
	e.Exec(ctx, `UPDATE lists SET name = 'after the slow clients' WHERE id = (SELECT id FROM lists ORDER BY id LIMIT 1)`)
	if !stream.Until(t, ctx, "after the slow clients") {
		t.Fatal("the sync stream ended while the slow clients were refused")
	}
}

// checkSlowClosed waits for the server to close every slow connection
// within the body deadline (and a margin) of the last one's start, and
// checks how: invalid tokens (even indexes) 401 or closed without an
// answer as the oldest; valid ones 408 or closed the same way.
func checkSlowClosed(t *testing.T, conns []*slowConn, dialed time.Time) {
	t.Helper()
	// The deadline is what is tested: 10 s of body deadline and 5 s of
	// margin for a race build on 2 busy cores.
	limit := time.After(time.Until(dialed.Add(15 * time.Second)))
	counts := map[string]int{}
	for i, s := range conns {
		select {
		case <-s.done:
		case <-limit:
			t.Fatalf("slow client %d still open %s after the last started (body deadline 10 s)", i, time.Since(dialed))
		}
		want := http.StatusRequestTimeout
		if i%2 == 0 {
			want = http.StatusUnauthorized
		}
		if s.status != want && s.status != 0 {
			t.Errorf("slow client %d: HTTP %d, want %d (or closed without one)", i, s.status, want)
		}
		counts[strconv.Itoa(s.status)]++
	}
	t.Logf("slow clients closed within %s of the last start; by status (0: closed as the oldest): %v", time.Since(dialed), counts)
	if counts["401"] == 0 {
		t.Error("no invalid token got its 401")
	}
}

// TestAPISlowBodyConnectionsAtScale is the issue's own figure, run by
// hand: SYNCPIPE_TEST_SLOWBODY_CONNS=20000 go test -run
// TestAPISlowBodyConnectionsAtScale ./e2e/api/ (no -race: the clients
// cost more than the server). The clients run in processes of their own,
// 5,000 connections each (each needs a descriptor, and one process may
// hold fewer than 20,000), half with an invalid token, half with a valid
// one. With SYNCPIPE_TEST_SLOWBODY_REDIAL=1 they redial every connection
// the server closes, so that N slow-body connections are attempted all
// the time (a connection flood). /healthz is timed throughout; its
// failures (no 200 within 5 s) are counted, not fatal.
func TestAPISlowBodyConnectionsAtScale(t *testing.T) {
	total, _ := strconv.Atoi(os.Getenv("SYNCPIPE_TEST_SLOWBODY_CONNS"))
	if total == 0 {
		t.Skip("a by-hand measurement, not part of go test or SYNCPIPE_TEST_LONG: SYNCPIPE_TEST_SLOWBODY_CONNS=20000 go test -run TestAPISlowBodyConnectionsAtScale ./e2e/api (without -race: its /healthz bar does not hold under the race detector on 2 cores)")
	}
	// Not parallel: its thousands of clients and its latency bar want the
	// machine to themselves.
	redial := os.Getenv("SYNCPIPE_TEST_SLOWBODY_REDIAL") != ""
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	e, c := startTodosAPI(t, ctx)
	var lim syscall.Rlimit
	_ = syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim)
	idle, _ := probeHealth(t, ctx, e.API, c.Pid(), 10)
	auth := []string{"Token not.a.jwt", "Token " + e.Token("bob")}
	actx, stop := context.WithCancel(ctx)
	var opened atomic.Int64
	var wg sync.WaitGroup
	defer func() { stop(); wg.Wait() }()
	// Timed while the clients connect (an accept storm, the attackers on
	// the same cores), and then with every connection open: the state the
	// bar is about.
	var lat, open []time.Duration
	var failed, failedOpen map[string]int
	var maxFiles, maxFilesOpen int
	connected := make(chan struct{})
	probed := make(chan struct{})
	go func() {
		defer close(probed)
		lat, failed, maxFiles = timeHealth(ctx, e.API, c.Pid(), 400, connected)
	}()
	start := time.Now()
	for i := 0; i < total; i += 5000 {
		spec := fmt.Sprintf("%s|%s|%d|%v", e.API, auth[(i/5000)%2], min(5000, total-i), redial)
		wg.Add(1)
		go func() { defer wg.Done(); startAttacker(t, actx, spec, &opened) }()
	}
	harness.Poll(t, ctx, c, "the slow clients to connect", func() bool { return opened.Load() >= int64(total) })
	t.Logf("%d slow-body connections opened in %s", opened.Load(), time.Since(start))
	close(connected)
	<-probed
	open, failedOpen, maxFilesOpen = timeHealth(ctx, e.API, c.Pid(), 100, nil)
	t.Logf("/healthz while %d slow-body clients connected (redial %v): %d probes answered, failed %v; answered: p50 %s, p90 %s, p99 %s, max %s "+
		"(idle p50 %s); syncpipe at most %d open files, hard limit %d",
		total, redial, len(lat), failed, pct(lat, 50), pct(lat, 90), pct(lat, 99), pct(lat, 100), idle[len(idle)/2], maxFiles, lim.Max)
	t.Logf("/healthz with the %d connections open: %d probes answered, failed %v; answered: p50 %s, p90 %s, p99 %s, max %s; "+
		"connections opened in all %d; syncpipe at most %d open files",
		total, len(open), failedOpen, pct(open, 50), pct(open, 90), pct(open, 99), pct(open, 100), opened.Load(), maxFilesOpen)
	if redial {
		// A flood (every closed connection redialled at once) is reported,
		// not held to the bar: the README says to rate-limit it in front of
		// the API, and the attackers share the test machine's cores.
		return
	}
	if p50 := pct(lat, 50); len(failed) > 0 || p50 > 100*time.Millisecond {
		t.Errorf("/healthz while they connected: failed %v, p50 %s, want none and p50 < 100ms", failed, p50)
	}
	if p99 := pct(open, 99); len(failedOpen) > 0 || p99 >= 100*time.Millisecond {
		t.Errorf("/healthz with them open: failed %v, p99 %s, want none and p99 < 100ms", failedOpen, p99)
	}
}

// timeHealth runs up to n /healthz probes 100 ms apart, for at most
// 40 s or until stop closes (nil: never), and returns the latencies of
// those answered 200, sorted, the errors of the others by kind, and the
// most file descriptors pid had.
func timeHealth(ctx context.Context, api string, pid, n int, stop <-chan struct{}) (lat []time.Duration, failed map[string]int, maxFiles int) {
	failed = map[string]int{}
	until := time.Now().Add(40 * time.Second)
	for i := 0; i < n && time.Now().Before(until) && !closed(stop); i++ {
		if d, err := healthLatency(ctx, api); err == nil {
			lat = append(lat, d)
		} else {
			failed[errKind(err)]++
		}
		maxFiles = max(maxFiles, openFiles(pid))
		time.Sleep(100 * time.Millisecond)
	}
	slices.Sort(lat)
	return lat, failed, maxFiles
}

// closed reports whether ch is closed (false for nil).
func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// errKind classifies a failed probe: timed out (its connection waited in
// the listen queue or unserved), or closed by the server.
func errKind(err error) string {
	if ne := net.Error(nil); errors.As(err, &ne) && ne.Timeout() {
		return "timeout"
	}
	for _, k := range []string{"reset", "EOF", "refused"} {
		if strings.Contains(err.Error(), k) {
			return k
		}
	}
	return err.Error()
}

// pct is the p-th percentile of sorted latencies (0 when none).
func pct(sorted []time.Duration, p int) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[min(len(sorted)-1, len(sorted)*p/100)]
}

// startAttacker runs a child slow-body client (runAttack's spec) until
// ctx ends, adding the connections it reports opening to opened. The
// child is this test binary (TestMain runs runAttack for attackEnv): a
// client, not syncpipe.
func startAttacker(t *testing.T, ctx context.Context, spec string, opened *atomic.Int64) {
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), attackEnv+"="+spec)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Error(err)
		return
	}
	if err := cmd.Start(); err != nil {
		t.Error(err)
		return
	}
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		if v, err := strconv.ParseInt(strings.TrimPrefix(sc.Text(), "opened "), 10, 64); err == nil {
			opened.Add(v)
		}
	}
	_ = cmd.Wait()
}

// runAttack is the attacker process, spec "addr|authorization|n|redial":
// it opens n slow-body requests (redialling each one the server closes
// when redial is true) and prints "opened N" for the connections it
// opened each second.
func runAttack(spec string) int {
	parts := strings.Split(spec, "|")
	if len(parts) != 4 {
		return 2
	}
	n, _ := strconv.Atoi(parts[2])
	redial := parts[3] == "true"
	var opened atomic.Int64
	for range n {
		go func() {
			for {
				s, err := dialSlow(parts[0], parts[1])
				if err != nil {
					time.Sleep(100 * time.Millisecond) // redial pace
					continue
				}
				opened.Add(1)
				<-s.done
				s.conn.Close()
				if !redial {
					return
				}
			}
		}()
	}
	for range time.Tick(time.Second) {
		fmt.Printf("opened %d\n", opened.Swap(0))
	}
	return 0
}
