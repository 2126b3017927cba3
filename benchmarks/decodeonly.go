package benchmarks

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
)

// decodeOnly is P3's baseline: a pglogrepl consumer that does nothing but
// receive and parse pgoutput messages — what any consumer of the slot must
// at least do, so its rate is the ceiling of logical decoding plus the
// walsender on this machine (pg_recvlogical's equivalent).
type decodeOnly struct {
	conn *pgconn.PgConn
	slot string
}

// newDecodeOnly opens a replication connection and creates a temporary
// pgoutput slot on it at the current WAL position: changes made from now on
// are what consume later reads.
func newDecodeOnly(ctx context.Context, uri, slot string) (*decodeOnly, error) {
	conn, err := pgconn.Connect(ctx, uri+"&replication=database")
	if err != nil {
		return nil, fmt.Errorf("decode-only consumer: connect: %w", err)
	}
	_, err = pglogrepl.CreateReplicationSlot(ctx, conn, slot, "pgoutput",
		pglogrepl.CreateReplicationSlotOptions{Temporary: true, Mode: pglogrepl.LogicalReplication})
	if err != nil {
		conn.Close(context.WithoutCancel(ctx))
		return nil, fmt.Errorf("decode-only consumer: create slot: %w", err)
	}
	return &decodeOnly{conn: conn, slot: slot}, nil
}

// consume streams from the slot until it has parsed updates UPDATE
// messages, acknowledging as it goes, and returns how long that took from
// START_REPLICATION on, and how long until the first UPDATE arrived (for
// one large transaction: the walsender decodes all of it first).
func (d *decodeOnly) consume(ctx context.Context, publication string, updates int64) (total, first time.Duration, err error) {
	start := time.Now()
	if err := d.start(ctx, publication); err != nil {
		return 0, 0, err
	}
	var seen int64
	var last pglogrepl.LSN
	for seen < updates {
		m, err := d.next(ctx, last)
		if err != nil {
			return 0, 0, fmt.Errorf("decode-only consumer: after %d updates: %w", seen, err)
		}
		switch m := m.(type) {
		case *pglogrepl.UpdateMessage:
			if seen == 0 {
				first = time.Since(start)
			}
			seen++
		case *pglogrepl.CommitMessage:
			last = m.TransactionEndLSN
		}
	}
	return time.Since(start), first, nil
}

// start sends START_REPLICATION for the slot from its position on.
func (d *decodeOnly) start(ctx context.Context, publication string) error {
	err := pglogrepl.StartReplication(ctx, d.conn, d.slot, 0, pglogrepl.StartReplicationOptions{
		PluginArgs: []string{"proto_version '1'", "publication_names '" + publication + "'"}})
	if err != nil {
		return fmt.Errorf("decode-only consumer: start: %w", err)
	}
	return nil
}

// next receives until the next pgoutput message and parses it, answering
// the keepalives that ask for a reply with the position last.
func (d *decodeOnly) next(ctx context.Context, last pglogrepl.LSN) (pglogrepl.Message, error) {
	for {
		msg, err := d.conn.ReceiveMessage(ctx)
		if err != nil {
			return nil, fmt.Errorf("receive: %w", err)
		}
		cd, ok := msg.(*pgproto3.CopyData)
		if !ok || len(cd.Data) == 0 {
			continue
		}
		switch cd.Data[0] {
		case pglogrepl.PrimaryKeepaliveMessageByteID:
			ka, err := pglogrepl.ParsePrimaryKeepaliveMessage(cd.Data[1:])
			if err == nil && ka.ReplyRequested {
				err = pglogrepl.SendStandbyStatusUpdate(ctx, d.conn, pglogrepl.StandbyStatusUpdate{WALWritePosition: last})
			}
			if err != nil {
				return nil, fmt.Errorf("keepalive: %w", err)
			}
		case pglogrepl.XLogDataByteID:
			xld, err := pglogrepl.ParseXLogData(cd.Data[1:])
			if err != nil {
				return nil, err
			}
			m, err := pglogrepl.Parse(xld.WALData)
			if err != nil {
				return nil, fmt.Errorf("parse: %w", err)
			}
			return m, nil
		}
	}
}

// Close ends the connection, which drops the temporary slot.
func (d *decodeOnly) Close(ctx context.Context) { d.conn.Close(ctx) }
