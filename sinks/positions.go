package sinks

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
)

// Positions is the committed progress a sink keeps: the stream's position
// and the last position of every snapshot range. It is a value: With
// returns a changed copy, so that a sink can write the copy out first and
// keep it only once that succeeded — Resume must never return a position
// a crash could take back. FileProgress and the jsonl sink keep theirs in
// a Positions; a sink with a progress file of its own can too.
type Positions struct {
	stream *Position
	ranges map[rangeKey]Position
}

// rangeKey identifies a snapshot range.
type rangeKey struct {
	table   string
	rangeNo int
}

// Get returns the position of snapshot range rangeNo of table or, when
// table is "", of the stream; ok is false when there is none. The position
// is a copy the caller may change.
func (ps Positions) Get(table string, rangeNo int) (pos Position, ok bool) {
	if table == "" {
		if ps.stream == nil {
			return Position{}, false
		}
		pos = *ps.stream
	} else if pos, ok = ps.ranges[rangeKey{table, rangeNo}]; !ok {
		return Position{}, false
	}
	pos.LastKey = slices.Clone(pos.LastKey)
	return pos, true
}

// With returns ps with pos as the position of its range (or of the stream
// for a stream position). ps itself is unchanged.
func (ps Positions) With(pos Position) Positions {
	pos.LastKey = slices.Clone(pos.LastKey) // the source may reuse its slice
	if pos.IsStream() {
		ps.stream = &pos
		return ps
	}
	ps.ranges = maps.Clone(ps.ranges)
	if ps.ranges == nil {
		ps.ranges = map[rangeKey]Position{}
	}
	ps.ranges[rangeKey{pos.Table, pos.Range}] = pos
	return ps
}

// PositionRecords are Positions as a progress file stores them (JSON),
// kept apart from Position so that the file's field names stay stable if
// the Go type changes. Embed it in a file's format struct.
type PositionRecords struct {
	Stream *PositionRecord  `json:"stream,omitempty"`
	Ranges []PositionRecord `json:"ranges"`
}

// PositionRecord is one Position in a progress file.
type PositionRecord struct {
	Table      string   `json:"table,omitempty"`
	Range      int      `json:"range"`
	LastKey    []string `json:"last_key"`
	RowsDone   int64    `json:"rows_done"`
	Done       bool     `json:"done"`
	LSN        uint64   `json:"lsn"`
	TxnLSN     uint64   `json:"txn_lsn,omitempty"`
	TxnChanges int64    `json:"txn_changes,omitempty"`
}

func recordOf(p Position) PositionRecord {
	//lint:ignore S1016 field by field on purpose: the file format is kept apart from Position (see PositionRecords)
	return PositionRecord{Table: p.Table, Range: p.Range, LastKey: p.LastKey, RowsDone: p.RowsDone, Done: p.Done,
		LSN: p.LSN, TxnLSN: p.TxnLSN, TxnChanges: p.TxnChanges}
}

func (r PositionRecord) position() Position {
	//lint:ignore S1016 field by field on purpose: the file format is kept apart from Position (see PositionRecords)
	return Position{Table: r.Table, Range: r.Range, LastKey: r.LastKey, RowsDone: r.RowsDone, Done: r.Done,
		LSN: r.LSN, TxnLSN: r.TxnLSN, TxnChanges: r.TxnChanges}
}

// Records returns ps for a progress file, ranges sorted by table and range
// so that the file reads well and compares between commits.
func (ps Positions) Records() PositionRecords {
	rs := PositionRecords{Ranges: make([]PositionRecord, 0, len(ps.ranges))}
	if ps.stream != nil {
		r := recordOf(*ps.stream)
		rs.Stream = &r
	}
	for _, pos := range ps.ranges {
		rs.Ranges = append(rs.Ranges, recordOf(pos))
	}
	slices.SortFunc(rs.Ranges, func(a, b PositionRecord) int {
		return cmp.Or(cmp.Compare(a.Table, b.Table), cmp.Compare(a.Range, b.Range))
	})
	return rs
}

// Positions returns the positions rs records; a range without a table is
// an error (the file was not written by Records).
func (rs PositionRecords) Positions() (Positions, error) {
	var ps Positions
	if rs.Stream != nil {
		pos := rs.Stream.position()
		ps.stream = &pos
	}
	for _, r := range rs.Ranges {
		if r.Table == "" {
			return Positions{}, fmt.Errorf("range %d without a table", r.Range)
		}
		if ps.ranges == nil {
			ps.ranges = map[rangeKey]Position{}
		}
		ps.ranges[rangeKey{r.Table, r.Range}] = r.position()
	}
	return ps, nil
}
