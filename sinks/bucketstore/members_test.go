package bucketstore

import (
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/syncpipe/syncpipe/model"
)

// packings are both forms of packed memberships: version 2's and version
// 3's (compact).
var packings = []struct {
	name    string
	compact bool
}{{"v2", false}, {"v3", true}}

// checkRoundTrip packs puts of a row of table in both forms and checks
// that each reads back as the puts, in order, that no form is longer than
// version 2's, and that every truncation of either is rejected.
func checkRoundTrip(t *testing.T, puts []model.Put, table string, ids map[string]int64) {
	t.Helper()
	var want []string
	for _, p := range puts {
		want = append(want, fmt.Sprint(ids[p.Bucket], p.ObjectType, p.ObjectID))
	}
	v2 := len(appendMembers(nil, false, puts, table, ids))
	for _, pk := range packings {
		b := appendMembers(nil, pk.compact, puts, table, ids)
		if len(b) > v2 {
			t.Errorf("%s: %d bytes, more than version 2's %d", pk.name, len(b), v2)
		}
		if err := checkMembers(b, pk.compact); err != nil {
			t.Fatalf("%s: %v", pk.name, err)
		}
		if countMembers(b, pk.compact) != len(puts) {
			t.Fatalf("%s: count %d, want %d", pk.name, countMembers(b, pk.compact), len(puts))
		}
		var got []string
		forMembers(b, pk.compact, func(m *member) bool {
			p := puts[len(got)]
			if !m.sameObject(table, p.ObjectType, p.ObjectID) || !hasPutMember(puts, table, m, ids) {
				t.Errorf("%s: membership %d does not match its put %+v", pk.name, len(got), p)
			}
			got = append(got, fmt.Sprint(m.bucket, m.objectType(table), m.objectID()))
			return true
		})
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("%s: read back %q, want %q", pk.name, got, want)
		}
		for i := range len(b) - 1 {
			if checkMembers(b[:i], pk.compact) == nil {
				t.Errorf("%s: accepted memberships cut to %d of %d bytes", pk.name, i, len(b))
			}
		}
	}
}

// TestMembersRoundTrip packs memberships and reads them back: shared and
// differing objects, UUID ids (stored as 16 bytes) and ids that only look
// like one (kept as text, so that each reads back byte for byte), object
// types that are the table's name (left out) and others, and counts
// around version 3's escape to a uvarint count (63).
func TestMembersRoundTrip(t *testing.T) {
	const id = "0b1e5f0c-3a4d-4c2b-9f1e-7d6a5b4c3d2e"
	ids := map[string]int64{"a": 1, "b": 300, "c": 1 << 40}
	const table = "todos"
	cases := map[string][]model.Put{
		"none":        nil,
		"one uuid":    {{Bucket: "a", ObjectType: "todos", ObjectID: id}},
		"shared uuid": {{Bucket: "a", ObjectType: "todos", ObjectID: id}, {Bucket: "b", ObjectType: "todos", ObjectID: id}},
		"shared text": {{Bucket: "a", ObjectType: "todos", ObjectID: "7"}, {Bucket: "b", ObjectType: "todos", ObjectID: "7"}},
		"other type":  {{Bucket: "a", ObjectType: "lists", ObjectID: id}},
		"each": {{Bucket: "a", ObjectType: "todos", ObjectID: id}, {Bucket: "b", ObjectType: "lists", ObjectID: "7"},
			{Bucket: "c", ObjectType: "", ObjectID: ""}},
		"upper case uuid": {{Bucket: "c", ObjectType: "t", ObjectID: "0B1E5F0C-3A4D-4C2B-9F1E-7D6A5B4C3D2E"}},
		"no hyphens":      {{Bucket: "c", ObjectType: "t", ObjectID: "0b1e5f0c3a4d4c2b9f1e7d6a5b4c3d2e0000"}},
		"braced":          {{Bucket: "c", ObjectType: "t", ObjectID: "{0b1e5f0c-3a4d-4c2b-9f1e-7d6a5b4c3d2}"}},
	}
	for _, n := range []int{62, 63, 64, 300} {
		var shared, each []model.Put
		for i := range n {
			b := fmt.Sprint("n", i)
			ids[b] = int64(i * 97)
			shared = append(shared, model.Put{Bucket: b, ObjectType: table, ObjectID: id})
			each = append(each, model.Put{Bucket: b, ObjectType: table, ObjectID: fmt.Sprint(i % 3)})
		}
		cases[fmt.Sprint(n, " shared")], cases[fmt.Sprint(n, " each")] = shared, each
	}
	for name, puts := range cases {
		t.Run(name, func(t *testing.T) { checkRoundTrip(t, puts, table, ids) })
	}
	// A table without a name never stands for an empty type.
	for _, pk := range packings {
		b := appendMembers(nil, pk.compact, []model.Put{{Bucket: "a", ObjectType: "", ObjectID: id}}, "", ids)
		forMembers(b, pk.compact, func(m *member) bool {
			if m.tableType || m.objectType("other") != "" {
				t.Errorf("%s: empty type of an unnamed table reads as %q", pk.name, m.objectType("other"))
			}
			return true
		})
	}
}

// TestMembersTodoSize checks the bytes of the common case, a todo: one
// bucket (an id of two bytes), the table's name as type, a UUID id, 22 in
// version 2 and 19 in version 3. Version 3's 19 bytes and a varlena header of 1 make current_data3's
// tuple 24 + 28 + 20 = 72 bytes (with NULL lookups and data), where
// version 2's 22 made it 80 after alignment.
func TestMembersTodoSize(t *testing.T) {
	puts := []model.Put{{Bucket: "b", ObjectType: "todos", ObjectID: "0b1e5f0c-3a4d-4c2b-9f1e-7d6a5b4c3d2e"}}
	ids := map[string]int64{"b": 300}
	// The bytes themselves: version 2's as stores hold them (count 1,
	// id 300, membersShared, type 0, objUUID, the UUID); version 3's
	// header (packTableUUID, count 1), id 300, the UUID.
	const u = "0b1e5f0c3a4d4c2b9f1e7d6a5b4c3d2e"
	for _, tc := range []struct {
		compact bool
		want    string
	}{{false, "01ac02000001" + u}, {true, "01ac02" + u}} {
		if b := appendMembers(nil, tc.compact, puts, "todos", ids); hex.EncodeToString(b) != tc.want {
			t.Errorf("compact %v: a todo's memberships pack into %d bytes %x, want %s", tc.compact, len(b), b, tc.want)
		}
	}
	if n := len(appendMembers(nil, true, nil, "todos", ids)); n != 1 {
		t.Errorf("no memberships pack into %d bytes in version 3, want 1", n)
	}
}

// TestMembersRandom round-trips random rows' memberships through both
// forms: shared or differing objects, the table's name as type or not,
// UUID or text ids, counts around version 3's escape.
func TestMembersRandom(t *testing.T) {
	r := rand.New(rand.NewPCG(47, 3))
	ids := map[string]int64{}
	uuids := []string{"0b1e5f0c-3a4d-4c2b-9f1e-7d6a5b4c3d2e", "7c9e6679-7425-40de-944b-e07fc1f90ae7"}
	counts := []int{0, 1, 2, 62, 63, 64, 300}
	for range 100 {
		n := counts[r.IntN(len(counts))]
		table := []string{"todos", ""}[r.IntN(2)]
		obj := func() (string, string) {
			typ := []string{"todos", "lists", ""}[r.IntN(3)]
			if r.IntN(2) == 0 {
				return typ, uuids[r.IntN(len(uuids))]
			}
			return typ, fmt.Sprint(r.IntN(5))
		}
		typ, id := obj()
		shared := r.IntN(2) == 0
		puts := make([]model.Put, n)
		for i := range puts {
			b := fmt.Sprint("b", r.IntN(100000))
			ids[b] = int64(r.Uint64() >> r.IntN(64))
			puts[i] = model.Put{Bucket: b, ObjectType: typ, ObjectID: id}
			if !shared {
				puts[i].ObjectType, puts[i].ObjectID = obj()
			}
		}
		checkRoundTrip(t, puts, table, ids)
	}
}

// TestMembersV3Malformed checks version 3's header checks: mode 3, a
// mode other than 0 for no memberships, an escaped count below 63, and
// bytes after none.
func TestMembersV3Malformed(t *testing.T) {
	for name, b := range map[string][]byte{
		"mode 3":          {packModeMask | 1, 5, 0, 0, 1, 'x'},
		"none, shared":    {packShared},
		"none, each":      {packEach},
		"escaped 1":       {packEach | packCountEsc, 1, 5, 0, objText, 1, 'x'},
		"none, trailing":  {0, 0},
		"uuid short":      append([]byte{packTableUUID | 1, 5}, make([]byte, 15)...),
		"uuid long":       append([]byte{packTableUUID | 1, 5}, make([]byte, 17)...),
		"empty":           {},
		"escape, no size": {packShared | packCountEsc},
	} {
		if checkMembers(b, true) == nil {
			t.Errorf("%s: accepted %x", name, b)
		}
	}
}

// FuzzMembers feeds arbitrary bytes to the memberships decoder of both
// forms: it must never panic, and whatever it accepts, forMembers walks
// in full.
func FuzzMembers(f *testing.F) {
	todo := []model.Put{{Bucket: "a", ObjectType: "todos", ObjectID: "0b1e5f0c-3a4d-4c2b-9f1e-7d6a5b4c3d2e"}}
	each := []model.Put{{Bucket: "a", ObjectType: "x", ObjectID: "1"}, {Bucket: "b", ObjectType: "y", ObjectID: "2"}}
	ids := map[string]int64{"a": 9, "b": 2}
	for _, pk := range packings {
		f.Add(pk.compact, appendMembers(nil, pk.compact, todo, "todos", ids))
		f.Add(pk.compact, appendMembers(nil, pk.compact, each, "x", ids))
	}
	f.Fuzz(func(t *testing.T, compact bool, b []byte) {
		if checkMembers(b, compact) != nil {
			return
		}
		seen := 0
		forMembers(b, compact, func(m *member) bool { _, _ = m.objectType("t"), m.objectID(); seen++; return true })
		if seen != countMembers(b, compact) {
			t.Fatalf("forMembers walked %d, count %d", seen, countMembers(b, compact))
		}
	})
}
