// Command testreport reads `go test -json` on standard input and prints
// readable progress (a line per package and per top-level test, the
// output of every failure), then the 20 slowest tests, each package's
// elapsed time and a closing "tests: N passed, N failed, N skipped" line.
// It exits 1 when a test or a package failed or a test did not finish.
// .ci/run pipes the test run through it:
//
//	go test -json -race -count=1 ./... | tee tests.json | go run ./.ci/testreport
//
// It lives under .ci (a directory `go test ./...` and `go vet ./...` do
// not enter); its logic and tests are internal/testreport.
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/syncpipe/syncpipe/internal/testreport"
)

func main() {
	slowest := flag.Int("slowest", 20, "how many of the slowest tests to list")
	flag.Parse()
	sum, err := testreport.Read(os.Stdin, os.Stdout)
	if err != nil {
		fmt.Fprintln(os.Stderr, "testreport:", err)
		os.Exit(2)
	}
	sum.WriteSummary(os.Stdout, *slowest)
	if !sum.OK() {
		os.Exit(1)
	}
	if sum.Passed == 0 {
		fmt.Println("testreport: no test ran")
		os.Exit(1)
	}
}
