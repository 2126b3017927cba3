package badinput

import (
	"context"
	"flag"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/syncpipe/syncpipe/internal/bucketcheck"
)

var update = flag.Bool("update", false, "rewrite golden files and the README's bad-input catalogue")

// checkGolden compares got with the golden file (with -update: rewrites
// it).
func checkGolden(t *testing.T, golden, got string) {
	t.Helper()
	if *update {
		if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (run with -update to create)", err)
	}
	if got != string(want) {
		t.Fatalf("output differs from %s:\n--- got\n%s\n--- want\n%s", golden, got, want)
	}
}

// health reads addr's /healthz: its status code and body as served (""
// when it does not answer within 10 s).
func health(addr string) (int, string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/healthz", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, ""
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, strings.TrimSpace(string(b))
}

// get returns the status code and body of GET http://addr+path, sent with
// token when not empty (code 0 and the error when addr does not answer).
func get(ctx context.Context, addr, path, token string) (int, string) {
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(rctx, http.MethodGet, "http://"+addr+path, nil)
	if err != nil {
		return 0, err.Error()
	}
	if token != "" {
		req.Header.Set("Authorization", "Token "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// latest keeps the rows of the latest complete checkpoint a
// harness.SyncClient saw.
type latest struct {
	mu   sync.Mutex
	rows bucketcheck.State
	n    int // complete checkpoints seen
}

func (w *latest) observe(_ string, rows map[string]map[string]string) {
	copied := bucketcheck.State{}
	for name, rs := range rows {
		if len(rs) > 0 {
			m := make(map[string]string, len(rs))
			for k, v := range rs {
				m[k] = v
			}
			copied[name] = m
		}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.rows = copied
	w.n++
}

// holds returns a condition: the latest complete checkpoint held exactly
// want (compared once per checkpoint).
func (w *latest) holds(want bucketcheck.State) func() bool {
	compared, equal := -1, false
	return func() bool {
		w.mu.Lock()
		rows, n := w.rows, w.n // rows is replaced, never modified
		w.mu.Unlock()
		if n != compared {
			compared, equal = n, rows != nil && bucketcheck.Diff(rows, want) == nil
		}
		return equal
	}
}
