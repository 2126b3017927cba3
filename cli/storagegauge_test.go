package cli

import (
	"context"
	"fmt"
	"reflect"
	"testing"

	"github.com/syncpipe/syncpipe/sinks/bucketstore"
)

// fakeVersions holds groups in memory: listed (not terminated) and all.
type fakeVersions struct {
	listed []bucketstore.Group
	all    map[int]bucketstore.Group
}

func (f fakeVersions) Groups(context.Context) ([]bucketstore.Group, error) { return f.listed, nil }
func (f fakeVersions) Group(_ context.Context, id int) (bucketstore.Group, error) {
	g, ok := f.all[id]
	if !ok {
		return g, fmt.Errorf("group %d: %w", id, bucketstore.ErrNoGroup)
	}
	return g, nil
}

// TestStorageGaugeVersions: every group's bytes carry its storage
// version, a terminated group's (still being cleared) too; a group gone
// from storage since its bytes were read is left out.
func TestStorageGaugeVersions(t *testing.T) {
	v1 := bucketstore.Group{ID: 1, State: bucketstore.StateTerminated, StorageVersion: 1}
	v2 := bucketstore.Group{ID: 2, State: bucketstore.StateActive, StorageVersion: 2}
	groups := fakeVersions{listed: []bucketstore.Group{v2}, all: map[int]bucketstore.Group{1: v1, 2: v2}}
	got, err := withVersions(context.Background(), map[int]int64{1: 100, 2: 60, 3: 5}, groups)
	if err != nil {
		t.Fatal(err)
	}
	want := map[int]groupSize{1: {bytes: 100, version: 1}, 2: {bytes: 60, version: 2}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %+v, want %+v", got, want)
	}
}
