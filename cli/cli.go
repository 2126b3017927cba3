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
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"
)

// Exit codes shared by all subcommands.
const (
	exitOK      = 0
	exitFailure = 1
	exitUsage   = 2
)

// errUsage marks errors that are the caller's input, not a runtime failure.
var errUsage = errors.New("usage")

type command struct {
	name    string
	summary string
	run     func(ctx context.Context, args []string, stdout, stderr io.Writer) error
}

func commands() []command {
	return []command{
		{"run", "replicate the source into bucket storage and serve the sync API", runRun},
		{"validate", "check a configuration file (and its sync rules) without connecting anywhere", runValidate},
		{"status", "show replication groups, per-table snapshot progress, lag and slot health", runStatus},
		{"token", "mint a development JWT signed with the configured HS256 secret", runToken},
		{"demo", "start a throwaway Postgres with sample todo lists and run syncpipe on it", runDemo},
	}
}

// defaultMemoryLimit is the Go heap's soft limit unless GOMEMLIMIT says
// otherwise: the garbage collector works harder near it instead of letting
// the heap grow to twice what is live, which keeps a process with several
// snapshot workers within a few hundred MB (SPEC §9 P6).
const defaultMemoryLimit = 400 << 20

func main() {
	if os.Getenv("GOMEMLIMIT") == "" {
		debug.SetMemoryLimit(defaultMemoryLimit)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		usage(stderr)
		if len(args) == 0 {
			return exitUsage
		}
		return exitOK
	}
	for _, c := range commands() {
		if c.name != args[0] {
			continue
		}
		err := c.run(ctx, args[1:], stdout, stderr)
		switch {
		case err == nil:
			return exitOK
		case errors.Is(err, flag.ErrHelp):
			return exitOK
		case errors.Is(err, errUsage):
			if msg := usageMessage(err); msg != "" {
				fmt.Fprintln(stderr, msg)
			}
			return exitUsage
		default:
			fmt.Fprintf(stderr, "syncpipe %s: %v\n", c.name, err)
			return exitFailure
		}
	}
	fmt.Fprintf(stderr, "syncpipe: unknown command %q\n\n", args[0])
	usage(stderr)
	return exitUsage
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: syncpipe <command> [flags]\n\ncommands:")
	for _, c := range commands() {
		fmt.Fprintf(w, "  %-9s %s\n", c.name, c.summary)
	}
	fmt.Fprintln(w, "\nRun 'syncpipe <command> -h' for the flags of a command.")
}

// usageError wraps a message as a usage error (exit code 2).
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }
func (e usageError) Unwrap() error { return errUsage }

func usagef(format string, a ...any) error { return usageError{fmt.Sprintf(format, a...)} }

func usageMessage(err error) string {
	var ue usageError
	if errors.As(err, &ue) {
		return ue.msg
	}
	return ""
}

// newFlags returns a flag set that reports errors instead of exiting.
func newFlags(name string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("syncpipe "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	return fs
}

// parseFlags parses args, turning flag errors into usage errors.
func parseFlags(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return usageError{} // the flag package already printed the message
	}
	if fs.NArg() > 0 {
		return usagef("%s: unexpected arguments %q", fs.Name(), fs.Args())
	}
	return nil
}
