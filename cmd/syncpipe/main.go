// Command syncpipe replicates a PostgreSQL database into bucket storage and
// serves it to PowerSync clients.
//
//	syncpipe run      --config F [--role R]   replicate and serve
//	syncpipe validate --config F              check a config file offline
//	syncpipe status   --config F              groups, snapshot progress, lag
//	syncpipe token    --config F --sub USER   mint a development JWT
//	syncpipe demo                             self-contained demo on a throwaway Postgres
//
// Exit codes: 0 success, 1 runtime failure, 2 invalid usage or configuration.
//
// All of it is package cli; this command only turns SIGINT and SIGTERM into
// the cancellation cli.Main shuts down on. A program that adds sinks of its
// own does the same (see examples/httpsink).
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/syncpipe/syncpipe/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := cli.Main(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
