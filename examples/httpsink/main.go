// Command httpsink runs the pipelines of a syncpipe config with one more sink type, "http": each
// batch is POSTed as {"changes":[jsonl lines]}. It needs no storage database: each pipeline's state
// is kept in state_dir. Delivery is at least once, so receivers de-duplicate streamed changes by
// (key, lsn, i) (sinks/doc.go).
package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/syncpipe/syncpipe/config"
	"github.com/syncpipe/syncpipe/replication"
	"github.com/syncpipe/syncpipe/sinks"
	"github.com/syncpipe/syncpipe/sinks/jsonl"
)

// sink POSTs to url; the embedded FileProgress is its Commit, Resume and Close.
type sink struct {
	*sinks.FileProgress
	url    string
	client *http.Client
}

// Writer returns the sink itself for every lane: an http.Client serves them all at once.
func (s *sink) Writer(context.Context, int) (sinks.Writer, error) { return s, nil }

// Write POSTs the batch; unless the answer is 2xx (or on a crash before its commit) it is sent again.
func (s *sink) Write(_ context.Context, b sinks.Batch) error {
	if len(b.Items) == 0 {
		return nil // a batch that carries only progress
	}
	body := append(jsonl.AppendChanges([]byte(`{"changes":`), b.Items), '}')
	resp, err := s.client.Post(s.url, "application/json", bytes.NewReader(body))
	if err == nil {
		resp.Body.Close()
		if resp.StatusCode/100 != 2 {
			err = fmt.Errorf("POST %s: %s", s.url, resp.Status)
		}
	}
	return err
}

func main() {
	sinks.MustRegister("http", sinks.Spec{Summary: "POSTs batches of changes as JSON (examples/httpsink).", Fields: []sinks.Field{
		{Name: "url", Type: sinks.FieldString, Required: true, Doc: "Endpoint the batches are POSTed to."},
		{Name: "timeout", Type: sinks.FieldDuration, Default: 10 * time.Second, Doc: "Bound of one POST, also at shutdown."},
		{Name: "progress_file", Type: sinks.FieldString, Required: true, Doc: "File of the committed progress."},
	}}, func(_ context.Context, set *sinks.Settings, _ sinks.Env) (sinks.Sink, error) {
		p, err := sinks.OpenFileProgress(set.String("progress_file"))
		return &sink{p, set.String("url"), &http.Client{Timeout: set.Duration("timeout")}}, err
	})
	path := flag.String("config", "", "the syncpipe YAML config (required)")
	check := flag.Bool("check", false, "check the config offline, then exit")
	flag.Parse()
	cfg, err := config.Load(*path)
	if err == nil {
		err = replication.CheckSinks(cfg) // the sink types and their settings, with file positions
	}
	if err != nil {
		for _, e := range config.AsErrors(err) {
			fmt.Fprintln(os.Stderr, e)
		}
		os.Exit(2)
	}
	if *check {
		fmt.Printf("%s: ok (%d pipeline(s))\n", *path, len(cfg.EffectivePipelines()))
		return
	}
	var level slog.Level
	_ = level.UnmarshalText([]byte(cfg.Log.Level))
	log := slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := replication.RunPipelines(ctx, replication.Options{Config: cfg, Logger: log, Role: "all"}); err != nil {
		log.Error("httpsink failed", "err", err)
		os.Exit(1)
	}
}
