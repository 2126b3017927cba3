package harness

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

// HealthBody is the JSON of /healthz.
type HealthBody struct {
	OK      bool   `json:"ok"`
	Status  string `json:"status"`
	Reasons []struct {
		Group int       `json:"group"`
		Error string    `json:"error"`
		Since time.Time `json:"since"`
	} `json:"reasons"`
}

// Health reads addr's /healthz; code 0 when it does not answer.
func Health(ctx context.Context, addr string) (code int, body HealthBody) {
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(rctx, http.MethodGet, "http://"+addr+"/healthz", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, body
	}
	defer resp.Body.Close()
	_ = json.NewDecoder(resp.Body).Decode(&body)
	return resp.StatusCode, body
}

// Get returns the status code and body of GET http://addr+path, sent with
// token (Authorization: Token …) when not empty; code 0 and the error's
// text when addr does not answer within 10 s.
func Get(ctx context.Context, addr, path, token string) (int, string) {
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

// Series is one sample of a /metrics scrape.
type Series struct {
	Name   string
	Labels map[string]string
	Value  float64
	Line   string // the sample's line as served
}

// Scrape reads every sample of addr's /metrics (nil if it does not answer).
func Scrape(ctx context.Context, addr string) []Series {
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(rctx, http.MethodGet, "http://"+addr+"/metrics", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var out []Series
	for _, l := range strings.Split(string(b), "\n") {
		if s, ok := parseSample(l); ok {
			out = append(out, s)
		}
	}
	return out
}

// parseSample parses one exposition line (not a comment).
func parseSample(l string) (Series, bool) {
	if l == "" || l[0] == '#' {
		return Series{}, false
	}
	sp := strings.LastIndexByte(l, ' ')
	if sp < 0 {
		return Series{}, false
	}
	v, err := strconv.ParseFloat(l[sp+1:], 64)
	if err != nil {
		return Series{}, false
	}
	s := Series{Labels: map[string]string{}, Value: v, Line: l}
	name, labels, hasLabels := strings.Cut(l[:sp], "{")
	s.Name = name
	if hasLabels {
		for _, kv := range strings.Split(strings.TrimSuffix(labels, "}"), ",") {
			if k, v, ok := strings.Cut(kv, "="); ok {
				s.Labels[k] = strings.Trim(v, `"`)
			}
		}
	}
	return s, true
}

// Sample returns the value of the series named name that has all of labels
// ("k", "v", …) and whether there is one (the sum if several match).
func Sample(ss []Series, name string, labels ...string) (float64, bool) {
	var sum float64
	found := false
next:
	for _, s := range ss {
		if s.Name != name {
			continue
		}
		for i := 0; i+1 < len(labels); i += 2 {
			if s.Labels[labels[i]] != labels[i+1] {
				continue next
			}
		}
		sum += s.Value
		found = true
	}
	return sum, found
}

// RawStream is an open /sync/stream read line by line.
type RawStream struct {
	Lines chan string // closed at the end of the stream
	ended time.Time
}

// PostStream sends POST /sync/stream with token and the request body
// body (`{"raw_data":true}` when empty) and returns the response whatever
// its status; the caller closes its body, which a 200 holds open (and its
// connection slot) until then.
func PostStream(ctx context.Context, api, token, body string) (*http.Response, error) {
	if body == "" {
		body = `{"raw_data":true}`
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+api+"/sync/stream", strings.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Token "+token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("POST /sync/stream: %w", err)
	}
	return resp, nil
}

// OpenStream opens a /sync/stream with the request body body
// (`{"raw_data":true}` when empty), failing unless it answers 200.
func OpenStream(t testing.TB, ctx context.Context, api, token, body string) *RawStream {
	t.Helper()
	resp, err := PostStream(ctx, api, token, body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		t.Fatalf("sync stream: HTTP %d: %s", resp.StatusCode, b)
	}
	s := &RawStream{Lines: make(chan string, 4096)}
	go func() {
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 64<<10), 16<<20)
		for sc.Scan() {
			s.Lines <- sc.Text()
		}
		s.ended = time.Now()
		close(s.Lines)
	}()
	return s
}

// Ended is when the server ended the stream; valid after Lines is closed.
func (s *RawStream) Ended() time.Time { return s.ended }

// Until reads lines until one contains want; ok is false if the stream
// ended first.
func (s *RawStream) Until(t testing.TB, ctx context.Context, want string) (ok bool) {
	t.Helper()
	for {
		select {
		case l, open := <-s.Lines:
			if !open {
				return false
			}
			if strings.Contains(l, want) {
				return true
			}
		case <-ctx.Done():
			t.Fatalf("waiting for a stream line with %q: %v", want, ctx.Err())
		}
	}
}

// Drain reads until the server ends the stream.
func (s *RawStream) Drain(t testing.TB, ctx context.Context) {
	t.Helper()
	for {
		select {
		case _, open := <-s.Lines:
			if !open {
				return
			}
		case <-ctx.Done():
			t.Fatalf("waiting for the server to end the stream: %v", ctx.Err())
		}
	}
}
