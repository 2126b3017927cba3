package streams

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/syncpipe/syncpipe/internal/testkit/harness"
)

// firstLine is the first line of s that is not a token_expires_in
// keepalive.
func firstLine(t *testing.T, s *harness.RawStream) string {
	t.Helper()
	for {
		l, open := <-s.Lines
		switch {
		case !open:
			t.Fatal("the stream ended without a line")
		case !strings.HasPrefix(l, `{"token_expires_in":`):
			return l
		}
	}
}

// user1List is user1's first list (by id), its todo count, and how many
// lists user1 owns.
func user1List(t *testing.T, ctx context.Context, e *harness.Env) (list string, listTodos, userLists int) {
	t.Helper()
	if err := e.Src.QueryRow(ctx, `SELECT l.id::text, (SELECT count(*) FROM todos WHERE list_id = l.id),
		(SELECT count(*) FROM lists WHERE owner_id = 'user1') FROM lists l WHERE owner_id = 'user1' ORDER BY id LIMIT 1`).Scan(&list, &listTodos, &userLists); err != nil {
		t.Fatal(err)
	}
	return list, listTodos, userLists
}

// syncUntilComplete reads s to its first checkpoint_complete and returns
// the last checkpoint line before it; onData sees every data line.
func syncUntilComplete(t *testing.T, ctx context.Context, s *harness.RawStream, onData func(line string)) (checkpoint string) {
	t.Helper()
	for {
		select {
		case l, open := <-s.Lines:
			switch {
			case !open:
				t.Fatalf("the stream ended before checkpoint_complete (checkpoint %.300s)", checkpoint)
			case strings.HasPrefix(l, `{"checkpoint":`):
				checkpoint = l
			case strings.HasPrefix(l, `{"data":`):
				onData(l)
			case strings.HasPrefix(l, `{"checkpoint_complete":`):
				return checkpoint
			}
		case <-ctx.Done():
			t.Fatal("no checkpoint_complete")
		}
	}
}

// countPuts adds the PUTs of a data line to rows by object type (lists,
// todos).
func countPuts(rows map[string]int) func(line string) {
	return func(l string) {
		rows["lists"] += strings.Count(l, `"object_type":"lists"`)
		rows["todos"] += strings.Count(l, `"object_type":"todos"`)
	}
}

// multiLookupCheckpoint opens a stream for user1 and reads it to its
// first checkpoint_complete: the checkpoint's buckets and the PUTs per
// stream.
func multiLookupCheckpoint(t *testing.T, ctx context.Context, e *harness.Env) ([]string, map[string]int) {
	t.Helper()
	s := harness.OpenStream(t, ctx, e.API, e.Token("user1"), `{"raw_data":true}`)
	puts := map[string]int{}
	line := syncUntilComplete(t, ctx, s, func(l string) {
		var d struct {
			Data struct {
				Bucket string `json:"bucket"`
			} `json:"data"`
		}
		if err := json.Unmarshal([]byte(l), &d); err != nil {
			t.Fatal(err)
		}
		stream, _, _ := strings.Cut(strings.TrimPrefix(d.Data.Bucket, "1#"), "|")
		puts[stream] += strings.Count(l, `"op":"PUT"`)
	})
	var cp struct {
		Checkpoint struct {
			Buckets []struct {
				Bucket string `json:"bucket"`
			} `json:"buckets"`
		} `json:"checkpoint"`
	}
	if err := json.Unmarshal([]byte(line), &cp); err != nil {
		t.Fatal(err)
	}
	var buckets []string
	for _, b := range cp.Checkpoint.Buckets {
		buckets = append(buckets, b.Bucket)
	}
	return buckets, puts
}

// readUntil appends the stream's data lines, quotes unescaped, to data
// until a line holds stop.
func readUntil(t *testing.T, ctx context.Context, s *harness.RawStream, data *strings.Builder, stop string) {
	t.Helper()
	for {
		select {
		case l, open := <-s.Lines:
			if !open {
				t.Fatalf("the stream ended before %s", stop)
			}
			l = strings.ReplaceAll(l, `\"`, `"`) // row data is JSON in a string
			if strings.HasPrefix(l, `{"data":`) {
				data.WriteString(l + "\n")
			}
			if strings.Contains(l, stop) {
				return
			}
		case <-ctx.Done():
			t.Fatalf("no %s; data so far:\n%s", stop, data.String())
		}
	}
}
