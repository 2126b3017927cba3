package jsonl_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/syncpipe/syncpipe/config"
	"github.com/syncpipe/syncpipe/model"
	"github.com/syncpipe/syncpipe/sinks"
	"github.com/syncpipe/syncpipe/sinks/jsonl"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var ctx = context.Background()

// open builds a jsonl sink the way a YAML pipeline does and closes it when
// the test ends.
func open(t *testing.T, settings map[string]any) sinks.Sink {
	t.Helper()
	s, err := sinks.Open(ctx, config.Pipeline{Name: t.Name(), Sink: config.Sink{Type: "jsonl", Settings: settings}}, sinks.Env{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close(ctx) })
	return s
}

func writer(t *testing.T, s sinks.Sink, i int) sinks.Writer {
	t.Helper()
	w, err := s.Writer(ctx, i)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// line is a parsed line of a table file.
type line struct {
	Kind  string `json:"kind"`
	Table string `json:"table"`
	Key   string `json:"key"`
	LSN   string `json:"lsn"`
	I     int64  `json:"i"`
	Puts  []struct {
		Bucket     string          `json:"bucket"`
		ObjectType string          `json:"object_type"`
		ObjectID   string          `json:"object_id"`
		Checksum   uint32          `json:"checksum"`
		Data       json.RawMessage `json:"data"`
	} `json:"puts"`
	Lookups []struct {
		Key    string          `json:"key"`
		Params json.RawMessage `json:"params"`
	} `json:"lookups"`
}

// readLines parses every line of a table file, failing on any line that is
// not a complete JSON object.
func readLines(t *testing.T, path string) []line {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(data) > 0 && data[len(data)-1] != '\n' {
		t.Fatalf("%s does not end with a newline", path)
	}
	var out []line
	for i, raw := range bytes.Split(bytes.TrimSuffix(data, []byte("\n")), []byte("\n")) {
		var l line
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&l); err != nil || dec.More() {
			t.Fatalf("%s line %d is not one JSON object (%v): %.200s", path, i+1, err, raw)
		}
		out = append(out, l)
	}
	return out
}

var (
	todos = &model.Table{Schema: "public", Name: "todos"}
	lists = &model.Table{Schema: "public", Name: "lists"}
	key1  = [16]byte{0x12, 0x34, 0x56, 0x78, 0x9a, 0xbc, 0xde, 0xf0, 0x01, 0x23, 0x45, 0x67, 0x89, 0xab, 0xcd, 0xef}
)

func TestLinesWrittenAndParseable(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "out", "nested") // created by the sink
	s := open(t, map[string]any{"dir": dir, "fsync": false})
	w := writer(t, s, 0)
	weird := &model.Table{Schema: "public", Name: "we/ird"}
	data := `{"id":"t1","title":"say \"hi\"\n"}`
	b := sinks.Batch{Items: []model.Change{
		{Table: todos, Kind: model.Upsert, Key: key1,
			Puts: []model.Put{
				{Bucket: `1#by_list["a"]`, ObjectType: "todos", ObjectID: "t1", Checksum: 4294967295, Data: []byte(data)},
				{Bucket: `1#mine["u"]`, ObjectType: "todos", ObjectID: "t1", Checksum: 7, Data: []byte(data)},
			},
			Lookups: []model.Lookup{{Key: []byte(`["by_list","a"]`), Params: []byte(`[{"list_id":"a"}]`)}}},
		{Table: lists, Kind: model.Delete},
		{Table: weird, Kind: model.Upsert, Puts: []model.Put{{Bucket: "b", ObjectType: "o", ObjectID: "x\xffy\x01<é>"}}},
	}}
	writeCommit(t, s, w, b)

	got, err := os.ReadFile(filepath.Join(dir, "public.lists.jsonl"))
	want := `{"kind":"delete","table":"public.lists","key":"00000000-0000-0000-0000-000000000000","puts":[],"lookups":[]}` + "\n"
	if err != nil || string(got) != want {
		t.Errorf("lists file = %q, %v\nwant %q", got, err, want)
	}

	ls := readLines(t, filepath.Join(dir, "public.todos.jsonl"))
	if len(ls) != 1 {
		t.Fatalf("%d todos lines; want 1", len(ls))
	}
	l := ls[0]
	if l.Kind != "upsert" || l.Table != "public.todos" || l.Key != "12345678-9abc-def0-0123-456789abcdef" || len(l.Puts) != 2 || len(l.Lookups) != 1 {
		t.Fatalf("todos line = %+v", l)
	}
	p := l.Puts[0]
	if p.Bucket != `1#by_list["a"]` || p.ObjectType != "todos" || p.ObjectID != "t1" || p.Checksum != 4294967295 || string(p.Data) != data {
		t.Errorf("put = %+v", p)
	}
	if lk := l.Lookups[0]; lk.Key != `["by_list","a"]` || string(lk.Params) != `[{"list_id":"a"}]` {
		t.Errorf("lookup = %+v", lk)
	}

	ws := readLines(t, filepath.Join(dir, "public.we%2Fird.jsonl"))
	if len(ws) != 1 || ws[0].Table != "public.we/ird" || ws[0].Puts[0].ObjectID != "x\uFFFDy\x01<é>" || string(ws[0].Puts[0].Data) != "null" {
		t.Errorf("weird line = %+v", ws)
	}

	// A second batch appends to the same file.
	writeCommit(t, s, w, sinks.Batch{Items: []model.Change{{Table: todos, Kind: model.Delete, Key: key1}}, Progress: sinks.Position{LSN: 2}})
	ls = readLines(t, filepath.Join(dir, "public.todos.jsonl"))
	if len(ls) != 2 || ls[0].Kind != "upsert" || ls[1].Kind != "delete" || ls[1].Key != ls[0].Key {
		t.Errorf("after second batch: %+v", ls)
	}
}

func TestFileNameStaysInDirectory(t *testing.T) {
	for _, tc := range [][3]string{
		{"public", "todos", "public.todos.jsonl"},
		{"public", "a/b", "public.a%2Fb.jsonl"},
		{"..", "..", "......jsonl"},
		{`x\y`, "100%\n", "x%5Cy.100%25%0A.jsonl"},
	} {
		got := jsonl.FileName(tc[0], tc[1])
		if got != tc[2] || filepath.Base(got) != got || strings.ContainsAny(got, `/\`) {
			t.Errorf("FileName(%q, %q) = %q; want %q", tc[0], tc[1], got, tc[2])
		}
	}
}

func TestWriteRejectsChangeWithoutTable(t *testing.T) {
	s := open(t, map[string]any{"dir": t.TempDir()})
	err := writer(t, s, 0).Write(ctx, sinks.Batch{Seq: 4, Items: []model.Change{{Table: todos}, {}}})
	if err == nil || !strings.Contains(err.Error(), "change 1 of batch 4 has no table") {
		t.Errorf("err = %v", err)
	}
}

func TestProgressSurvivesReopen(t *testing.T) {
	dir := t.TempDir()
	settings := map[string]any{"dir": dir}
	s, err := sinks.Open(ctx, config.Pipeline{Name: "a", Sink: config.Sink{Type: "jsonl", Settings: settings}}, sinks.Env{})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok, err := s.Resume(ctx, "", 0); ok || err != nil {
		t.Fatalf("fresh sink resumes: %v, %v", ok, err)
	}
	lastKey := []string{"k1", "7"}
	commits := []sinks.Position{
		{Table: "public.todos", Range: 0, LastKey: lastKey, RowsDone: 10},
		{LSN: 42},
		{Table: "public.todos", Range: 1, LastKey: []string{"z"}, RowsDone: 5, Done: true},
		{Table: "public.todos", Range: 0, LastKey: []string{"k2", "8"}, RowsDone: 20},
		{LSN: 1<<63 + 1},
	}
	for i, pos := range commits {
		if err := s.Commit(ctx, sinks.Batch{Seq: uint64(i), Progress: pos}); err != nil {
			t.Fatal(err)
		}
	}
	lastKey[0] = "changed by the source after the commit"
	check := func(s sinks.Sink, when string) {
		t.Helper()
		for _, tc := range []struct {
			table   string
			rangeNo int
			want    sinks.Position
			ok      bool
		}{
			{"public.todos", 0, commits[3], true},
			{"public.todos", 1, commits[2], true},
			{"", 0, commits[4], true},
			{"public.todos", 2, sinks.Position{}, false},
			{"public.lists", 0, sinks.Position{}, false},
		} {
			got, ok, err := s.Resume(ctx, tc.table, tc.rangeNo)
			if err != nil || ok != tc.ok || !equalPos(got, tc.want) {
				t.Errorf("%s: Resume(%q, %d) = %+v, %v, %v; want %+v, %v", when, tc.table, tc.rangeNo, got, ok, err, tc.want, tc.ok)
			}
		}
	}
	check(s, "before close")
	if got, _, _ := s.Resume(ctx, "public.todos", 0); len(got.LastKey) > 0 {
		got.LastKey[0] = "changed by the caller" // must not change the sink's state
	}
	check(s, "after the caller changed a result")
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}

	s2 := open(t, settings)
	check(s2, "after re-open")
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 || entries[0].Name() != jsonl.ProgressFile {
		t.Errorf("directory holds %v; want only %s (no temporary files)", entries, jsonl.ProgressFile)
	}
}

func equalPos(a, b sinks.Position) bool {
	return a.Table == b.Table && a.Range == b.Range && slices.Equal(a.LastKey, b.LastKey) &&
		a.RowsDone == b.RowsDone && a.Done == b.Done && a.LSN == b.LSN
}

func TestBadProgressFile(t *testing.T) {
	for name, content := range map[string]string{
		"garbage": "{not json",
		"version": `{"version": 99, "ranges": []}`,
		"range":   `{"version": 1, "ranges": [{"range": 3}]}`,
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, jsonl.ProgressFile), []byte(content), 0o644); err != nil {
				t.Fatal(err)
			}
			_, err := jsonl.New(jsonl.Options{Dir: dir})
			if err == nil || !strings.Contains(err.Error(), jsonl.ProgressFile) {
				t.Errorf("err = %v; want one naming %s", err, jsonl.ProgressFile)
			}
		})
	}
}

func TestBadSettings(t *testing.T) {
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for _, tc := range []struct {
		settings map[string]any
		want     []string
	}{
		{nil, []string{"settings.dir: required"}},
		{map[string]any{"dir": 5}, []string{"settings.dir: want a string, got the number 5"}},
		{map[string]any{"dir": ""}, []string{"settings.dir: must not be empty"}},
		{map[string]any{"dir": dir, "dri": "x", "mode": 1}, []string{`settings.dri: unknown setting (did you mean "dir"? known: dir, fsync)`, "settings.mode: unknown"}},
		{map[string]any{"dir": dir, "fsync": "maybe"}, []string{`settings.fsync: want a boolean, got the string "maybe"`}},
		{map[string]any{"dri": dir}, []string{"settings.dri: unknown", "settings.dir: required"}},
		{map[string]any{"dir": file}, []string{"create directory"}},
	} {
		_, err := sinks.Open(ctx, config.Pipeline{Name: "bad", Sink: config.Sink{Type: "jsonl", Settings: tc.settings}}, sinks.Env{})
		if err == nil {
			t.Errorf("settings %v accepted", tc.settings)
			continue
		}
		if !strings.HasPrefix(err.Error(), `pipeline "bad": sink jsonl: `) {
			t.Errorf("settings %v: error %q does not name pipeline and sink", tc.settings, err)
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("settings %v: error %q does not contain %q", tc.settings, err, w)
			}
		}
	}
	// Text booleans, as environment overrides may deliver them, are fine.
	for _, v := range []any{false, "false", true, "true"} {
		open(t, map[string]any{"dir": t.TempDir(), "fsync": v})
	}
}

func TestDirectoryBelongsToOneSink(t *testing.T) {
	dir := t.TempDir()
	first, err := jsonl.New(jsonl.Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	_, err = sinks.Open(ctx, config.Pipeline{Name: "second", Sink: config.Sink{Type: "jsonl", Settings: map[string]any{"dir": dir + "/."}}}, sinks.Env{})
	if err == nil || !strings.Contains(err.Error(), "already used") {
		t.Errorf("second sink on one directory: err = %v", err)
	}
	if err := first.Close(ctx); err != nil {
		t.Fatal(err)
	}
	open(t, map[string]any{"dir": dir}) // free again after Close
}

func TestUseAfterClose(t *testing.T) {
	s, err := jsonl.New(jsonl.Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	w := writer(t, s, 0)
	if err := w.Write(ctx, sinks.Batch{Items: []model.Change{{Table: todos, Kind: model.Upsert}}}); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(ctx); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if err := w.Write(ctx, sinks.Batch{Items: []model.Change{{Table: todos, Kind: model.Upsert}}}); err == nil {
		t.Error("Write after Close succeeded")
	}
	if err := s.Commit(ctx, sinks.Batch{Progress: sinks.Position{LSN: 1}}); err == nil {
		t.Error("Commit after Close succeeded")
	}
	if _, err := s.Writer(ctx, 0); err == nil {
		t.Error("Writer after Close succeeded")
	}
}

func TestCancelledWrite(t *testing.T) {
	s := open(t, map[string]any{"dir": t.TempDir()})
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	err := writer(t, s, 0).Write(cctx, sinks.Batch{Items: []model.Change{{Table: todos, Kind: model.Upsert}}})
	if !errors.Is(err, context.Canceled) {
		t.Errorf("err = %v; want context.Canceled", err)
	}
}

// writeCommit writes b with w and commits it, as the pipeline would.
func writeCommit(t *testing.T, s sinks.Sink, w sinks.Writer, b sinks.Batch) {
	t.Helper()
	if err := w.Write(ctx, b); err != nil {
		t.Fatal(err)
	}
	if err := s.Commit(ctx, b); err != nil {
		t.Fatal(err)
	}
}

// A crash after lines reached a file but before their commit: the next
// Open cuts them off, so the re-sent batch is in the file once. Stream
// lines carry their transaction's commit LSN and their index in it.
func TestUncommittedLinesAreCutAtOpen(t *testing.T) {
	dir := t.TempDir()
	s := open(t, map[string]any{"dir": dir})
	w := writer(t, s, 0)
	first := sinks.Batch{Items: []model.Change{{Table: todos, Kind: model.Upsert, Key: key1, TxnLSN: 0x16B3748, TxnIndex: 0}},
		Progress: sinks.Position{LSN: 0x16B3800}}
	writeCommit(t, s, w, first)
	committed, err := os.ReadFile(filepath.Join(dir, "public.todos.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(committed), `"lsn":"0/16B3748","i":0`) {
		t.Errorf("stream line without its position: %s", committed)
	}
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
	// What a crash between append and progress replace leaves behind: a
	// line past the committed size (whole, or torn), and a file the
	// progress does not know.
	f, err := os.OpenFile(filepath.Join(dir, "public.todos.jsonl"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(`{"kind":"upsert","table":"public.todos"}` + "\n" + `{"kind":"del`); err != nil {
		t.Fatal(err)
	}
	_ = f.Close()
	if err := os.WriteFile(filepath.Join(dir, "public.lists.jsonl"), []byte(`{"kind":"delete"}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}

	s2 := open(t, map[string]any{"dir": dir})
	if got, _ := os.ReadFile(filepath.Join(dir, "public.todos.jsonl")); string(got) != string(committed) {
		t.Errorf("after reopen todos = %q; want the committed %q", got, committed)
	}
	if got, _ := os.ReadFile(filepath.Join(dir, "public.lists.jsonl")); len(got) != 0 {
		t.Errorf("after reopen lists = %q; want empty", got)
	}
	pos, ok, err := s2.Resume(ctx, "", 0)
	if err != nil || !ok || pos.LSN != 0x16B3800 {
		t.Fatalf("Resume = %+v, %v, %v", pos, ok, err)
	}
	second := sinks.Batch{Items: []model.Change{{Table: todos, Kind: model.Delete, Key: key1, TxnLSN: 0x16B3900, TxnIndex: 4}},
		Progress: sinks.Position{LSN: 0x16B3800, TxnLSN: 0x16B3900, TxnChanges: 5}}
	writeCommit(t, s2, writer(t, s2, 0), second)
	if ls := readLines(t, filepath.Join(dir, "public.todos.jsonl")); len(ls) != 2 || ls[1].Kind != "delete" {
		t.Errorf("after the re-sent batch: %+v", ls)
	}
	if pos, _, _ := s2.Resume(ctx, "", 0); pos.TxnLSN != 0x16B3900 || pos.TxnChanges != 5 {
		t.Errorf("Resume inside a transaction = %+v", pos)
	}
}

// A batch written but never committed (its run failed) leaves nothing in
// the files.
func TestWrittenButUncommittedBatchLeavesNothing(t *testing.T) {
	dir := t.TempDir()
	s := open(t, map[string]any{"dir": dir})
	b := sinks.Batch{Items: []model.Change{{Table: todos, Kind: model.Upsert, Key: key1}}, Progress: sinks.Position{LSN: 9}}
	if err := writer(t, s, 0).Write(ctx, b); err != nil {
		t.Fatal(err)
	}
	if got, err := os.ReadFile(filepath.Join(dir, "public.todos.jsonl")); err == nil && len(got) > 0 {
		t.Errorf("uncommitted lines in the file: %q", got)
	}
}

// TestAppendChangesMatchesLines checks that AppendChanges gives a JSON
// array whose elements are exactly the lines the sink writes for the same
// changes, in order.
func TestAppendChangesMatchesLines(t *testing.T) {
	dir := t.TempDir()
	s := open(t, map[string]any{"dir": dir, "fsync": false})
	changes := []model.Change{
		{Table: todos, Kind: model.Upsert, Key: key1, TxnLSN: 0x16B3748, TxnIndex: 3,
			Puts:    []model.Put{{Bucket: `1#by_list["a"]`, ObjectType: "todos", ObjectID: "t1", Checksum: 9, Data: []byte(`{"id":"t1"}`)}},
			Lookups: []model.Lookup{{Key: []byte(`["by_list","a"]`), Params: []byte(`[{"list_id":"a"}]`)}}},
		{Table: todos, Kind: model.Delete, Key: key1, TxnLSN: 0x16B3748, TxnIndex: 4},
	}
	writeCommit(t, s, writer(t, s, 0), sinks.Batch{Items: changes, Progress: sinks.Position{LSN: 0x16B3800}})
	lines, err := os.ReadFile(filepath.Join(dir, "public.todos.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	got := jsonl.AppendChanges([]byte("x"), changes)
	want := "x[" + strings.ReplaceAll(strings.TrimSuffix(string(lines), "\n"), "\n", ",") + "]"
	if string(got) != want || !json.Valid(got[1:]) {
		t.Fatalf("AppendChanges = %s\nwant %s", got, want)
	}
	if got := jsonl.AppendChanges(nil, []model.Change{{Kind: model.Upsert}}); !json.Valid(got) || !strings.Contains(string(got), `"table":null`) {
		t.Fatalf("AppendChanges of a change without a table = %s", got)
	}
	if got := jsonl.AppendChanges(nil, nil); string(got) != "[]" {
		t.Fatalf("AppendChanges of nothing = %s", got)
	}
}
