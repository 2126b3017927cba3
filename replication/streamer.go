package replication

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/syncpipe/syncpipe/sinks/bucketstore"
	"github.com/syncpipe/syncpipe/sources/postgres"
	"github.com/syncpipe/syncpipe/sources/postgres/logrepl"
)

// streamPos is the progress token of the stream pipeline: what the batch's
// write records in storage.
type streamPos struct {
	bucketstore.StreamProgress
}

// setStreamPos records where a batch leaves the stream
// (postgres.StreamReaderConfig.Position).
func setStreamPos(p *streamPos, at postgres.StreamPosition) {
	p.LSN, p.TxnLSN, p.TxnChanges = at.LSN, at.TxnLSN, at.TxnChanges
}

// streamer is what the group's stream reader (postgres.StreamReader) asks
// of bucket storage and the assembly: the stored shape of every table
// (loaded from storage at every stream start, kept in step with what this
// stream writes), re-shaping a table whose shape changed (recording the
// new shape with the batch, re-reading the table: resnapshot.go), and the
// periodic catalog check.
type streamer struct {
	r    *Replicator
	g    *group
	side *pgx.Conn // normal source connection: catalog reads, re-reads' positions

	// from is the stored position the stream resumes from.
	from   bucketstore.StreamProgress
	read   []*postgres.ReadTable          // the reader's tables
	tables map[*postgres.ReadTable]*table // the group's table of each
	rd     *postgres.StreamReader[streamPos]

	resnaps []*resnap // tables being re-read, first one active
	lim     logrepl.BatchLimits
	// fence is the stream unit's lease, carried by every storage write.
	fence bucketstore.Fence
	lag   *lagTracker // replication lag metric (metrics.go)
}

// newStreamer loads what storage records about the group's tables (shape,
// relation, re-reads in progress) and binds the rules to it, with
// decoding details from the source catalog.
func (r *Replicator) newStreamer(ctx context.Context, g *group, side *pgx.Conn, pos bucketstore.StreamProgress) (*streamer, error) {
	s := &streamer{r: r, g: g, side: side, from: pos, tables: map[*postgres.ReadTable]*table{}}
	stored, err := r.sourceTables.SourceTables(ctx, g.g.ID)
	if err != nil {
		return nil, err
	}
	byID := make(map[string]bucketstore.SourceTable, len(stored))
	for _, st := range stored {
		byID[st.ID] = st
	}
	var names []string
	for _, t := range g.tables {
		names = append(names, t.info.QualifiedName())
	}
	infos, err := discover(ctx, side, names, g.rules)
	if errors.Is(err, postgres.ErrTableNotFound) {
		return nil, fmt.Errorf("%w: %w", err, errTableAway)
	}
	if err != nil {
		return nil, err
	}
	for _, t := range g.tables {
		st, ok := byID[t.stored.ID]
		if !ok || st.Shape == nil {
			return nil, fmt.Errorf("table %s of group %d has no stored shape", t.info.QualifiedName(), g.g.ID)
		}
		sh, err := parseShape(st.Shape)
		if err != nil {
			return nil, err
		}
		info := t.info
		for _, in := range infos {
			if in.OID == t.info.OID || in.Schema == t.info.Schema && in.Name == t.info.Name {
				info = in
			}
		}
		lay, err := newLayout(&t.stored.Table, g, sh, info)
		if err != nil {
			return nil, err
		}
		// The stored relation, not the catalog's: if another table has
		// the name now, the catalog check re-reads it once the stream
		// has passed what the old one's changes it still delivers.
		rt := &postgres.ReadTable{Name: info.Schema + "." + info.Name, OID: st.RelationID, Shape: sh, Table: lay}
		s.read = append(s.read, rt)
		s.tables[rt] = t
		if rp := st.Resnapshot; rp != nil {
			s.startResnap(rt, rp.LastKey, rp.Rows)
		}
	}
	return s, nil
}

// start makes the stream reader of st.
func (s *streamer) start(st *logrepl.Stream) {
	rs := s.r.cfg.Replication.Stream
	s.rd = postgres.NewStreamReader(st, postgres.StreamReaderConfig[streamPos]{
		Limits:   s.lim,
		From:     postgres.StreamPosition{LSN: s.from.LSN, TxnLSN: s.from.TxnLSN, TxnChanges: s.from.TxnChanges},
		Position: setStreamPos,
		Tables:   s.read, Reshape: s,
		IdleInterval: rs.IdleCommitInterval,
		Aside:        s,
		Catalog:      s, CatalogInterval: rs.SchemaCheckInterval,
		Received: s.lag.received,
	})
}

// close releases the re-reads' connections.
func (s *streamer) close() {
	for _, rs := range s.resnaps {
		rs.close()
	}
}
