package jsonl

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"sync"

	"github.com/syncpipe/syncpipe/internal/atomicfile"
	"github.com/syncpipe/syncpipe/sinks"
)

// ProgressFile is the name of the committed-progress file in the sink's
// directory.
const ProgressFile = "_progress.json"

// progressVersion is written into the file so that a later format change
// can tell old files apart instead of misreading them. Version 2 added the
// committed file sizes; a version 1 file is still read (sizes unknown).
const progressVersion = 2

// progress is the committed state: the latest position of every snapshot
// range and of the stream, and the table files' sizes. The file is
// rewritten whole on every commit; it holds one entry per range, so it
// stays small.
type progress struct {
	mu  sync.Mutex // serialises commits of concurrent runs, and guards the fields
	pos sinks.Positions
	// files are the table files' sizes at the last commit: every line
	// before them belongs to a committed batch, none after. sized is false
	// for a file written by version 1, which kept no sizes.
	files map[string]int64
	sized bool
}

// progressJSON is the file format: sinks.FileProgress's, with the sizes.
type progressJSON struct {
	Version int `json:"version"`
	sinks.PositionRecords
	Files map[string]int64 `json:"files"`
}

// load reads the progress committed in dir by an earlier sink; a missing
// file means nothing was committed yet.
func (p *progress) load(dir string) error {
	p.pos = sinks.Positions{}
	p.files = map[string]int64{}
	data, err := os.ReadFile(filepath.Join(dir, ProgressFile))
	if errors.Is(err, fs.ErrNotExist) {
		p.sized = true // nothing committed: no line is
		return nil
	}
	if err != nil {
		return err
	}
	var f progressJSON
	if err := json.Unmarshal(data, &f); err != nil {
		return fmt.Errorf("read %s: %w", ProgressFile, err)
	}
	if f.Version != progressVersion && f.Version != 1 {
		return fmt.Errorf("read %s: unsupported version %d (want %d)", ProgressFile, f.Version, progressVersion)
	}
	p.sized = f.Version >= 2
	maps.Copy(p.files, f.Files)
	if p.pos, err = f.Positions(); err != nil {
		return fmt.Errorf("read %s: %w", ProgressFile, err)
	}
	return nil
}

// get returns a copy of a committed position; the caller may keep and
// change it.
func (p *progress) get(table string, rangeNo int) (sinks.Position, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.pos.Get(table, rangeNo)
}

// reset forgets everything committed; the caller holds mu.
func (p *progress) reset() {
	p.pos, p.files, p.sized = sinks.Positions{}, map[string]int64{}, true
}

// commit makes pos the committed position of its range (or of the stream)
// and rewrites the file atomically. Before that, under the same lock,
// write appends the batch's lines and updates the file sizes it is given.
// The in-memory state changes only when the file was replaced, so Resume
// never returns a position that a crash could take back.
//
// When anything fails, undo gets the sizes of before the batch: its lines
// must go, because the source sends the batch again.
func (p *progress) commit(dir string, pos sinks.Position, fsync bool, write func(sizes map[string]int64) error, undo func(prev map[string]int64)) (err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	prev := maps.Clone(p.files)
	defer func() {
		if err != nil {
			undo(prev)
			p.files = prev
		}
	}()
	if err := write(p.files); err != nil {
		return err
	}
	p.sized = true
	next := p.pos.With(pos)
	data, err := json.MarshalIndent(progressJSON{Version: progressVersion, PositionRecords: next.Records(), Files: p.files}, "", "  ")
	if err != nil {
		return err
	}
	if err := atomicfile.Write(filepath.Join(dir, ProgressFile), append(data, '\n'), fsync); err != nil {
		return err
	}
	p.pos = next
	return nil
}
