package replication

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pglogrepl"

	"github.com/syncpipe/syncpipe/internal/atomicfile"
	"github.com/syncpipe/syncpipe/sinks/bucketstore"
)

// StateFiles keeps the state of pipelines whose sink is not bucket storage
// — version, slot, snapshot plan, stream position, last error: what a
// SinkRunner stores besides the sink's own progress — in one JSON file per
// pipeline, for a config without storage (config.UsesStorage). Each
// change rewrites the file atomically (internal/atomicfile), so a crash
// leaves the last state written. It implements SinkStorage; it is safe for
// concurrent use within a process, but two processes must not share a
// state directory (as they must not share a sink's progress file).
type StateFiles struct {
	path func(pipeline string) string
	mu   sync.Mutex // serialises each file's read-modify-write
}

// NewStateFiles returns the state files at path(pipeline name), typically
// config.Config.StateFile; a missing file (and directory, created on the
// first write) means the pipeline never ran.
func NewStateFiles(path func(pipeline string) string) *StateFiles {
	return &StateFiles{path: path}
}

var _ SinkStorage = (*StateFiles)(nil)

// stateFormat is written into each file so that a later format can tell
// old files apart instead of misreading them.
const stateFormat = 1

// stateJSON is a state file's format, kept apart from
// bucketstore.SinkPipeline so that the file's field names stay stable.
type stateJSON struct {
	Format       int             `json:"format"`
	Name         string          `json:"name"`
	Version      int             `json:"version"`
	Fingerprint  string          `json:"fingerprint"`
	SinkType     string          `json:"sink_type"`
	Tables       []string        `json:"tables"`
	SlotName     string          `json:"slot_name"`
	Plan         json.RawMessage `json:"plan,omitempty"`
	SnapshotDone bool            `json:"snapshot_done"`
	StreamLSN    string          `json:"stream_lsn,omitempty"`
	LastError    string          `json:"last_error,omitempty"`
	LastErrorAt  *time.Time      `json:"last_error_at,omitempty"`
	UpdatedAt    time.Time       `json:"updated_at"`
}

// SinkPipeline returns the state of the named pipeline; ok is false when
// it never ran (no file).
func (f *StateFiles) SinkPipeline(_ context.Context, name string) (bucketstore.SinkPipeline, bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.read(name)
}

// StartSinkPipelineVersion records a new version of a pipeline, with no
// plan, no snapshot done, no stream position and no error.
func (f *StateFiles) StartSinkPipelineVersion(_ context.Context, p bucketstore.SinkPipeline) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	p.Plan, p.SnapshotDone, p.StreamLSN, p.LastError, p.LastErrorAt = nil, false, 0, "", nil
	p.Tables = slices.Clone(p.Tables)
	if err := f.write(p); err != nil {
		return fmt.Errorf("start version %d of pipeline %s: %w", p.Version, p.Name, err)
	}
	return nil
}

// SetSinkPipelinePlan stores the snapshot's key range plan, once: a plan
// already stored is kept and returned.
func (f *StateFiles) SetSinkPipelinePlan(_ context.Context, name string, plan []byte) ([]byte, error) {
	var stored []byte
	err := f.update(name, func(p *bucketstore.SinkPipeline) bool {
		if p.Plan == nil {
			p.Plan = slices.Clone(plan)
		}
		stored = p.Plan
		return true
	})
	if err != nil {
		return nil, fmt.Errorf("store the snapshot plan of pipeline %s: %w", name, err)
	}
	return stored, nil
}

// MarkSinkPipelineSnapshotDone records that every range of the snapshot is
// committed in the sink.
func (f *StateFiles) MarkSinkPipelineSnapshotDone(_ context.Context, name string) error {
	return f.update(name, func(p *bucketstore.SinkPipeline) bool { p.SnapshotDone = true; return true })
}

// SetSinkPipelineStream records the last stream position the sink
// committed, for status.
func (f *StateFiles) SetSinkPipelineStream(_ context.Context, name string, lsn pglogrepl.LSN) error {
	return f.update(name, func(p *bucketstore.SinkPipeline) bool { p.StreamLSN = lsn; return true })
}

// ReportSinkPipelineError stores an error that needs an operator.
func (f *StateFiles) ReportSinkPipelineError(_ context.Context, name, msg string) error {
	return f.update(name, func(p *bucketstore.SinkPipeline) bool {
		now := time.Now().UTC()
		p.LastError, p.LastErrorAt = msg, &now
		return true
	})
}

// ClearSinkPipelineError removes a stored error once the pipeline works.
func (f *StateFiles) ClearSinkPipelineError(_ context.Context, name string) error {
	return f.update(name, func(p *bucketstore.SinkPipeline) bool {
		if p.LastError == "" && p.LastErrorAt == nil {
			return false
		}
		p.LastError, p.LastErrorAt = "", nil
		return true
	})
}

// update changes the stored state of a pipeline that has one, writing it
// back when change reports a change.
func (f *StateFiles) update(name string, change func(*bucketstore.SinkPipeline) bool) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	p, ok, err := f.read(name)
	if err == nil && !ok {
		err = errors.New("no state file: the pipeline has not started a version")
	}
	if err == nil && change(&p) {
		err = f.write(p)
	}
	if err != nil {
		return fmt.Errorf("update pipeline %s: %w", name, err)
	}
	return nil
}

func (f *StateFiles) read(name string) (bucketstore.SinkPipeline, bool, error) {
	path := f.path(name)
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return bucketstore.SinkPipeline{}, false, nil
	}
	if err != nil {
		return bucketstore.SinkPipeline{}, false, fmt.Errorf("read the state of pipeline %s: %w", name, err)
	}
	var s stateJSON
	if err := json.Unmarshal(b, &s); err != nil {
		return bucketstore.SinkPipeline{}, false, fmt.Errorf("state file %s: %w", path, err)
	}
	if s.Format != stateFormat || s.Name != name {
		return bucketstore.SinkPipeline{}, false, fmt.Errorf("state file %s: format %d of pipeline %q; want format %d of pipeline %q",
			path, s.Format, s.Name, stateFormat, name)
	}
	p := bucketstore.SinkPipeline{Name: s.Name, Version: s.Version, Fingerprint: s.Fingerprint, SinkType: s.SinkType,
		Tables: s.Tables, SlotName: s.SlotName, SnapshotDone: s.SnapshotDone,
		LastError: s.LastError, LastErrorAt: s.LastErrorAt, UpdatedAt: s.UpdatedAt}
	if p.Tables == nil {
		p.Tables = []string{}
	}
	if s.Plan != nil {
		// The file is indented for its readers; the plan is handed back
		// compact, as it was stored.
		var plan bytes.Buffer
		if err := json.Compact(&plan, s.Plan); err != nil {
			return bucketstore.SinkPipeline{}, false, fmt.Errorf("state file %s: plan: %w", path, err)
		}
		p.Plan = plan.Bytes()
	}
	if s.StreamLSN != "" {
		if p.StreamLSN, err = pglogrepl.ParseLSN(s.StreamLSN); err != nil {
			return bucketstore.SinkPipeline{}, false, fmt.Errorf("state file %s: stream_lsn: %w", path, err)
		}
	}
	return p, true, nil
}

func (f *StateFiles) write(p bucketstore.SinkPipeline) error {
	s := stateJSON{Format: stateFormat, Name: p.Name, Version: p.Version, Fingerprint: p.Fingerprint, SinkType: p.SinkType,
		Tables: p.Tables, SlotName: p.SlotName, Plan: p.Plan, SnapshotDone: p.SnapshotDone,
		LastError: p.LastError, LastErrorAt: p.LastErrorAt, UpdatedAt: time.Now().UTC()}
	if p.StreamLSN != 0 {
		s.StreamLSN = p.StreamLSN.String()
	}
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	path := f.path(p.Name)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return atomicfile.Write(path, append(b, '\n'), true)
}
