package jsonl

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/syncpipe/syncpipe/internal/atomicfile"
	"github.com/syncpipe/syncpipe/internal/freelist"
	"github.com/syncpipe/syncpipe/sinks"
)

// TypeName is the sink type under which the package registers itself.
const TypeName = "jsonl"

func init() { sinks.MustRegister(TypeName, Spec, open) }

// Spec declares the jsonl sink's settings.
var Spec = sinks.Spec{
	Summary: "one JSON-lines file per table, with the evaluated buckets, ops and lookups of every change (see sinks/jsonl).",
	Fields: []sinks.Field{
		{Name: "dir", Type: sinks.FieldString, Required: true, Doc: "Directory of the files and of _progress.json; created if missing. One pipeline per directory."},
		{Name: "fsync", Type: sinks.FieldBool, Default: true, Doc: "fsync every write and commit; false trades crash safety for speed."},
	},
}

// Options configures a Sink built from Go rather than from YAML settings.
type Options struct {
	// Dir receives the files; it is created if missing. Required.
	Dir string
	// NoFsync skips every fsync: writes and commits become much cheaper but
	// a machine crash can lose or tear lines and roll progress back. The
	// zero value is the safe choice.
	NoFsync bool
	// Logger receives the sink's log lines; nil discards them.
	Logger *slog.Logger
}

// Sink writes changes as JSON lines, one file per table, and keeps the
// committed progress in <dir>/_progress.json. It implements sinks.Sink and
// is safe for concurrent use by any number of writers and runs.
type Sink struct {
	dir   string
	fsync bool
	log   *slog.Logger

	mu     sync.Mutex // guards files, staged and closed
	files  map[string]*file
	staged map[stageKey][]chunk // by the batch's position
	closed bool
	free   freelist.List[[]chunk] // committed chunks, for their buffers

	prog progress
}

// file is one table's file. Only Commit appends to it, under the progress
// lock, so its lines are in commit order and never interleaved.
type file struct {
	f    *os.File
	size int64 // bytes of whole lines in the file
}

// chunk is the encoded lines a batch adds to one file.
type chunk struct {
	file  string
	lines []byte
}

// dirsInUse maps the absolute directories of open sinks to their pipeline,
// so that two pipelines configured with the same dir fail at Open instead
// of overwriting each other's progress.
var (
	dirsMu    sync.Mutex
	dirsInUse = map[string]string{}
)

// open is the sinks.Factory registered as "jsonl".
func open(_ context.Context, settings *sinks.Settings, env sinks.Env) (sinks.Sink, error) {
	dir := settings.String("dir")
	if dir == "" {
		return nil, errors.New("settings.dir: must not be empty")
	}
	return newSink(Options{Dir: dir, NoFsync: !settings.Bool("fsync"), Logger: env.Logger}, env.Pipeline)
}

// New opens a sink writing to opts.Dir, creating the directory if needed
// and loading the progress committed there before.
func New(opts Options) (*Sink, error) { return newSink(opts, "") }

func newSink(opts Options, pipeline string) (*Sink, error) {
	if opts.Dir == "" {
		return nil, errors.New("jsonl: no directory")
	}
	dir, err := filepath.Abs(opts.Dir)
	if err != nil {
		return nil, fmt.Errorf("jsonl: %w", err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("jsonl: create directory: %w", err)
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Sink{dir: dir, fsync: !opts.NoFsync, log: log, files: map[string]*file{}, staged: map[stageKey][]chunk{}}
	dirsMu.Lock()
	defer dirsMu.Unlock()
	if owner, busy := dirsInUse[dir]; busy {
		return nil, fmt.Errorf("jsonl: directory %s is already used by pipeline %q", dir, owner)
	}
	if err := s.prog.load(dir); err != nil {
		return nil, fmt.Errorf("jsonl: %w", err)
	}
	if err := s.cutBack(); err != nil {
		return nil, fmt.Errorf("jsonl: %w", err)
	}
	dirsInUse[dir] = pipeline
	log.Debug("jsonl sink opened", "dir", dir, "fsync", s.fsync)
	return s, nil
}

// Writer returns a new writer. Writers hold only reusable line buffers; the
// files belong to the sink, so writers need no closing.
func (s *Sink) Writer(_ context.Context, _ int) (sinks.Writer, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, errClosed
	}
	return &writer{s: s, tables: map[tableKey]*tableBuf{}}, nil
}

// stage keeps a written batch's lines until its Commit. A batch of a run
// that fails is staged again when the source re-sends it after the same
// position, replacing the first copy.
func (s *Sink) stage(pos sinks.Position, chunks []chunk) error {
	k := keyOf(pos)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return errClosed
	}
	if old, ok := s.staged[k]; ok {
		s.recycle(old)
	}
	s.staged[k] = chunks
	return nil
}

// unstage takes the staged lines of the batch ending at pos.
func (s *Sink) unstage(pos sinks.Position) []chunk {
	k := keyOf(pos)
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.staged[k]
	delete(s.staged, k)
	return c
}

// take returns an empty chunk list, with the buffers of a committed one
// when there is one: in steady state writers allocate nothing.
func (s *Sink) take() []chunk {
	c, _ := s.free.Get()
	return c
}

// recycle hands a chunk list's buffers back for take.
func (s *Sink) recycle(c []chunk) {
	if cap(c) > 0 {
		s.free.Put(c[:0])
	}
}

// stageKey identifies a batch by its position: positions of batches that
// carry changes are unique within a pipeline (a snapshot range's row count
// and a stream's LSN and transaction offset only grow).
type stageKey struct {
	table       string
	rangeNo     int
	rows        int64
	lsn, txnLSN uint64
	txnChanges  int64
}

func keyOf(p sinks.Position) stageKey {
	return stageKey{p.Table, p.Range, p.RowsDone, p.LSN, p.TxnLSN, p.TxnChanges}
}

// cutBack cuts every file back to the size the last commit recorded:
// lines after it belong to batches that were never committed, which the
// source sends again. A file the progress does not know was never part of
// a commit and is emptied.
func (s *Sink) cutBack() error {
	entries, err := os.ReadDir(s.dir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if e.IsDir() || filepath.Ext(e.Name()) != ".jsonl" {
			continue
		}
		info, err := e.Info()
		if err != nil {
			return err
		}
		want, known := s.prog.files[e.Name()]
		if !s.prog.sized {
			continue // written by a version that recorded no sizes
		}
		switch {
		case info.Size() > want:
			s.log.Info("jsonl: dropping lines written after the last commit", "file", e.Name(), "bytes", info.Size()-want)
			if err := os.Truncate(filepath.Join(s.dir, e.Name()), want); err != nil {
				return err
			}
		case info.Size() < want && known:
			return fmt.Errorf("%s holds %d bytes but %d were committed: lines were lost (fsync off and a machine crash?)", e.Name(), info.Size(), want)
		}
	}
	return nil
}

var errClosed = errors.New("jsonl: sink is closed")

// file returns the open file called name in the sink's directory, opening
// (and, for a new file, making its directory entry durable) on first use.
func (s *Sink) file(name string) (*file, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, errClosed
	}
	if f := s.files[name]; f != nil {
		return f, nil
	}
	path := filepath.Join(s.dir, name)
	const flags = os.O_WRONLY | os.O_APPEND | os.O_CREATE
	created := true
	f, err := os.OpenFile(path, flags|os.O_EXCL, 0o644)
	if errors.Is(err, os.ErrExist) {
		created = false
		f, err = os.OpenFile(path, flags, 0o644)
	}
	if err != nil {
		return nil, err
	}
	st, err := f.Stat()
	if err == nil && created && s.fsync {
		err = atomicfile.SyncDir(s.dir)
	}
	if err != nil {
		_ = f.Close()
		if created { // let the next attempt create it again and sync the directory
			_ = os.Remove(path)
		}
		return nil, err
	}
	fh := &file{f: f, size: st.Size()}
	s.files[name] = fh
	return fh, nil
}

// write appends whole lines. After a failed or short write it cuts the file
// back to its last whole line, so that a later append does not continue a
// torn one.
func (f *file) write(p []byte) error {
	n, err := f.f.Write(p)
	if err != nil {
		if terr := f.f.Truncate(f.size); terr != nil {
			return errors.Join(err, fmt.Errorf("cut back torn line: %w", terr))
		}
		return err
	}
	f.size += int64(n)
	return nil
}

// Commit appends the batch's staged lines to their files, makes them
// durable, and records b.Progress with the new file sizes in
// _progress.json in one atomic replace; see sinks.Sink. A crash before
// the replace leaves lines past the recorded sizes, which the next Open
// cuts off: the batch is then written again, once.
func (s *Sink) Commit(_ context.Context, b sinks.Batch) error {
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	if closed {
		return errClosed
	}
	chunks := s.unstage(b.Progress)
	err := s.prog.commit(s.dir, b.Progress, s.fsync, func(sizes map[string]int64) error {
		return s.appendChunks(chunks, sizes)
	}, s.cutTo)
	s.recycle(chunks)
	if err != nil {
		return fmt.Errorf("jsonl: commit: %w", err)
	}
	return nil
}

// cutTo cuts the open files back to the sizes of prev (0 for a file prev
// does not know), after a failed commit.
func (s *Sink) cutTo(prev map[string]int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for name, f := range s.files {
		if f.size == prev[name] {
			continue
		}
		if err := f.f.Truncate(prev[name]); err != nil {
			s.log.Error("jsonl: cannot cut back lines of a failed commit; restart to cut them at open", "file", name, "err", err)
			continue
		}
		f.size = prev[name]
	}
}

// appendChunks writes chunks to their files, fsyncs them and records the
// files' new sizes. It runs under the progress lock, so appends of
// concurrent runs never interleave.
func (s *Sink) appendChunks(chunks []chunk, sizes map[string]int64) error {
	var touched []*file
	for _, c := range chunks {
		f, err := s.file(c.file)
		if err == nil {
			err = f.write(c.lines)
		}
		if err != nil {
			return fmt.Errorf("write %s: %w", c.file, err)
		}
		sizes[c.file] = f.size
		touched = append(touched, f)
	}
	if !s.fsync {
		return nil
	}
	for i, f := range touched {
		if err := f.f.Sync(); err != nil {
			return fmt.Errorf("fsync %s: %w", chunks[i].file, err)
		}
	}
	return nil
}

// Resume returns the committed position of a snapshot range or, with table
// "", of the stream; see sinks.Sink.
func (s *Sink) Resume(_ context.Context, table string, rangeNo int) (sinks.Position, bool, error) {
	pos, ok := s.prog.get(table, rangeNo)
	return pos, ok, nil
}

// Close closes the table files and frees the directory for another sink.
// Writes still in flight fail; calling Close again does nothing.
func (s *Sink) Close(context.Context) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	files := s.files
	s.files = nil
	s.staged = nil
	s.mu.Unlock()

	var errs []error
	for _, name := range slices.Sorted(maps.Keys(files)) {
		if err := files[name].f.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	dirsMu.Lock()
	delete(dirsInUse, s.dir)
	dirsMu.Unlock()
	return errors.Join(errs...)
}

// Reset moves the table files and _progress.json of an earlier pipeline
// version into <dir>/superseded-<UTC time>/ (kept for the operator to
// inspect or delete) and starts with no progress; see sinks.Resetter.
func (s *Sink) Reset(context.Context) error {
	s.prog.mu.Lock()
	defer s.prog.mu.Unlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return errClosed
	}
	entries, err := os.ReadDir(s.dir)
	if err != nil {
		return fmt.Errorf("jsonl: reset: %w", err)
	}
	aside := filepath.Join(s.dir, "superseded-"+time.Now().UTC().Format("20060102T150405.000000000Z"))
	moved := 0
	for _, e := range entries {
		if e.IsDir() || filepath.Ext(e.Name()) != ".jsonl" && e.Name() != ProgressFile {
			continue
		}
		if err := os.MkdirAll(aside, 0o755); err != nil {
			return fmt.Errorf("jsonl: reset: %w", err)
		}
		if err := os.Rename(filepath.Join(s.dir, e.Name()), filepath.Join(aside, e.Name())); err != nil {
			return fmt.Errorf("jsonl: reset: %w", err)
		}
		moved++
	}
	for _, f := range s.files {
		_ = f.f.Close()
	}
	s.files, s.staged = map[string]*file{}, map[stageKey][]chunk{}
	s.prog.reset()
	if s.fsync {
		if err := atomicfile.SyncDir(s.dir); err != nil {
			return fmt.Errorf("jsonl: reset: %w", err)
		}
	}
	if moved > 0 {
		s.log.Info("jsonl: earlier version moved aside", "dir", aside, "files", moved)
	}
	return nil
}
