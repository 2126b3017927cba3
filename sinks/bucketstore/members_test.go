package bucketstore

import (
	"fmt"
	"testing"

	"github.com/syncpipe/syncpipe/model"
)

// TestMembersRoundTrip packs memberships and reads them back: shared and
// differing objects, UUID ids (stored as 16 bytes) and ids that only look
// like one (kept as text, so that each reads back byte for byte), object
// types that are the table's name (left out) and others.
func TestMembersRoundTrip(t *testing.T) {
	const id = "0b1e5f0c-3a4d-4c2b-9f1e-7d6a5b4c3d2e"
	ids := map[string]int64{"a": 1, "b": 300, "c": 1 << 40}
	const table = "todos"
	for name, puts := range map[string][]model.Put{
		"none":        nil,
		"one uuid":    {{Bucket: "a", ObjectType: "todos", ObjectID: id}},
		"shared uuid": {{Bucket: "a", ObjectType: "todos", ObjectID: id}, {Bucket: "b", ObjectType: "todos", ObjectID: id}},
		"each": {{Bucket: "a", ObjectType: "todos", ObjectID: id}, {Bucket: "b", ObjectType: "lists", ObjectID: "7"},
			{Bucket: "c", ObjectType: "", ObjectID: ""}},
		"upper case uuid": {{Bucket: "c", ObjectType: "t", ObjectID: "0B1E5F0C-3A4D-4C2B-9F1E-7D6A5B4C3D2E"}},
		"no hyphens":      {{Bucket: "c", ObjectType: "t", ObjectID: "0b1e5f0c3a4d4c2b9f1e7d6a5b4c3d2e0000"}},
		"braced":          {{Bucket: "c", ObjectType: "t", ObjectID: "{0b1e5f0c-3a4d-4c2b-9f1e-7d6a5b4c3d2}"}},
	} {
		t.Run(name, func(t *testing.T) {
			b := appendMembers(nil, puts, table, ids)
			if err := checkMembers(b); err != nil {
				t.Fatal(err)
			}
			if countMembers(b) != len(puts) {
				t.Fatalf("count %d, want %d", countMembers(b), len(puts))
			}
			var got []string
			forMembers(b, func(m *member) bool {
				p := puts[len(got)]
				if !m.sameObject(table, p.ObjectType, p.ObjectID) || !hasPutMember(puts, table, m, ids) {
					t.Errorf("membership %d does not match its put %+v", len(got), p)
				}
				got = append(got, fmt.Sprint(m.bucket, m.objectType(table), m.objectID()))
				return true
			})
			var want []string
			for _, p := range puts {
				want = append(want, fmt.Sprint(ids[p.Bucket], p.ObjectType, p.ObjectID))
			}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("read back %q, want %q", got, want)
			}
			for i := range len(b) - 1 {
				if checkMembers(b[:i]) == nil && countMembers(b[:i]) > 0 {
					t.Errorf("accepted memberships cut to %d of %d bytes", i, len(b))
				}
			}
		})
	}
	// The common case: one bucket, the table's name as type, a UUID id.
	if n := len(appendMembers(nil, []model.Put{{Bucket: "b", ObjectType: table, ObjectID: id}}, table, ids)); n != 22 {
		t.Errorf("one UUID membership packs into %d bytes, want 22", n)
	}
	// A table without a name never stands for an empty type.
	b := appendMembers(nil, []model.Put{{Bucket: "a", ObjectType: "", ObjectID: "1"}}, "", ids)
	forMembers(b, func(m *member) bool {
		if m.tableType || m.objectType("other") != "" {
			t.Errorf("empty type of an unnamed table reads as %q", m.objectType("other"))
		}
		return true
	})
}

// FuzzMembers feeds arbitrary bytes to the memberships decoder: it must
// never panic, and whatever it accepts, forMembers walks in full.
func FuzzMembers(f *testing.F) {
	f.Add(appendMembers(nil, []model.Put{{Bucket: "a", ObjectType: "todos", ObjectID: "0b1e5f0c-3a4d-4c2b-9f1e-7d6a5b4c3d2e"}}, "todos", map[string]int64{"a": 9}))
	f.Add(appendMembers(nil, []model.Put{{Bucket: "a", ObjectType: "x", ObjectID: "1"}, {Bucket: "b", ObjectType: "y", ObjectID: "2"}}, "x", map[string]int64{"a": 1, "b": 2}))
	f.Fuzz(func(t *testing.T, b []byte) {
		if checkMembers(b) != nil {
			return
		}
		seen := 0
		forMembers(b, func(m *member) bool { _, _ = m.objectType("t"), m.objectID(); seen++; return true })
		if seen != countMembers(b) {
			t.Fatalf("forMembers walked %d, count %d", seen, countMembers(b))
		}
	})
}
