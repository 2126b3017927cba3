package bucketstore

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/syncpipe/syncpipe/internal/testkit/pgtest"
)

// TestOpenNoMigrate: a store opened with NoMigrate (status, compact)
// reports storage without the schema, or with an older one, as
// ErrNoSchema and changes nothing; at SchemaVersion it opens.
func TestOpenNoMigrate(t *testing.T) {
	ctx := context.Background()
	uri := pgtest.NewDB(t)
	open := func() error {
		s, err := Open(ctx, Config{URI: uri, NoMigrate: true})
		if err == nil {
			s.Close()
		}
		return err
	}
	if err := open(); !errors.Is(err, ErrNoSchema) || !strings.Contains(err.Error(), `has no syncpipe schema "syncpipe" yet: start`) {
		t.Fatalf("empty storage: %v, want ErrNoSchema", err)
	}
	conn := pgtest.Connect(t, uri)
	var schemas int
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM pg_namespace WHERE nspname = 'syncpipe'").Scan(&schemas); err != nil || schemas != 0 {
		t.Fatalf("NoMigrate created the schema (%d, %v)", schemas, err)
	}
	s, err := Open(ctx, Config{URI: uri})
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	if err := open(); err != nil {
		t.Fatalf("migrated storage: %v", err)
	}
	if _, err := conn.Exec(ctx, "DELETE FROM syncpipe.migrations WHERE version = $1", SchemaVersion); err != nil {
		t.Fatal(err)
	}
	if err := open(); !errors.Is(err, ErrNoSchema) || !strings.Contains(err.Error(), "once to migrate it") {
		t.Fatalf("storage a version behind: %v, want ErrNoSchema", err)
	}
}
