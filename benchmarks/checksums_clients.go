package benchmarks

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

const (
	p5Secret   = "p5-bench-secret-of-32-bytes-or-more"
	p5Audience = "syncpipe-bench"
)

// p5Arrivals records when clients received each checkpoint's lines.
type p5Arrivals struct {
	mu       sync.Mutex
	diff     map[int64][]time.Time
	complete map[int64][]time.Time
	err      error
	ping     chan struct{} // signalled on every checkpoint_complete or error
}

func newP5Arrivals() *p5Arrivals {
	return &p5Arrivals{diff: map[int64][]time.Time{}, complete: map[int64][]time.Time{}, ping: make(chan struct{}, 1)}
}

func (a *p5Arrivals) signal() {
	select {
	case a.ping <- struct{}{}:
	default:
	}
}

func (a *p5Arrivals) add(m map[int64][]time.Time, op int64, at time.Time) {
	a.mu.Lock()
	m[op] = append(m[op], at)
	a.mu.Unlock()
	a.signal()
}

func (a *p5Arrivals) fail(err error) {
	a.mu.Lock()
	if a.err == nil {
		a.err = err
	}
	a.mu.Unlock()
	a.signal()
}

// waitComplete blocks until n clients reported checkpoint_complete for op,
// a client failed, or the limit passed.
func (a *p5Arrivals) waitComplete(ctx context.Context, op int64, n int, limit time.Duration) error {
	t := time.NewTimer(limit)
	defer t.Stop()
	for {
		a.mu.Lock()
		got, err := len(a.complete[op]), a.err
		a.mu.Unlock()
		if err != nil {
			return err
		}
		if got >= n {
			return nil
		}
		select {
		case <-a.ping:
		case <-t.C:
			return fmt.Errorf("only %d of %d clients completed checkpoint %d within %s", got, n, op, limit)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// times returns copies of what clients reported for op.
func (a *p5Arrivals) times(op int64) (diff, complete []time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]time.Time(nil), a.diff[op]...), append([]time.Time(nil), a.complete[op]...)
}

// p5Token mints a client's HS256 token.
func p5Token(user string) (string, error) {
	now := time.Now()
	return jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{
		"sub": user, "iat": now.Unix(), "exp": now.Add(2 * time.Hour).Unix(), "aud": p5Audience,
	}).SignedString([]byte(p5Secret))
}

// runP5Client opens a sync stream for user over HTTP (with streams, the
// request's streams object) and reports the checkpoint lines it reads
// until ctx ends. It claims to hold the global
// bucket up to globalAfter, as a client that synced it before would, so
// that 100 clients do not each download 200 MB first.
func runP5Client(ctx context.Context, url, user, global string, globalAfter int64, streams map[string]any, rec *p5Arrivals) {
	err := func() error {
		body := map[string]any{"raw_data": true, "client_id": user,
			"buckets": []map[string]string{{"name": global, "after": strconv.FormatInt(globalAfter, 10)}}}
		if streams != nil {
			body["streams"] = streams
		}
		resp, err := openSyncStream(ctx, http.DefaultClient, url, user, body)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		r := bufio.NewReaderSize(resp.Body, 64<<10)
		for {
			line, err := r.ReadSlice('\n')
			if errors.Is(err, bufio.ErrBufferFull) {
				// A long data line: skip to its end.
				for errors.Is(err, bufio.ErrBufferFull) {
					_, err = r.ReadSlice('\n')
				}
				continue
			}
			if err != nil {
				return err
			}
			now := time.Now()
			switch {
			case bytes.HasPrefix(line, []byte(`{"checkpoint_diff":`)):
				op, perr := p5LastOpID(line)
				if perr != nil {
					return perr
				}
				rec.add(rec.diff, op, now)
			case bytes.HasPrefix(line, []byte(`{"checkpoint_complete":`)):
				op, perr := p5LastOpID(line)
				if perr != nil {
					return perr
				}
				rec.add(rec.complete, op, now)
			case bytes.HasPrefix(line, []byte(`{"error":`)):
				return fmt.Errorf("stream error: %s", line)
			}
		}
	}()
	if err != nil && ctx.Err() == nil {
		rec.fail(fmt.Errorf("client %s: %w", user, err))
	}
}

// openSyncStream posts request to url's /sync/stream as user (a p5Token)
// and returns the response once it is 200; the caller closes its body.
func openSyncStream(ctx context.Context, hc *http.Client, url, user string, request any) (*http.Response, error) {
	tok, err := p5Token(user)
	if err != nil {
		return nil, err
	}
	body, err := json.Marshal(request)
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url+"/sync/stream", bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Token "+tok)
	resp, err := hc.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 1000))
		resp.Body.Close()
		return nil, fmt.Errorf("HTTP %d: %s", resp.StatusCode, msg)
	}
	return resp, nil
}

// p5LastOpID reads last_op_id from a checkpoint_diff or checkpoint_complete
// line.
func p5LastOpID(line []byte) (int64, error) {
	var l map[string]struct {
		LastOpID string `json:"last_op_id"`
	}
	if err := json.Unmarshal(line, &l); err != nil {
		return 0, fmt.Errorf("bad checkpoint line %.100q: %w", line, err)
	}
	for _, v := range l {
		return strconv.ParseInt(v.LastOpID, 10, 64)
	}
	return 0, fmt.Errorf("empty line %q", line)
}
