package logrepl

import (
	"fmt"

	"github.com/jackc/pglogrepl"
)

// HeartbeatPrefix is the logical message prefix of syncpipe's heartbeat
// (see Heartbeat). A non-transactional message with this prefix that arrives
// outside a transaction is a position the stream may acknowledge.
const HeartbeatPrefix = "syncpipe"

// Default segment bounds: the reader hands a transaction over to Next in
// segments of at most this many changes or bytes, so a huge transaction
// never has to be held whole (see Batch.Partial).
const (
	defaultSegmentChanges = 1024
	defaultSegmentBytes   = 1 << 20
)

// segment is one ordered unit of decoded output, handed from the reader
// goroutine to Next. It is either a run of changes of one transaction (txn
// != nil) or a bare position that may be acknowledged (pos != 0).
type segment struct {
	txn     *Txn // header: Xid, BeginLSN, CommitLSN, CommitTime (never modified)
	first   bool // the transaction's first segment
	last    bool // the transaction's last segment; endLSN is set
	endLSN  LSN
	changes []Change
	bytes   int
	pos     LSN
	// prompt: a position that something waits to see recorded (Batch.Prompt).
	prompt bool
}

// decoder turns pgoutput messages into segments. It owns the relation
// cache. It does no I/O and is used by one goroutine (the stream's reader),
// which makes it the unit the fuzz test drives.
type decoder struct {
	rels       map[uint32]*Relation
	skipBefore LSN      // transactions committed before this were acknowledged already
	pendingRel []Change // RelationChanged not yet placed in a delivered transaction

	txn  *Txn     // transaction in progress, nil outside one
	skip bool     // txn is dropped (commit before skipBefore)
	seg  *segment // open segment of txn

	segChanges, segBytes int
	// lastSeg is the change count of the last segment flushed: a new
	// segment's slice starts at that capacity (a stream's transactions
	// tend to be alike), instead of growing, and copying, from nothing.
	lastSeg int

	out      []segment // decoded, not yet handed over
	outBytes int

	values []byte // arena chunk for column values (see dml.go)
	cols   []Col  // shared column slice (see dml.go)
}

func newDecoder(skipBefore LSN, seed []*Relation) *decoder {
	d := &decoder{
		rels:       make(map[uint32]*Relation, len(seed)),
		skipBefore: skipBefore,
		segChanges: defaultSegmentChanges,
		segBytes:   defaultSegmentBytes,
	}
	for _, r := range seed {
		if r != nil {
			d.rels[r.ID] = r
		}
	}
	return d
}

// takeOut returns the decoded segments and forgets them.
func (d *decoder) takeOut() []segment {
	out := d.out
	d.out, d.outBytes = nil, 0
	return out
}

func protocolError(format string, args ...any) error {
	return &Error{Kind: ErrProtocol, Msg: "pgoutput protocol error: " + fmt.Sprintf(format, args...) +
		": reconnecting; report it if it persists"}
}

// malformed is protocolError for a message that could not be read, with
// the reading error as its cause.
func malformed(err error) error {
	return &Error{Kind: ErrProtocol, Msg: "pgoutput protocol error: " + err.Error() +
		": reconnecting; report it if it persists", Err: err}
}

// position records an acknowledgeable position seen outside a transaction
// (keepalive WAL end, heartbeat message); prompt marks one that something
// waits for (see Batch.Prompt). Consecutive positions collapse.
func (d *decoder) position(lsn LSN, prompt bool) {
	if d.txn != nil || lsn == 0 {
		return
	}
	if n := len(d.out); n > 0 && d.out[n-1].txn == nil {
		d.out[n-1].pos = max(d.out[n-1].pos, lsn)
		d.out[n-1].prompt = d.out[n-1].prompt || prompt
		return
	}
	d.out = append(d.out, segment{pos: lsn, prompt: prompt})
}

// message decodes one pgoutput message; walStart is the WAL position of its
// XLogData frame. Tuple data is copied out of data (into the decoder's
// arena, see dml.go), so the caller may reuse data afterwards.
func (d *decoder) message(walStart LSN, data []byte) error {
	if len(data) > 0 && (data[0] == 'I' || data[0] == 'U' || data[0] == 'D') {
		return d.dmlMessage(walStart, data) // the hot path, see dml.go
	}
	if err := checkFrame(data); err != nil {
		return malformed(err)
	}
	msg, err := pglogrepl.Parse(data)
	if err != nil {
		return malformed(err)
	}
	size := len(data)
	switch m := msg.(type) {
	case *pglogrepl.BeginMessage:
		if d.txn != nil {
			return protocolError("BEGIN of xid %d inside transaction %d", m.Xid, d.txn.Xid)
		}
		d.txn = &Txn{Xid: m.Xid, BeginLSN: walStart, CommitLSN: m.FinalLSN, CommitTime: m.CommitTime}
		d.skip = m.FinalLSN < d.skipBefore
		d.seg = &segment{txn: d.txn, first: true, bytes: size, changes: d.newChanges()}
		if !d.skip && len(d.pendingRel) > 0 {
			d.seg.changes = append(d.seg.changes, d.pendingRel...)
			d.pendingRel = nil
		}
	case *pglogrepl.CommitMessage:
		if d.txn == nil {
			return protocolError("COMMIT at %s outside a transaction", m.CommitLSN)
		}
		if m.CommitLSN != d.txn.CommitLSN {
			return protocolError("COMMIT at %s for a transaction that began with final LSN %s", m.CommitLSN, d.txn.CommitLSN)
		}
		if !d.skip {
			d.seg.last, d.seg.endLSN = true, m.TransactionEndLSN
			d.seg.bytes += size
			d.flush()
		}
		d.txn, d.seg, d.skip = nil, nil, false
	case *pglogrepl.RelationMessage:
		rel := relationFrom(m)
		prev := d.rels[rel.ID]
		d.rels[rel.ID] = rel
		if prev != nil && !prev.Equal(rel) {
			c := Change{Kind: RelationChanged, Relation: rel, Previous: prev}
			if d.txn != nil && !d.skip {
				d.add(c, size)
			} else {
				d.pendingRel = append(d.pendingRel, c)
			}
		}
	case *pglogrepl.TruncateMessage:
		if d.txn == nil {
			return protocolError("TRUNCATE outside a transaction")
		}
		c := Change{Kind: Truncate, LSN: walStart,
			TruncateCascade:         m.Option&pglogrepl.TruncateOptionCascade != 0,
			TruncateRestartIdentity: m.Option&pglogrepl.TruncateOptionRestartIdentity != 0}
		for _, id := range m.RelationIDs {
			rel := d.rels[id]
			if rel == nil {
				return protocolError("TRUNCATE of relation %d that was never described", id)
			}
			c.TruncateRelations = append(c.TruncateRelations, rel)
		}
		d.add(c, size)
	case *pglogrepl.LogicalDecodingMessage:
		// Transactional messages belong to their transaction, whose commit
		// is the position; only a standalone heartbeat is a position.
		if !m.Transactional && m.Prefix == HeartbeatPrefix {
			d.position(m.LSN, true)
		}
	default:
		// Type and Origin messages carry nothing this package uses.
	}
	return nil
}

// dml checks that a row change may be decoded now and returns its relation.
func (d *decoder) dml(what string, id uint32) (*Relation, error) {
	if d.txn == nil {
		return nil, protocolError("%s outside a transaction", what)
	}
	rel := d.rels[id]
	if rel == nil {
		return nil, protocolError("%s for relation %d that was never described", what, id)
	}
	return rel, nil
}

// add appends c to the open segment, handing the segment over when it is
// full. Changes of a skipped transaction are dropped.
func (d *decoder) add(c Change, size int) {
	if d.skip {
		return
	}
	d.seg.changes = append(d.seg.changes, c)
	d.seg.bytes += size
	if len(d.seg.changes) >= d.segChanges || d.seg.bytes >= d.segBytes {
		d.flush()
		d.seg = &segment{txn: d.txn, changes: d.newChanges()}
	}
}

// flush moves the open segment to out (unless it is an empty middle piece).
func (d *decoder) flush() {
	s := d.seg
	if !s.first && !s.last && len(s.changes) == 0 {
		return
	}
	d.out = append(d.out, *s)
	d.outBytes += s.bytes
	d.lastSeg = len(s.changes)
}

// newChanges returns an empty change slice for a new segment (see
// lastSeg); nil while transactions are empty or skipped.
func (d *decoder) newChanges() []Change {
	if d.lastSeg == 0 || d.skip {
		return nil
	}
	return make([]Change, 0, min(d.lastSeg, d.segChanges))
}

func relationFrom(m *pglogrepl.RelationMessage) *Relation {
	r := &Relation{ID: m.RelationID, Namespace: m.Namespace, Name: m.RelationName,
		ReplicaIdentity: m.ReplicaIdentity, Columns: make([]Column, len(m.Columns))}
	for i, c := range m.Columns {
		r.Columns[i] = Column{Name: c.Name, TypeOID: c.DataType, TypeMod: c.TypeModifier, Key: c.Flags&1 != 0}
	}
	return r
}
