package bucketstore

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/syncpipe/syncpipe/model"
)

// previous is a row's stored state before the batch. Its arrays and data
// are spans of the writer's previous-state arena (prevState.arena), in
// PostgreSQL's binary form, so that reading a batch's stored state makes
// no allocation per row: most rows' state is only compared with the new
// one, and only the memberships a row left are ever turned into strings.
type previous struct {
	found   bool
	tid     pgtype.TID // where the row is, to delete it without an index probe
	buckets span       // v1: text[] of membership elements (copyBuf.elemMember); v2, v3: packed (appendMembers)
	lookups span       // bytea[] of lookup keys; empty span: NULL
	data    span       // bytea; NULL and empty alike (as Change.RowData)
	// unchanged is set by the write once it found the row's new state
	// the same (prevState.same): it then has nothing to remove.
	unchanged bool
}

// span is a slice of the arena: [start, end); zero is empty.
type span struct{ start, end int32 }

// prevState is a stream write's previous state of its rows, indexed like
// the batch's collapsed changes.
type prevState struct {
	rows  []previous
	arena []byte
	// at, when set, maps a probe's ordinals to rows: the probe read the
	// rows at these positions only (forget).
	at []int32
	// packed: the buckets are packed memberships (a bytea column: v2,
	// v3), not v1's array of elements; compact: in v3's form. scanPrevious
	// sets them from the group's layout.
	packed, compact bool
}

// trim drops an arena grown beyond limit bytes (see keptBufBytes).
func (s *prevState) trim(limit int) {
	if cap(s.arena) > limit {
		s.arena = nil
	}
}

// reset makes room for n rows, none found.
func (s *prevState) reset(n int) {
	s.rows = append(s.rows[:0], make([]previous, n)...)
	s.arena = s.arena[:0]
	s.at = nil
}

// forget drops what s holds of the rows at pos, for a probe that reads
// them again (the next add calls number them in pos order).
func (s *prevState) forget(pos []int32) {
	for _, i := range pos {
		s.rows[i] = previous{}
	}
	s.at = pos
}

// append takes the rows of part (a slice of the batch read apart) as
// rows [at, at+len(part.rows)) of s, copying their bytes into s's arena.
func (s *prevState) append(at int, part *prevState) {
	off := int32(len(s.arena))
	s.arena = append(s.arena, part.arena...)
	s.packed, s.compact = part.packed, part.compact
	shift := func(sp span) span { return span{sp.start + off, sp.end + off} }
	for j, r := range part.rows {
		r.buckets, r.lookups, r.data = shift(r.buckets), shift(r.lookups), shift(r.data)
		s.rows[at+j] = r
	}
}

func (s *prevState) bytes(sp span) []byte { return s.arena[sp.start:sp.end] }

// keep copies b into the arena.
func (s *prevState) keep(b []byte) span {
	start := int32(len(s.arena))
	s.arena = append(s.arena, b...)
	return span{start, int32(len(s.arena))}
}

// currentProbe reads the current_data rows of group $1 named by the
// (table, key) pairs in $2 and $3 (v3: and the key orders in $4) as c,
// with k the pair and k.i its 1-based position: one primary key probe
// per pair. LATERAL … OFFSET 0
// keeps it that way: joined plainly, the planner (which guesses the size
// of unnest) may instead hash every stored row of the group and spill to
// disk, paying for the whole group per batch.
// It is a template (see newLayout).
const currentProbe = `
	FROM {probe}
	CROSS JOIN LATERAL (
		SELECT ctid, buckets, lookups, data FROM {cur}
		WHERE group_id = $1 AND {probed}
		OFFSET 0) c`

// loadPreviousSQL reads the stored state of a batch's rows.
const loadPreviousSQL = `SELECT k.i, c.ctid, c.buckets, c.lookups, c.data` + currentProbe

// rowDataSQL reads the row data of the rows that have some.
const rowDataSQL = `SELECT k.i, c.data` + currentProbe + ` WHERE c.data IS NOT NULL`

// probeRows are the table ids, keys and key orders of the rows ref
// names, for currentProbe (see layout.probeArgs).
func probeRows[T any](rows []T, ref func(T) (string, [16]byte, int32)) ([]string, []pgtype.UUID, []int32) {
	tables := make([]string, len(rows))
	keys := make([]pgtype.UUID, len(rows))
	orders := make([]int32, len(rows))
	for i, r := range rows {
		var k [16]byte
		tables[i], k, orders[i] = ref(r)
		keys[i] = pgtype.UUID{Bytes: k, Valid: true}
	}
	return tables, keys, orders
}

var errPreviousFormat = errors.New("unexpected format of stored row state")

// scanPrevious reads the stored state of a batch's rows (loadPreviousSQL
// of layout l) into s, which reset sized for the batch. It takes no row locks: the
// transaction holds the group's stream lock (see streamLockClass), and no
// other writer changes stored rows of a streaming group — snapshot writes
// only insert, and an insert racing ours fails on the primary key and is
// retried.
//
// It reads the columns' binary forms as sent rather than through Scan,
// which would allocate a string per bucket and a slice per value of every
// row of the batch.
func scanPrevious(rows pgx.Rows, s *prevState, l *layout) error {
	fds := rows.FieldDescriptions()
	for _, fd := range fds {
		if fd.Format != pgx.BinaryFormatCode {
			rows.Close()
			return fmt.Errorf("load previous row state: %w: column %s in text", errPreviousFormat, fd.Name)
		}
	}
	s.packed, s.compact = l.interned, l.compactMembers
	if len(fds) > 2 && (fds[2].DataTypeOID == oidBytea) != s.packed {
		rows.Close()
		return fmt.Errorf("load previous row state: %w: memberships of type %d in storage version %d", errPreviousFormat, fds[2].DataTypeOID, l.version)
	}
	for rows.Next() {
		if err := s.add(rows.RawValues()); err != nil {
			rows.Close()
			return fmt.Errorf("load previous row state: %w", err)
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("load previous row state: %w", err)
	}
	return nil
}

// add records one row of loadPreviousSQL: ordinal, ctid, buckets,
// lookups, data.
func (s *prevState) add(v [][]byte) error {
	if len(v) != 5 || len(v[0]) != 8 || len(v[1]) != 6 || v[2] == nil {
		return errPreviousFormat
	}
	i := int64(binary.BigEndian.Uint64(v[0])) - 1
	if s.at != nil {
		if i < 0 || i >= int64(len(s.at)) {
			return fmt.Errorf("%w: ordinal %d of %d", errPreviousFormat, i+1, len(s.at))
		}
		i = int64(s.at[i])
	}
	if i < 0 || i >= int64(len(s.rows)) {
		return fmt.Errorf("%w: ordinal %d of %d", errPreviousFormat, i+1, len(s.rows))
	}
	if s.packed {
		if err := checkMembers(v[2], s.compact); err != nil {
			return err
		}
	} else if _, err := arrayLen(v[2]); err != nil {
		return err
	}
	p := &s.rows[i]
	p.found = true
	p.tid = pgtype.TID{BlockNumber: binary.BigEndian.Uint32(v[1]), OffsetNumber: binary.BigEndian.Uint16(v[1][4:]), Valid: true}
	p.buckets = s.keep(v[2])
	p.lookups, p.data = span{}, span{}
	if v[3] != nil {
		if _, err := arrayLen(v[3]); err != nil {
			return err
		}
		p.lookups = s.keep(v[3])
	}
	if v[4] != nil {
		p.data = s.keep(v[4])
	}
	return nil
}

// arrayLen checks a one-dimensional binary array (or an empty one) and
// returns its element count.
func arrayLen(a []byte) (int, error) {
	if len(a) < 12 {
		return 0, fmt.Errorf("%w: array of %d bytes", errPreviousFormat, len(a))
	}
	switch binary.BigEndian.Uint32(a) {
	case 0:
		return 0, nil
	case 1:
		if len(a) < 20 {
			return 0, fmt.Errorf("%w: array of %d bytes", errPreviousFormat, len(a))
		}
		n := int(int32(binary.BigEndian.Uint32(a[12:])))
		if n < 0 {
			return 0, fmt.Errorf("%w: array of %d elements", errPreviousFormat, n)
		}
		// Walk it once, so that elems never reads past its end.
		p := 20
		for range n {
			if p+4 > len(a) {
				return 0, fmt.Errorf("%w: array cut short", errPreviousFormat)
			}
			l := int(int32(binary.BigEndian.Uint32(a[p:])))
			p += 4
			if l < 0 || p+l > len(a) {
				return 0, fmt.Errorf("%w: array element of %d bytes", errPreviousFormat, l)
			}
			p += l
		}
		return n, nil
	default:
		return 0, fmt.Errorf("%w: array of %d dimensions", errPreviousFormat, binary.BigEndian.Uint32(a))
	}
}

// elems calls f with each element of a binary array arrayLen accepted.
func elems(a []byte, f func(e []byte) bool) {
	if len(a) < 20 || binary.BigEndian.Uint32(a) != 1 {
		return
	}
	n := int(binary.BigEndian.Uint32(a[12:]))
	p := 20
	for range n {
		l := int(binary.BigEndian.Uint32(a[p:]))
		p += 4
		if !f(a[p : p+l]) {
			return
		}
		p += l
	}
}

// count is the element count of a binary array arrayLen accepted.
func count(a []byte) int {
	if len(a) < 20 || binary.BigEndian.Uint32(a) != 1 {
		return 0
	}
	return int(binary.BigEndian.Uint32(a[12:]))
}

// same reports whether c leaves the stored row p as it is: same bucket
// memberships, lookups and row data. Most updates only change the data of
// the ops (a todo completed), so their current row need not be rewritten.
// ids are the bucket ids of c's PUTs in a v2 group (nil in v1: see
// hasPut).
func (s *prevState) same(p *previous, c *model.Change, ids map[string]int64) bool {
	lookups := s.bytes(p.lookups)
	if c.Kind != model.Upsert || s.memberCount(p) != len(c.Puts) || count(lookups) != len(c.Lookups) ||
		!bytes.Equal(s.bytes(p.data), c.RowData) {
		return false
	}
	same := true
	if s.packed {
		forMembers(s.bytes(p.buckets), s.compact, func(m *member) bool { same = hasPutMember(c.Puts, c.Table.Name, m, ids); return same })
	} else {
		elems(s.bytes(p.buckets), func(m []byte) bool { same = hasPut(c.Puts, m); return same })
	}
	if !same {
		return false
	}
	elems(lookups, func(k []byte) bool { same = hasLookup(c.Lookups, k); return same })
	return same
}

// memberCount is the number of buckets the stored row p is in.
func (s *prevState) memberCount(p *previous) int {
	if s.packed {
		return countMembers(s.bytes(p.buckets), s.compact)
	}
	return count(s.bytes(p.buckets))
}

// hasPut reports whether puts contains the v1 membership element m
// (copyBuf.elemMember).
func hasPut(puts []model.Put, m []byte) bool {
	for i := range puts {
		p := &puts[i]
		nb, nt := len(p.Bucket), len(p.ObjectType)
		// string(m[…]) == s compares without allocating.
		if len(m) == nb+nt+len(p.ObjectID)+2 &&
			string(m[:nb]) == p.Bucket && m[nb] == memberSep &&
			string(m[nb+1:nb+1+nt]) == p.ObjectType && m[nb+1+nt] == memberSep &&
			string(m[nb+2+nt:]) == p.ObjectID {
			return true
		}
	}
	return false
}

// hasPutMember reports whether puts of a row of table (its name), whose
// bucket ids ids holds, contain the v2 or v3 membership m.
func hasPutMember(puts []model.Put, table string, m *member, ids map[string]int64) bool {
	for i := range puts {
		p := &puts[i]
		if ids[p.Bucket] == m.bucket && m.sameObject(table, p.ObjectType, p.ObjectID) {
			return true
		}
	}
	return false
}

func hasLookup(lookups []model.Lookup, key []byte) bool {
	for i := range lookups {
		if bytes.Equal(lookups[i].Key, key) {
			return true
		}
	}
	return false
}

// splitMember splits a membership element written by copyBuf.elemMember.
func splitMember(m []byte) (bucket, objectType, objectID string) {
	b, rest, _ := bytes.Cut(m, []byte{memberSep})
	t, id, _ := bytes.Cut(rest, []byte{memberSep})
	return string(b), string(t), string(id)
}
