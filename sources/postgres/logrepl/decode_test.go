package logrepl

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"
)

// feed decodes msgs at increasing WAL positions and returns the first error.
func feed(d *decoder, msgs ...[]byte) error {
	for i, m := range msgs {
		if err := d.message(LSN(0x1000+16*i), m); err != nil {
			return err
		}
	}
	return nil
}

func TestDecoderTransaction(t *testing.T) {
	at := time.Date(2024, 5, 6, 7, 8, 9, 123456000, time.UTC)
	rel := testRel(42)
	d := newDecoder(0, nil)
	err := feed(d,
		encBegin(0x2000, at, 7),
		encType(9999, "public", "mood"),
		encRelation(rel),
		encInsert(42, []Col{text("1"), text("one")}),
		encUpdate(42, OldKey, []Col{text("1"), null}, []Col{text("2"), {Kind: ColUnchanged}}),
		encDelete(42, OldKey, []Col{text("2"), null}),
		encMessage(true, 0x1fff, HeartbeatPrefix, []byte("in txn")),
		encTruncate(3, 42),
		encCommit(0x2000, 0x2030, at),
	)
	if err != nil {
		t.Fatal(err)
	}
	out := d.takeOut()
	if len(out) != 1 || !out[0].first || !out[0].last || out[0].endLSN != 0x2030 {
		t.Fatalf("segments = %+v", out)
	}
	h := out[0].txn
	if h.Xid != 7 || h.CommitLSN != 0x2000 || h.BeginLSN != 0x1000 || !h.CommitTime.Equal(at) {
		t.Errorf("header = %+v", h)
	}
	cs := out[0].changes
	if got := kinds(cs); strings.Join(got, ",") != "insert,update,delete,truncate" {
		t.Fatalf("kinds = %v", got)
	}
	if !cs[0].Relation.Equal(rel) || cs[0].LSN != 0x1030 {
		t.Errorf("relation %+v at %s", cs[0].Relation, cs[0].LSN)
	}
	if !reflect.DeepEqual(cs[1].New.Columns, []Col{text("2"), {Kind: ColUnchanged}}) || cs[1].OldKind != OldKey ||
		!reflect.DeepEqual(cs[1].Old.Columns, []Col{text("1"), null}) {
		t.Errorf("update = %+v", cs[1])
	}
	if !cs[3].TruncateCascade || !cs[3].TruncateRestartIdentity || cs[3].TruncateRelations[0] != cs[0].Relation {
		t.Errorf("truncate = %+v", cs[3])
	}
}

func TestDecoderSegmentsAndPositions(t *testing.T) {
	d := newDecoder(0, []*Relation{testRel(1)})
	d.segChanges = 2
	msgs := [][]byte{encMessage(false, 0x500, HeartbeatPrefix, []byte("ping")),
		encMessage(false, 0x600, "other", nil), encMessage(false, 0x700, HeartbeatPrefix, nil),
		encBegin(0x900, time.Now(), 1)}
	for i := range 5 {
		msgs = append(msgs, encInsert(1, []Col{text(string(rune('a' + i))), null}))
	}
	msgs = append(msgs, encCommit(0x900, 0x930, time.Now()))
	if err := feed(d, msgs...); err != nil {
		t.Fatal(err)
	}
	out := d.takeOut()
	// one collapsed position, then 2+2+1 changes
	if len(out) != 4 || out[0].txn != nil || out[0].pos != 0x700 {
		t.Fatalf("segments = %+v", out)
	}
	for i, want := range []int{2, 2, 1} {
		s := out[i+1]
		if len(s.changes) != want || s.first != (i == 0) || s.last != (i == 2) || s.txn != out[1].txn {
			t.Errorf("segment %d: %d changes first %v last %v", i, len(s.changes), s.first, s.last)
		}
	}
	d.position(0, false) // ignored
	if len(d.out) != 0 {
		t.Fatal("zero position recorded")
	}
}

func TestDecoderSkipsAcknowledgedButKeepsSchema(t *testing.T) {
	rel := testRel(1)
	wider := testRel(1)
	wider.Columns = append(wider.Columns, Column{Name: "extra", TypeOID: 23, TypeMod: -1})
	d := newDecoder(0x1000, []*Relation{rel})
	err := feed(d,
		encBegin(0x0900, time.Now(), 1), // committed before the start: skipped
		encRelation(wider),
		encInsert(1, []Col{text("1"), null, text("3")}),
		encCommit(0x0900, 0x0930, time.Now()),
		encBegin(0x1100, time.Now(), 2),
		encInsert(1, []Col{text("2"), null, null}),
		encCommit(0x1100, 0x1130, time.Now()),
	)
	if err != nil {
		t.Fatal(err)
	}
	out := d.takeOut()
	if len(out) != 1 || out[0].txn.Xid != 2 {
		t.Fatalf("segments = %+v", out)
	}
	cs := out[0].changes
	if len(cs) != 2 || cs[0].Kind != RelationChanged || cs[0].Previous != rel || cs[1].Relation != cs[0].Relation {
		t.Fatalf("changes = %v", kinds(cs))
	}
}

func TestDecoderProtocolErrors(t *testing.T) {
	rel := encRelation(testRel(1))
	begin := encBegin(0x100, time.Now(), 1)
	cases := map[string][][]byte{
		"insert outside txn":      {rel, encInsert(1, []Col{text("1"), null})},
		"unknown relation":        {begin, encInsert(2, []Col{text("1")})},
		"column count":            {begin, rel, encInsert(1, []Col{text("1")})},
		"nested begin":            {begin, begin},
		"commit outside":          {encCommit(0x100, 0x130, time.Now())},
		"commit mismatch":         {begin, encCommit(0x200, 0x230, time.Now())},
		"truncate outside":        {rel, encTruncate(0, 1)},
		"truncate unknown":        {begin, encTruncate(0, 5)},
		"stream start (proto v2)": {{'S', 0, 0, 0, 1, 0}},
		"empty":                   {{}},
		"short begin":             {begin[:10]},
		"delete without tuple":    {begin, rel, {'D', 0, 0, 0, 1}},
		"huge truncate count":     {begin, {'T', 0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0, 1}},
		"message past end":        {encMessage(false, 1, "p", []byte("abc"))[:17]},
		"text past end":           {begin, rel, encInsert(1, []Col{text("1"), text("long")})[:15]},
		"bad column kind":         {begin, rel, {'I', 0, 0, 0, 1, 'N', 0, 1, 'x'}},
		"update missing N":        {begin, rel, encUpdate(1, OldKey, []Col{text("1"), null}, nil)[:14]},
		"relation no terminator":  {{'R', 0, 0, 0, 1, 'p', 'u', 'b'}},
		"origin without name":     {{'O', 0, 0, 0, 0, 0, 0, 0, 1}},
	}
	for name, msgs := range cases {
		err := feed(newDecoder(0, nil), msgs...)
		if !errors.Is(err, ErrProtocol) {
			t.Errorf("%s: error %v, want ErrProtocol", name, err)
		} else if strings.Contains(err.Error(), "\n") {
			t.Errorf("%s: multi-line message %q", name, err)
		}
	}
}

func TestRelationEqual(t *testing.T) {
	a, b := testRel(1), testRel(1)
	if !a.Equal(b) || (*Relation)(nil).Equal(a) || !(*Relation)(nil).Equal(nil) {
		t.Fatal("Equal basics")
	}
	b.Columns[1].TypeMod = 10
	if a.Equal(b) {
		t.Fatal("type modifier change not seen")
	}
	b = testRel(1)
	b.Name = "renamed"
	if a.Equal(b) {
		t.Fatal("rename not seen")
	}
}

// BenchmarkDecoderInsert measures decoding of single-row insert transactions
// of a 2-column table (begin, insert, commit per transaction).
func BenchmarkDecoderInsert(b *testing.B) {
	at := time.Now()
	d := newDecoder(0, []*Relation{testRel(1)})
	begin, ins, commit := encBegin(0x100, at, 1), encInsert(1, []Col{text("12345"), text("a name of some length")}), encCommit(0x100, 0x130, at)
	b.SetBytes(int64(len(begin) + len(ins) + len(commit)))
	b.ReportAllocs()
	for b.Loop() {
		_ = d.message(0x10, begin)
		_ = d.message(0x20, ins)
		_ = d.message(0x30, commit)
		d.takeOut()
	}
}

// TestDecoderKeepsNoHugeValue: a 1 MiB value is decoded whole, and
// neither the decoder's value arena nor its column slice, which live as
// long as the stream, keep it (it did: the arena's next chunk was the value, kept until
// another value arrived — on an idle stream, for good).
func TestDecoderKeepsNoHugeValue(t *testing.T) {
	d := newDecoder(0, []*Relation{testRel(1)})
	huge := strings.Repeat("v", 1<<20)
	if err := feed(d, encBegin(0x900, time.Now(), 1), encInsert(1, []Col{text("1"), text(huge)}),
		encCommit(0x900, 0x930, time.Now())); err != nil {
		t.Fatal(err)
	}
	var got []Change
	for _, s := range d.takeOut() {
		got = append(got, s.changes...)
	}
	if len(got) != 1 || string(got[0].New.Columns[1].Data) != huge {
		t.Fatalf("decoded %d changes, want the insert with its 1 MiB value", len(got))
	}
	if c := cap(d.values); c > valueChunk {
		t.Errorf("the decoder's value arena holds %d KiB, want ≤ one %d KiB chunk", c>>10, valueChunk>>10)
	}
	for _, c := range d.cols[:cap(d.cols)] {
		if len(c.Data) > valueChunk {
			t.Errorf("the decoder's column slice still points to the %d KiB value", len(c.Data)>>10)
		}
	}
}
