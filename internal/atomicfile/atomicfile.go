// Package atomicfile replaces small state files so that a crash leaves
// either the old or the new content, never a torn mix: the progress files
// of sinks (sinks.FileProgress, sinks/jsonl) are written with it.
package atomicfile

import (
	"os"
	"path/filepath"
	"strings"
)

// tmpSuffix ends the names of the temporary files Write creates next to
// the file it replaces; RemoveTemps finds those a crash left behind.
const tmpSuffix = ".tmp"

// Write replaces the file at path with data: it writes a temporary file in
// the same directory, fsyncs it, renames it over path and fsyncs the
// directory, so that once Write returns nil the new content survives a
// crash, and a crash before leaves the old content. With fsync false the
// syncs are skipped: the replace is still atomic for other readers, but a
// machine crash may lose it.
func Write(path string, data []byte, fsync bool) (err error) {
	dir, name := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	tmp, err := os.CreateTemp(dir, name+".*"+tmpSuffix)
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			_ = tmp.Close()
			_ = os.Remove(tmp.Name())
		}
	}()
	if _, err = tmp.Write(data); err != nil {
		return err
	}
	if fsync {
		if err = tmp.Sync(); err != nil {
			return err
		}
	}
	if err = tmp.Close(); err != nil {
		return err
	}
	if err = os.Rename(tmp.Name(), path); err != nil {
		return err
	}
	if fsync {
		return SyncDir(dir)
	}
	return nil
}

// RemoveTemps deletes the temporary files that a Write of path interrupted
// by a crash left behind; the file at path itself is never touched.
func RemoveTemps(path string) error {
	dir, name := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		n := e.Name()
		if e.IsDir() || !strings.HasPrefix(n, name+".") || !strings.HasSuffix(n, tmpSuffix) {
			continue
		}
		if err := os.Remove(filepath.Join(dir, n)); err != nil && !os.IsNotExist(err) {
			return err
		}
	}
	return nil
}

// SyncDir makes the directory entries of dir (new files, renames) durable.
func SyncDir(dir string) error {
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
