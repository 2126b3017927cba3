package jsonl

import (
	"cmp"
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
// range and of the stream. The file is rewritten whole on every commit; it
// holds one entry per range, so it stays small.
type progress struct {
	mu     sync.Mutex // serialises commits of concurrent runs, and guards the fields
	stream *sinks.Position
	ranges map[rangeKey]sinks.Position
	// files are the table files' sizes at the last commit: every line
	// before them belongs to a committed batch, none after. sized is false
	// for a file written by version 1, which kept no sizes.
	files map[string]int64
	sized bool
}

type rangeKey struct {
	table   string
	rangeNo int
}

// progressJSON is the file format, kept apart from sinks.Position so that
// the file's field names stay stable if the Go type changes.
type progressJSON struct {
	Version int              `json:"version"`
	Stream  *positionJSON    `json:"stream,omitempty"`
	Ranges  []positionJSON   `json:"ranges"`
	Files   map[string]int64 `json:"files"`
}

type positionJSON struct {
	Table    string   `json:"table,omitempty"`
	Range    int      `json:"range"`
	LastKey  []string `json:"last_key"`
	RowsDone int64    `json:"rows_done"`
	Done     bool     `json:"done"`
	LSN      uint64   `json:"lsn"`
	TxnLSN   uint64   `json:"txn_lsn,omitempty"`
	TxnDone  int64    `json:"txn_changes,omitempty"`
}

func toJSON(p sinks.Position) positionJSON {
	return positionJSON{Table: p.Table, Range: p.Range, LastKey: p.LastKey, RowsDone: p.RowsDone, Done: p.Done, LSN: p.LSN,
		TxnLSN: p.TxnLSN, TxnDone: p.TxnChanges}
}

func (j positionJSON) position() sinks.Position {
	return sinks.Position{Table: j.Table, Range: j.Range, LastKey: j.LastKey, RowsDone: j.RowsDone, Done: j.Done, LSN: j.LSN,
		TxnLSN: j.TxnLSN, TxnChanges: j.TxnDone}
}

// load reads the progress committed in dir by an earlier sink; a missing
// file means nothing was committed yet.
func (p *progress) load(dir string) error {
	p.ranges = map[rangeKey]sinks.Position{}
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
	for name, size := range f.Files {
		p.files[name] = size
	}
	if f.Stream != nil {
		pos := f.Stream.position()
		p.stream = &pos
	}
	for _, r := range f.Ranges {
		if r.Table == "" {
			return fmt.Errorf("read %s: range %d without a table", ProgressFile, r.Range)
		}
		p.ranges[rangeKey{r.Table, r.Range}] = r.position()
	}
	return nil
}

// get returns a copy of a committed position; the caller may keep and
// change it.
func (p *progress) get(table string, rangeNo int) (sinks.Position, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	var pos sinks.Position
	if table == "" {
		if p.stream == nil {
			return pos, false
		}
		pos = *p.stream
	} else {
		var ok bool
		if pos, ok = p.ranges[rangeKey{table, rangeNo}]; !ok {
			return pos, false
		}
	}
	pos.LastKey = slices.Clone(pos.LastKey)
	return pos, true
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
	pos.LastKey = slices.Clone(pos.LastKey) // the source may reuse its slice
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
	f := progressJSON{Version: progressVersion, Ranges: make([]positionJSON, 0, len(p.ranges)+1), Files: p.files}
	k := rangeKey{pos.Table, pos.Range}
	if pos.IsStream() {
		j := toJSON(pos)
		f.Stream = &j
	} else if p.stream != nil {
		j := toJSON(*p.stream)
		f.Stream = &j
	}
	for rk, r := range p.ranges {
		if rk != k {
			f.Ranges = append(f.Ranges, toJSON(r))
		}
	}
	if !pos.IsStream() {
		f.Ranges = append(f.Ranges, toJSON(pos))
	}
	slices.SortFunc(f.Ranges, func(a, b positionJSON) int {
		return cmp.Or(cmp.Compare(a.Table, b.Table), cmp.Compare(a.Range, b.Range))
	})
	data, err := json.MarshalIndent(f, "", "  ")
	if err != nil {
		return err
	}
	if err := atomicfile.Write(filepath.Join(dir, ProgressFile), append(data, '\n'), fsync); err != nil {
		return err
	}
	if pos.IsStream() {
		p.stream = &pos
	} else {
		p.ranges[k] = pos
	}
	return nil
}
