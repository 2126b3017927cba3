package sinks

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"

	"github.com/syncpipe/syncpipe/internal/atomicfile"
)

// FileProgress keeps a sink's committed progress — the last position of
// every snapshot range and of the stream — in one small JSON file, so that
// a sink whose data goes elsewhere (an HTTP endpoint, a queue) needs no
// progress code of its own. Its Commit, Resume and Close are those of the
// Sink interface, so a sink that embeds a *FileProgress has them:
//
//	type mySink struct {
//		*sinks.FileProgress
//		client *http.Client
//	}
//
//	func (s *mySink) Writer(context.Context, int) (sinks.Writer, error) { return s, nil }
//	func (s *mySink) Write(ctx context.Context, b sinks.Batch) error   { … deliver b.Items … }
//
// A sink whose Commit has work of its own (appending what Write staged)
// calls FileProgress.Commit at its end.
//
// Every Commit rewrites the whole file atomically (a temporary file,
// fsync, rename, fsync of the directory), so a crash leaves the positions
// of the last Commit that returned nil, or of a later one. It is safe for
// concurrent use: commits of different runs are serialised. The file
// belongs to one FileProgress: a second open of the same path in the
// process fails until the first is closed; separate processes must not
// share a file.
type FileProgress struct {
	path string

	mu     sync.Mutex // serialises commits, and guards the fields below
	pos    Positions
	closed bool
}

// fileProgressVersion is written into the file so that a later format
// change can tell old files apart instead of misreading them.
const fileProgressVersion = 1

// fileProgressJSON is the file's format; it is that of the jsonl sink's
// progress file without its file sizes.
type fileProgressJSON struct {
	Version int `json:"version"`
	PositionRecords
}

// fileProgressInUse holds the absolute paths of open FileProgress files, so
// that two pipelines configured with the same file fail at open instead of
// overwriting each other's positions.
var (
	fileProgressMu    sync.Mutex
	fileProgressInUse = map[string]bool{}
)

// ErrProgressInUse is matched (errors.Is) by OpenFileProgress's error when
// another FileProgress of this process has the file open.
var ErrProgressInUse = errors.New("progress file already in use")

// OpenFileProgress opens the progress file at path, loading the positions
// committed there before; a missing file (and a missing directory, which is
// created) means nothing was committed yet. Close releases the file.
func OpenFileProgress(path string) (*FileProgress, error) {
	if path == "" {
		return nil, errors.New("progress file: no path")
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("progress file: %w", err)
	}
	fileProgressMu.Lock()
	defer fileProgressMu.Unlock()
	if fileProgressInUse[abs] {
		return nil, fmt.Errorf("progress file %s: %w", abs, ErrProgressInUse)
	}
	if err := os.MkdirAll(filepath.Dir(abs), 0o755); err != nil {
		return nil, fmt.Errorf("progress file: %w", err)
	}
	// A crash during a commit leaves its temporary file; the committed file
	// is untouched, so the temporary is garbage.
	if err := atomicfile.RemoveTemps(abs); err != nil {
		return nil, fmt.Errorf("progress file: %w", err)
	}
	p := &FileProgress{path: abs}
	if err := p.load(); err != nil {
		return nil, fmt.Errorf("progress file %s: %w", abs, err)
	}
	fileProgressInUse[abs] = true
	return p, nil
}

// load reads the committed positions.
func (p *FileProgress) load() error {
	data, err := os.ReadFile(p.path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	var f fileProgressJSON
	if err := json.Unmarshal(data, &f); err != nil {
		return err
	}
	if f.Version != fileProgressVersion {
		return fmt.Errorf("unsupported version %d (want %d)", f.Version, fileProgressVersion)
	}
	p.pos, err = f.Positions()
	return err
}

// Commit makes b.Progress the committed position of its snapshot range
// (or, for a stream position, of the stream) and replaces the file; once it
// returns nil, Resume returns that position, also after a crash and a new
// OpenFileProgress. b.Items are not looked at: as Sink.Commit, it is called
// once the batch was delivered (Write returned nil for it). When it fails,
// the committed positions are those of before, and the pipeline sends the
// batch again.
func (p *FileProgress) Commit(_ context.Context, b Batch) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return errProgressClosed
	}
	next := p.pos.With(b.Progress)
	if err := p.write(next); err != nil {
		return fmt.Errorf("commit progress to %s: %w", p.path, err)
	}
	// Memory changes only once the file did, so Resume never returns a
	// position that a crash could take back.
	p.pos = next
	return nil
}

// write replaces the file with the given positions.
func (p *FileProgress) write(pos Positions) error {
	data, err := json.MarshalIndent(fileProgressJSON{Version: fileProgressVersion, PositionRecords: pos.Records()}, "", "  ")
	if err != nil {
		return err
	}
	return atomicfile.Write(p.path, append(data, '\n'), true)
}

// Resume returns the committed position of snapshot range rangeNo of table
// or, when table is "", of the stream; ok is false when none was
// committed. The position is a copy the caller may change. The error is
// always nil: positions are read at open.
func (p *FileProgress) Resume(_ context.Context, table string, rangeNo int) (pos Position, ok bool, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	pos, ok = p.pos.Get(table, rangeNo)
	return pos, ok, nil
}

// Reset forgets every committed position and replaces the file with an
// empty one, for the Reset of a sink that can also clear its data. It
// deliberately lacks the context of Resetter.Reset: embedding a
// FileProgress does not make a sink a Resetter, because forgetting
// progress alone would snapshot afresh over what the receiver still holds
// of the old pipeline version; without Reset, run asks the operator to
// clear the sink instead.
func (p *FileProgress) Reset() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return errProgressClosed
	}
	if err := p.write(Positions{}); err != nil {
		return fmt.Errorf("reset progress in %s: %w", p.path, err)
	}
	p.pos = Positions{}
	return nil
}

// Close releases the file for another OpenFileProgress; commits fail
// afterwards. Calling it again does nothing.
func (p *FileProgress) Close(context.Context) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil
	}
	p.closed = true
	fileProgressMu.Lock()
	delete(fileProgressInUse, p.path)
	fileProgressMu.Unlock()
	return nil
}

var errProgressClosed = errors.New("progress file is closed")
