// Package cli is the syncpipe command line as a library: Main runs the
// run, validate, status, token and demo subcommands exactly as the
// syncpipe binary does (cmd/syncpipe is Main and signal handling), so that
// a program can add its own sinks and still be the whole syncpipe:
//
//	func init() { sinks.MustRegister("mysink", spec, open) }
//
//	func main() {
//		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
//		code := cli.Main(ctx, os.Args[1:], os.Stdout, os.Stderr)
//		stop()
//		os.Exit(code)
//	}
//
// Every sink registered before Main runs (sinks.Register, usually in an
// init function) can be named in YAML pipelines: validate accepts its type
// name and checks its settings against its spec, with file positions, and
// run opens it. The built-in sinks bucketstore and jsonl are always
// registered. examples/httpsink is a complete such program.
//
//	run      --config F [--role R]   replicate and serve
//	validate --config F              check a config file offline
//	status   --config F              groups, snapshot progress, lag
//	token    --config F --sub USER   mint a development JWT
//	demo                             self-contained demo on a throwaway Postgres
package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"runtime/debug"
)

// Exit codes Main returns, shared by all subcommands.
const (
	// ExitOK is success, including -h.
	ExitOK = 0
	// ExitFailure is a runtime failure: a database that does not answer,
	// replication that stopped.
	ExitFailure = 1
	// ExitUsage is invalid usage or configuration: unknown command or
	// flag, a config file or sync rules with problems.
	ExitUsage = 2
)

// errUsage marks errors that are the caller's input, not a runtime failure.
var errUsage = errors.New("usage")

// command is one subcommand: its name on the command line, the line usage
// prints for it, and what it runs.
type command struct {
	name    string
	summary string
	run     func(ctx context.Context, args []string, stdout, stderr io.Writer) error
}

// commands lists the subcommands in the order usage prints them.
func commands() []command {
	return []command{
		{"run", "replicate the source into bucket storage and serve the sync API", runRun},
		{"validate", "check a configuration file and its sync rules, and what run needs of the source (--offline: the file alone, connecting nowhere)", runValidate},
		{"status", "show replication groups, per-table snapshot progress, lag and slot health", runStatus},
		{"compact", "compact bucket storage online (superseded ops to MOVE, leading runs to CLEAR; checksums unchanged)", runCompact},
		{"token", "mint a development JWT signed with the configured HS256 secret", runToken},
		{"demo", "start a throwaway Postgres with sample todo lists and run syncpipe on it", runDemo},
	}
}

// defaultMemoryLimit is the Go heap's soft limit unless GOMEMLIMIT says
// otherwise: the garbage collector works harder near it instead of letting
// the heap grow to twice what is live, which keeps a process with several
// snapshot workers within a few hundred MB (SPEC §9 P6).
const defaultMemoryLimit = 400 << 20

// Main runs the subcommand named by args[0] (args are the program's
// arguments without its name, os.Args[1:]) with the rest as its flags,
// until it ends or ctx is cancelled (a SIGTERM, say: run then shuts down
// gracefully), and returns the exit code: ExitOK, ExitFailure or
// ExitUsage. Problems are printed to stderr, results to stdout. Main is
// meant to be the whole of a program's main: unless GOMEMLIMIT or the
// program itself set one, it sets the process's soft memory limit, as the
// syncpipe binary always did.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	// SetMemoryLimit(-1) only reads the limit; MaxInt64 means none is set.
	if os.Getenv("GOMEMLIMIT") == "" && debug.SetMemoryLimit(-1) == math.MaxInt64 {
		debug.SetMemoryLimit(defaultMemoryLimit)
	}
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		usage(stderr)
		if len(args) == 0 {
			return ExitUsage
		}
		return ExitOK
	}
	for _, c := range commands() {
		if c.name != args[0] {
			continue
		}
		err := c.run(ctx, args[1:], stdout, stderr)
		switch {
		case err == nil:
			return ExitOK
		case errors.Is(err, flag.ErrHelp):
			return ExitOK
		case errors.Is(err, errUsage):
			if msg := usageMessage(err); msg != "" {
				fmt.Fprintln(stderr, msg)
			}
			return ExitUsage
		default:
			fmt.Fprintf(stderr, "syncpipe %s: %v\n", c.name, err)
			return ExitFailure
		}
	}
	fmt.Fprintf(stderr, "syncpipe: unknown command %q\n\n", args[0])
	usage(stderr)
	return ExitUsage
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
