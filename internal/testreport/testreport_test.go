package testreport

import (
	"strings"
	"testing"
)

// stream is a `go test -json` stream of three packages: one passing with
// a subtest, one with a failing test (its log and a failing subtest), one
// that did not build, one without tests, and a timeout that cut a test
// off. Non-JSON lines pass through.
const stream = `{"Action":"start","Package":"m/a"}
{"Action":"run","Package":"m/a","Test":"TestFast"}
{"Action":"output","Package":"m/a","Test":"TestFast","Output":"=== RUN   TestFast\n"}
{"Action":"run","Package":"m/a","Test":"TestFast/sub"}
{"Action":"pass","Package":"m/a","Test":"TestFast/sub","Elapsed":0.1}
{"Action":"pass","Package":"m/a","Test":"TestFast","Elapsed":0.2}
{"Action":"run","Package":"m/a","Test":"TestSlow"}
{"Action":"pass","Package":"m/a","Test":"TestSlow","Elapsed":12.5}
{"Action":"run","Package":"m/a","Test":"TestSkipped"}
{"Action":"skip","Package":"m/a","Test":"TestSkipped","Elapsed":0}
{"Action":"output","Package":"m/a","Output":"ok  \tm/a\t13.0s\n"}
{"Action":"pass","Package":"m/a","Elapsed":13.0}
{"Action":"run","Package":"m/b","Test":"TestBroken"}
{"Action":"output","Package":"m/b","Test":"TestBroken","Output":"=== RUN   TestBroken\n"}
{"Action":"run","Package":"m/b","Test":"TestBroken/case"}
{"Action":"output","Package":"m/b","Test":"TestBroken/case","Output":"    b_test.go:9: got 1, want 2\n"}
{"Action":"fail","Package":"m/b","Test":"TestBroken/case","Elapsed":0.3}
{"Action":"fail","Package":"m/b","Test":"TestBroken","Elapsed":0.4}
{"Action":"run","Package":"m/b","Test":"TestHangs"}
{"Action":"output","Package":"m/b","Test":"TestHangs","Output":"=== RUN   TestHangs\n"}
{"Action":"output","Package":"m/b","Output":"panic: test timed out after 8m0s\n"}
{"Action":"fail","Package":"m/b","Elapsed":480.1}
{"ImportPath":"m/c","Action":"build-output","Output":"c/c.go:3:1: syntax error\n"}
{"ImportPath":"m/c","Action":"build-fail"}
{"Action":"start","Package":"m/c"}
{"Action":"output","Package":"m/c","Output":"FAIL\tm/c [build failed]\n"}
{"Action":"fail","Package":"m/c","Elapsed":0,"FailedBuild":"m/c"}
{"Action":"skip","Package":"m/d","Elapsed":0}
go: some message on stderr
`

func TestReadStream(t *testing.T) {
	var live, report strings.Builder
	sum, err := Read(strings.NewReader(stream), &live)
	if err != nil {
		t.Fatal(err)
	}
	sum.WriteSummary(&report, 2)
	if sum.Passed != 3 || sum.Failed != 2 || sum.Skipped != 1 || sum.Unfinished != 1 || sum.FailedPackages != 2 || sum.OK() {
		t.Errorf("summary %+v: want 3 passed, 2 failed, 1 skipped, 1 unfinished, 2 failed packages", sum)
	}
	for _, want := range []string{
		"PASS m/a TestSlow (12.5s)\n",
		"ok   m/a (13.0s)\n",
		"FAIL m/b TestBroken/case (0.3s)\n        b_test.go:9: got 1, want 2\n",
		"UNFINISHED m/b TestHangs (its test binary ended: a timeout or a panic)\n    === RUN   TestHangs\n",
		"FAIL m/b [1 tests unfinished] (480.1s)\n    panic: test timed out after 8m0s\n",
		"c/c.go:3:1: syntax error\n",
		"FAIL m/c [build failed]",
		"go: some message on stderr\n",
	} {
		if !strings.Contains(live.String(), want) {
			t.Errorf("progress lacks %q:\n%s", want, live.String())
		}
	}
	if strings.Contains(live.String(), "TestFast/sub") {
		t.Errorf("progress lists a passing subtest:\n%s", live.String())
	}
	wantReport := `
slowest 2 tests:
     12.5s  pass m/a TestSlow
      0.4s  fail m/b TestBroken

packages by elapsed time:
    480.1s  fail m/b
     13.0s  pass m/a
      0.0s  fail m/c

2 packages failed, 1 tests unfinished

tests: 3 passed, 3 failed, 1 skipped
`
	if report.String() != wantReport {
		t.Errorf("report:\n%s\nwant:\n%s", report.String(), wantReport)
	}
}

func TestAllPassIsOK(t *testing.T) {
	sum, err := Read(strings.NewReader(`{"Action":"run","Package":"m/a","Test":"TestA"}
{"Action":"pass","Package":"m/a","Test":"TestA","Elapsed":1}
{"Action":"pass","Package":"m/a","Elapsed":1.5}
`), &strings.Builder{})
	if err != nil || !sum.OK() || sum.Passed != 1 {
		t.Fatalf("summary %+v, %v", sum, err)
	}
}

// TestCutStream: a stream that ends while a test runs (the pipe closed)
// leaves that test unfinished, not passed.
func TestCutStream(t *testing.T) {
	var live strings.Builder
	sum, err := Read(strings.NewReader(`{"Action":"run","Package":"m/a","Test":"TestA"}
{"Action":"output","Package":"m/a","Test":"TestA","Output":"=== RUN   TestA\n"}
`), &live)
	if err != nil || sum.OK() || sum.Unfinished != 1 {
		t.Fatalf("summary %+v, %v", sum, err)
	}
}
