package sinks

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
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
	stream *Position
	ranges map[progressKey]Position
	closed bool
}

// progressKey identifies a snapshot range.
type progressKey struct {
	table   string
	rangeNo int
}

// fileProgressVersion is written into the file so that a later format
// change can tell old files apart instead of misreading them.
const fileProgressVersion = 1

// fileProgressJSON is the file's format, kept apart from Position so that
// the file's field names stay stable if the Go type changes. The names are
// those of the jsonl sink's progress file.
type fileProgressJSON struct {
	Version int              `json:"version"`
	Stream  *positionRecord  `json:"stream,omitempty"`
	Ranges  []positionRecord `json:"ranges"`
}

// positionRecord is one Position in the file.
type positionRecord struct {
	Table      string   `json:"table,omitempty"`
	Range      int      `json:"range"`
	LastKey    []string `json:"last_key"`
	RowsDone   int64    `json:"rows_done"`
	Done       bool     `json:"done"`
	LSN        uint64   `json:"lsn"`
	TxnLSN     uint64   `json:"txn_lsn,omitempty"`
	TxnChanges int64    `json:"txn_changes,omitempty"`
}

func recordOf(p Position) positionRecord {
	return positionRecord{Table: p.Table, Range: p.Range, LastKey: p.LastKey, RowsDone: p.RowsDone, Done: p.Done,
		LSN: p.LSN, TxnLSN: p.TxnLSN, TxnChanges: p.TxnChanges}
}

func (r positionRecord) position() Position {
	return Position{Table: r.Table, Range: r.Range, LastKey: r.LastKey, RowsDone: r.RowsDone, Done: r.Done,
		LSN: r.LSN, TxnLSN: r.TxnLSN, TxnChanges: r.TxnChanges}
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
	p := &FileProgress{path: abs, ranges: map[progressKey]Position{}}
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
	if f.Stream != nil {
		pos := f.Stream.position()
		p.stream = &pos
	}
	for _, r := range f.Ranges {
		if r.Table == "" {
			return fmt.Errorf("range %d without a table", r.Range)
		}
		p.ranges[progressKey{r.Table, r.Range}] = r.position()
	}
	return nil
}

// Path returns the absolute path of the progress file.
func (p *FileProgress) Path() string { return p.path }

// Commit makes b.Progress the committed position of its snapshot range
// (or, for a stream position, of the stream) and replaces the file; once it
// returns nil, Resume returns that position, also after a crash and a new
// OpenFileProgress. b.Items are not looked at: as Sink.Commit, it is called
// once the batch was delivered (Write returned nil for it). When it fails,
// the committed positions are those of before, and the pipeline sends the
// batch again.
func (p *FileProgress) Commit(_ context.Context, b Batch) error {
	pos := b.Progress
	pos.LastKey = slices.Clone(pos.LastKey) // the source may reuse its slice
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return errProgressClosed
	}
	stream, ranges := p.stream, p.ranges
	if pos.IsStream() {
		stream = &pos
	} else {
		ranges = maps.Clone(ranges)
		ranges[progressKey{pos.Table, pos.Range}] = pos
	}
	if err := p.write(stream, ranges); err != nil {
		return fmt.Errorf("commit progress to %s: %w", p.path, err)
	}
	// Memory changes only once the file did, so Resume never returns a
	// position that a crash could take back.
	p.stream, p.ranges = stream, ranges
	return nil
}

// write replaces the file with the given positions, ranges sorted so that
// the file reads well and compares between commits.
func (p *FileProgress) write(stream *Position, ranges map[progressKey]Position) error {
	f := fileProgressJSON{Version: fileProgressVersion, Ranges: make([]positionRecord, 0, len(ranges))}
	if stream != nil {
		r := recordOf(*stream)
		f.Stream = &r
	}
	for _, pos := range ranges {
		f.Ranges = append(f.Ranges, recordOf(pos))
	}
	slices.SortFunc(f.Ranges, func(a, b positionRecord) int {
		return cmp.Or(cmp.Compare(a.Table, b.Table), cmp.Compare(a.Range, b.Range))
	})
	data, err := json.MarshalIndent(f, "", "  ")
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
	if table == "" {
		if p.stream == nil {
			return Position{}, false, nil
		}
		pos = *p.stream
	} else if pos, ok = p.ranges[progressKey{table, rangeNo}]; !ok {
		return Position{}, false, nil
	}
	pos.LastKey = slices.Clone(pos.LastKey)
	return pos, true, nil
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
	empty := map[progressKey]Position{}
	if err := p.write(nil, empty); err != nil {
		return fmt.Errorf("reset progress in %s: %w", p.path, err)
	}
	p.stream, p.ranges = nil, empty
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
