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

	mu     sync.Mutex // guards files and closed
	files  map[string]*file
	closed bool

	prog progress
}

// file is one table's file. Writers of all runs share it; mu keeps each
// writer's lines for the file contiguous.
type file struct {
	mu   sync.Mutex
	f    *os.File
	size int64 // bytes of whole lines in the file; guarded by mu
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
	s := &Sink{dir: dir, fsync: !opts.NoFsync, log: log, files: map[string]*file{}}
	dirsMu.Lock()
	defer dirsMu.Unlock()
	if owner, busy := dirsInUse[dir]; busy {
		return nil, fmt.Errorf("jsonl: directory %s is already used by pipeline %q", dir, owner)
	}
	if err := s.prog.load(dir); err != nil {
		return nil, fmt.Errorf("jsonl: %w", err)
	}
	dirsInUse[dir] = pipeline
	log.Debug("jsonl sink opened", "dir", dir, "fsync", s.fsync)
	return s, nil
}

// Dir returns the absolute directory the sink writes to.
func (s *Sink) Dir() string { return s.dir }

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
		err = syncDir(s.dir)
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
	f.mu.Lock()
	defer f.mu.Unlock()
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

// Commit records b.Progress in _progress.json; see sinks.Sink.
func (s *Sink) Commit(_ context.Context, b sinks.Batch) error {
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	if closed {
		return errClosed
	}
	if err := s.prog.commit(s.dir, b.Progress, s.fsync); err != nil {
		return fmt.Errorf("jsonl: commit: %w", err)
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
	s.mu.Unlock()

	var errs []error
	for _, name := range slices.Sorted(maps.Keys(files)) {
		f := files[name]
		f.mu.Lock()
		if err := f.f.Close(); err != nil {
			errs = append(errs, err)
		}
		f.mu.Unlock()
	}
	dirsMu.Lock()
	delete(dirsInUse, s.dir)
	dirsMu.Unlock()
	return errors.Join(errs...)
}

// syncDir makes the directory entries of dir (new files, renames) durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}
