package streams

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/syncpipe/syncpipe/internal/testkit/harness"
)

// TestRunStreamsTimestamps: with Sync Streams (edition 3) the synced row
// data holds timestamptz, timestamp and time values in PowerSync's ISO 8601
// form (timestamps_iso8601, on from edition 2), from the snapshot and from
// a streamed update alike; with timestamps_iso8601: false they keep the
// edition-1 text.
func TestRunStreamsTimestamps(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name, config string
		snapshot     []string // in the first checkpoint's data
		update       []string // after the UPDATE
	}{
		{"iso", "{edition: 3}",
			[]string{`"tz":"2024-01-02T03:04:05.120000Z"`, `"ts":"2024-01-02T03:04:05.000000"`, `"tm":"12:13:14.000000"`},
			[]string{`"tz":"2025-06-07T08:09:10.000000Z"`, `"ts":"2025-06-07T08:09:10.500000"`, `"tm":"23:00:00.250000"`}},
		{"edition1_text", "{edition: 3, timestamps_iso8601: false}",
			[]string{`"tz":"2024-01-02 03:04:05.12Z"`, `"ts":"2024-01-02 03:04:05"`, `"tm":"12:13:14"`},
			[]string{`"tz":"2025-06-07 08:09:10Z"`, `"ts":"2025-06-07 08:09:10.5"`, `"tm":"23:00:00.25"`}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			rules := "config: " + c.config + "\nstreams:\n  times:\n    auto_subscribe: true\n    query: SELECT * FROM events\n"
			e := harness.New(t, harness.Options{Rules: rules})
			if _, err := e.Src.Exec(ctx, `CREATE TABLE events (id text PRIMARY KEY, tz timestamptz, ts timestamp, tm time);
				INSERT INTO events VALUES ('e1', '2024-01-02 05:04:05.12+02', '2024-01-02 03:04:05', '12:13:14')`); err != nil {
				t.Fatal(err)
			}
			e.Start()
			e.WaitCaughtUp(ctx)
			s := harness.OpenStream(t, ctx, e.API, e.Token("user1"), "")
			var data strings.Builder
			readUntil(t, ctx, s, &data, `{"checkpoint_complete":`)
			for _, w := range c.snapshot {
				if !strings.Contains(data.String(), w) {
					t.Errorf("snapshot data lacks %s:\n%s", w, data.String())
				}
			}
			if _, err := e.Src.Exec(ctx, `UPDATE events SET tz = '2025-06-07 08:09:10+00', ts = '2025-06-07 08:09:10.5', tm = '23:00:00.25'`); err != nil {
				t.Fatal(err)
			}
			data.Reset()
			readUntil(t, ctx, s, &data, c.update[0])
			readUntil(t, ctx, s, &data, `{"checkpoint_complete":`)
			for _, w := range c.update {
				if !strings.Contains(data.String(), w) {
					t.Errorf("streamed update lacks %s:\n%s", w, data.String())
				}
			}
		})
	}
}
