// Package logrepl is the protocol side of syncpipe's PostgreSQL streaming:
// replication slots, the pgoutput (protocol version 1) reader with its
// relation cache, batching of whole transactions, acknowledgement through
// standby status updates, the heartbeat, and one-line actionable errors. It
// knows nothing about tables' values or storage; sources/postgres builds on
// it. It needs PostgreSQL 14 or later (the pgoutput "messages" option).
//
// # Lifecycle
//
//	conn, _ := logrepl.Connect(ctx, uri)                  // replication=database, TimeZone=UTC
//	start, _ := logrepl.CreateSlot(ctx, conn, "syncpipe_1") // before the snapshot; existing slot: its confirmed_flush_lsn
//	s, _ := logrepl.Start(ctx, conn, logrepl.Config{Slot: "syncpipe_1", StartLSN: durableLSN})
//	for {
//		b, err := s.Next(ctx, limits) // whole transactions in commit order
//		// ... write b durably ...
//		s.Ack(b.EndLSN)               // only after b (and all before it) is durable
//	}
//	s.Close(ctx)                      // final status update with the acked LSN
//
// # Who calls what
//
//   - Start launches one reader goroutine that owns the connection until
//     Close returns. It decodes ahead of Next (bounded by Config.BufferBytes),
//     answers keepalives, and sends a standby status update every
//     Config.StatusInterval and whenever the server asks — also while the
//     caller is busy writing, so a slow sink never trips wal_sender_timeout.
//   - Next is called by one goroutine at a time.
//   - Ack and the read-only accessors may be called from any goroutine.
//   - Close may be called from any goroutine, once or more.
//
// # Acknowledgement
//
// The position reported to the server as written, flushed and applied is
// always the last Ack'ed LSN, never what was merely received; a slot's
// confirmed_flush_lsn therefore never passes what the caller stored.
// Acknowledge Batch.EndLSN — the end LSN of the last transaction (pgoutput
// TransactionEndLSN; acknowledging the commit LSN would replay the
// transaction), or an idle position after it — only after that batch and
// every earlier one is durable. Restarting with Config.StartLSN set to the
// last acknowledged EndLSN delivers every later transaction and none before.
// Partial batches (one huge transaction split) carry EndLSN 0: never
// acknowledge mid-transaction.
//
// # Idle slots
//
// A slot only advances when its consumer acknowledges. When nothing is in
// flight, the server's keepalive WAL end and syncpipe heartbeat messages
// (Heartbeat, prefix "syncpipe") are returned as empty batches with an
// EndLSN, so an idle or unpublished-only database does not retain WAL.
//
// # Schema changes
//
// pgoutput describes a table (Relation message) before its first change in
// a session and again after any change of its definition. A description
// that differs from the cached one (columns, types, replica identity, name)
// is delivered as a RelationChanged change, in the transaction, before the
// first change that uses the new shape; the caller re-snapshots that table.
// A DDL not followed by any change of that table is invisible until one is.
package logrepl
