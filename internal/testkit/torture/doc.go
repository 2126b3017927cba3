// Package torture is a fault-injection harness for `syncpipe run`
// (issue 17): a TCP proxy that cuts or stalls the connections between
// syncpipe and its PostgreSQL servers (proxy.go), a random workload over
// three source tables (workload.go), a PowerSync protocol client that
// checks every checkpoint it completes (client.go), and an oracle that
// recomputes every bucket from the source with plain SQL, independently of
// the rules engine, and compares it with what storage and the clients hold
// (oracle.go).
//
// TestTortureFaultTrials drives them against real syncpipe child
// processes — two `--role replication` and one `--role api` sharing one
// storage, source and storage each on a PostgreSQL server of the test's
// own so that it can be restarted — for 6 trials in a plain `go test`
// (a fixed seed, six kinds of fault; 60 trials of every kind, a fresh seed,
// with SYNCPIPE_TEST_LONG=1: `task test:long`), each one fault
// (SIGKILL, SIGSTOP past the lease, a cut or a stall of the storage or
// source network, storage read-only, a restart of the storage or the
// source server, fast or a crash, a rules table renamed away, written
// there and renamed back) followed by a catch-up and a full check.
// Knobs (environment): SYNCPIPE_TORTURE_TRIALS, SYNCPIPE_TORTURE_SEED (every
// run logs the seed it used, and a failure the command that reruns it;
// without it the seed is internal/testkit/longtest's, SYNCPIPE_TEST_SEED), SYNCPIPE_TORTURE_LARGE_ROWS,
// SYNCPIPE_TORTURE_FAULTS (a comma-separated subset of the kinds),
// SYNCPIPE_TORTURE_BIN (a built syncpipe binary for the children instead
// of the test binary acting as one). The soak form, which then runs the
// load scenario (benchmarks: 1,000 sync clients + 5k changes/s) for ten
// minutes and writes both summaries to benchmarks/results/soak.md:
//
//	go run ./benchmarks/cmd/soak -trials 200
//
// Product bugs the harness found are trials of their own, made
// deterministic, in regressions_test.go.
package torture
