package atomicfile

import (
	"os"
	"path/filepath"
	"testing"
)

// TestWriteReplacesAndCleansUp checks that Write replaces the content and
// leaves no temporary file, and that RemoveTemps removes only the
// temporaries a crash would leave.
func TestWriteReplacesAndCleansUp(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "state.json")
	for _, content := range []string{"one", "two"} {
		if err := Write(path, []byte(content), true); err != nil {
			t.Fatal(err)
		}
		if got, err := os.ReadFile(path); err != nil || string(got) != content {
			t.Fatalf("content %q, %v; want %q", got, err, content)
		}
	}
	// What a crash between creating and renaming leaves, and a neighbour.
	for _, name := range []string{"state.json.123.tmp", "other.json.1.tmp"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("torn"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := RemoveTemps(path); err != nil {
		t.Fatal(err)
	}
	var names []string
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if len(names) != 2 || names[0] != "other.json.1.tmp" || names[1] != "state.json" {
		t.Fatalf("directory holds %v; want other.json.1.tmp and state.json", names)
	}
}
