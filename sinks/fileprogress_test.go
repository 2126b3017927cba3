package sinks_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/syncpipe/syncpipe/sinks"
)

var bg = context.Background()

// progressChildEnv makes the test binary a process that commits progress
// to the file it names until it is killed (see TestMain).
const progressChildEnv = "SYNCPIPE_TEST_PROGRESS_CHILD"

// childStream and childRange are the positions the child commits in round
// i: each field derived from i, so that a reader can tell a position that
// was committed whole from a torn or mixed one.
func childStream(i int) sinks.Position {
	return sinks.Position{LSN: uint64(i) << 8, TxnLSN: uint64(i)<<8 + 5, TxnChanges: int64(i)}
}

func childRange(i int) sinks.Position {
	return sinks.Position{Table: "public.todos", Range: i % 3, LastKey: []string{strconv.Itoa(i), "k"}, RowsDone: int64(i), Done: i%7 == 0}
}

// commitUntilKilled commits a range and then the stream position of each
// round and reports the round on stdout once both commits returned.
func commitUntilKilled(path string) {
	p, err := sinks.OpenFileProgress(path)
	if err != nil {
		fmt.Println("error:", err)
		os.Exit(1)
	}
	for i := 1; ; i++ {
		if err := p.Commit(bg, sinks.Batch{Progress: childRange(i)}); err != nil {
			fmt.Println("error:", err)
			os.Exit(1)
		}
		if err := p.Commit(bg, sinks.Batch{Progress: childStream(i)}); err != nil {
			fmt.Println("error:", err)
			os.Exit(1)
		}
		fmt.Println("committed", i)
	}
}

func openProgress(t *testing.T, path string) *sinks.FileProgress {
	t.Helper()
	p, err := sinks.OpenFileProgress(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close(bg) })
	return p
}

func resume(t *testing.T, p *sinks.FileProgress, table string, rangeNo int) (sinks.Position, bool) {
	t.Helper()
	pos, ok, err := p.Resume(context.Background(), table, rangeNo)
	if err != nil {
		t.Fatal(err)
	}
	return pos, ok
}

// TestFileProgressSurvivesKill SIGKILLs a process while it commits as
// fast as it can, then reopens the file: the positions are those of the
// last commit reported or a later one, whole (every field of one round),
// and no temporary file is left.
func TestFileProgressSurvivesKill(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state", "progress.json")
	for kill := range 3 {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), progressChildEnv+"="+path)
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		// Kill after some rounds of this child, at no particular point of a
		// commit; the rounds restart at 1, so the file's rounds are checked
		// against this child's reports only.
		sc := bufio.NewScanner(out)
		reported := 0
		for sc.Scan() && reported < 20+kill*15 {
			line := sc.Text()
			n, err := strconv.Atoi(strings.TrimPrefix(line, "committed "))
			if err != nil {
				_ = cmd.Process.Kill()
				t.Fatalf("child: %s", line)
			}
			reported = n
		}
		if err := cmd.Process.Kill(); err != nil {
			t.Fatal(err)
		}
		_ = cmd.Wait()

		p := openProgress(t, path)
		st, ok := resume(t, p, "", 0)
		round := int(st.LSN >> 8)
		if !ok || round < reported || !reflect.DeepEqual(st, childStream(round)) {
			t.Fatalf("kill %d: stream %+v (ok %v) after round %d was reported; want round %d or later, whole", kill, st, ok, reported, reported)
		}
		// Round r commits its range before its stream position, so each
		// range holds its last round up to r, or r+1's.
		for r := range 3 {
			pos, ok := resume(t, p, "public.todos", r)
			i := int(pos.RowsDone)
			want := childRange(i)
			if !ok || i%3 != r || i > round+1 || i+3 <= round || pos.Done != want.Done || strings.Join(pos.LastKey, ",") != strings.Join(want.LastKey, ",") {
				t.Fatalf("kill %d: range %d is %+v (ok %v) with the stream at round %d", kill, r, pos, ok, round)
			}
		}
		if err := p.Close(bg); err != nil {
			t.Fatal(err)
		}
		if tmps, _ := filepath.Glob(path + ".*"); len(tmps) > 0 {
			t.Fatalf("kill %d: temporary files left after open: %v", kill, tmps)
		}
	}
}

// TestFileProgressConcurrentCommits commits the ranges of several tables
// and the stream from goroutines at once (as runs of one pipeline do):
// every last position is kept, in memory and in the file.
func TestFileProgressConcurrentCommits(t *testing.T) {
	path := filepath.Join(t.TempDir(), "progress.json")
	p := openProgress(t, path)
	const runs, commits = 6, 20
	var wg sync.WaitGroup
	errs := make(chan error, runs+1)
	for r := range runs {
		wg.Go(func() {
			for i := 1; i <= commits; i++ {
				key := []string{fmt.Sprint(r), fmt.Sprint(i)}
				if err := p.Commit(bg, sinks.Batch{Progress: sinks.Position{Table: fmt.Sprintf("public.t%d", r%2), Range: r, LastKey: key, RowsDone: int64(i), Done: i == commits}}); err != nil {
					errs <- err
					return
				}
				key[1] = "reused by the source" // Commit must have copied it
			}
		})
	}
	wg.Go(func() {
		for i := 1; i <= commits; i++ {
			if err := p.Commit(bg, sinks.Batch{Progress: sinks.Position{LSN: uint64(i)}}); err != nil {
				errs <- err
				return
			}
		}
	})
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	check := func(p *sinks.FileProgress, when string) {
		for r := range runs {
			pos, ok := resume(t, p, fmt.Sprintf("public.t%d", r%2), r)
			if !ok || pos.RowsDone != commits || !pos.Done || pos.LastKey[0] != fmt.Sprint(r) || pos.LastKey[1] != fmt.Sprint(commits) {
				t.Errorf("%s: run %d resumes at %+v (ok %v); want its last commit", when, r, pos, ok)
			}
		}
		if st, ok := resume(t, p, "", 0); !ok || st.LSN != commits {
			t.Errorf("%s: stream resumes at %+v (ok %v); want LSN %d", when, st, ok, commits)
		}
	}
	check(p, "in memory")
	if err := p.Close(bg); err != nil {
		t.Fatal(err)
	}
	check(openProgress(t, path), "after reopening")
}

// TestFileProgressPositions checks that every field of a stream position
// inside a large transaction and of snapshot positions survives a
// reopen, that Resume hands out copies, that unknown ranges and a fresh
// file resume nowhere, and that Reset forgets everything for good.
func TestFileProgressPositions(t *testing.T) {
	path := filepath.Join(t.TempDir(), "progress.json")
	p := openProgress(t, path)
	if _, ok := resume(t, p, "", 0); ok {
		t.Fatal("a new file resumes the stream")
	}
	stream := sinks.Position{LSN: 0x16B3748, TxnLSN: 0x16B9000, TxnChanges: 12345}
	snap := sinks.Position{Table: "public.lists", Range: 2, LastKey: []string{"a", "b"}, RowsDone: 99, Done: true}
	for _, pos := range []sinks.Position{stream, snap, {Table: "public.lists", Range: 0, LastKey: []string{"x"}, RowsDone: 1}} {
		if err := p.Commit(bg, sinks.Batch{Progress: pos}); err != nil {
			t.Fatal(err)
		}
	}
	got, _ := resume(t, p, "public.lists", 2)
	got.LastKey[0] = "changed by the caller"
	if err := p.Close(bg); err != nil {
		t.Fatal(err)
	}

	p = openProgress(t, path)
	if st, ok := resume(t, p, "", 0); !ok || !reflect.DeepEqual(st, stream) {
		t.Errorf("stream resumes at %+v (ok %v), want %+v", st, ok, stream)
	}
	if pos, ok := resume(t, p, "public.lists", 2); !ok || pos.Table != snap.Table || pos.Range != 2 || pos.RowsDone != 99 || !pos.Done ||
		strings.Join(pos.LastKey, ",") != "a,b" {
		t.Errorf("range resumes at %+v (ok %v), want %+v", pos, ok, snap)
	}
	if _, ok := resume(t, p, "public.lists", 1); ok {
		t.Error("a range never committed resumes")
	}
	if err := p.Reset(); err != nil {
		t.Fatal(err)
	}
	if err := p.Close(bg); err != nil {
		t.Fatal(err)
	}
	p = openProgress(t, path)
	if _, ok := resume(t, p, "", 0); ok {
		t.Error("the stream resumes after Reset")
	}
	if _, ok := resume(t, p, "public.lists", 2); ok {
		t.Error("a range resumes after Reset")
	}
}

// TestFileProgressFailedCommitKeepsPrevious makes the file's directory
// disappear: Commit fails and Resume still returns the last commit that
// succeeded, as the pipeline sends the batch again.
func TestFileProgressFailedCommitKeepsPrevious(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	p := openProgress(t, filepath.Join(dir, "progress.json"))
	if err := p.Commit(bg, sinks.Batch{Progress: sinks.Position{LSN: 10}}); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	if err := p.Commit(bg, sinks.Batch{Progress: sinks.Position{LSN: 20}}); err == nil {
		t.Fatal("commit into a removed directory succeeded")
	}
	if st, ok := resume(t, p, "", 0); !ok || st.LSN != 10 {
		t.Fatalf("stream resumes at %+v (ok %v) after a failed commit, want LSN 10", st, ok)
	}
}

// TestFileProgressOneOwner refuses a second open of a file in use, and
// allows it once the first is closed; a closed one no longer commits.
func TestFileProgressOneOwner(t *testing.T) {
	path := filepath.Join(t.TempDir(), "progress.json")
	p := openProgress(t, path)
	if _, err := sinks.OpenFileProgress(path); !errors.Is(err, sinks.ErrProgressInUse) {
		t.Fatalf("second open: %v, want ErrProgressInUse", err)
	}
	if err := p.Close(bg); err != nil {
		t.Fatal(err)
	}
	if err := p.Commit(bg, sinks.Batch{Progress: sinks.Position{LSN: 1}}); err == nil {
		t.Fatal("a closed FileProgress committed")
	}
	openProgress(t, path)
}

// TestFileProgressRejectsOtherFormats refuses a file it cannot read
// rather than starting from nothing, which would re-send everything.
func TestFileProgressRejectsOtherFormats(t *testing.T) {
	for name, content := range map[string]string{"torn": `{"version":1,"ranges":[`, "future": `{"version":9,"ranges":[]}`} {
		path := filepath.Join(t.TempDir(), name+".json")
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		if p, err := sinks.OpenFileProgress(path); err == nil {
			_ = p.Close(bg)
			t.Errorf("%s file opened", name)
		}
	}
}

// embeddingSink is a sink made as the FileProgress doc shows: a writer
// and an embedded FileProgress for the rest of the Sink interface.
type embeddingSink struct{ *sinks.FileProgress }

func (embeddingSink) Writer(context.Context, int) (sinks.Writer, error) { return nil, nil }

// TestFileProgressEmbeddedIsNoResetter: embedding makes a Sink, but not a
// Resetter — forgetting progress alone would snapshot over old data.
func TestFileProgressEmbeddedIsNoResetter(t *testing.T) {
	var s sinks.Sink = embeddingSink{openProgress(t, filepath.Join(t.TempDir(), "p.json"))}
	if _, ok := s.(sinks.Resetter); ok {
		t.Fatal("a sink embedding FileProgress is a Resetter")
	}
}
