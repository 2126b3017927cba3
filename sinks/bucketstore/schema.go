package bucketstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// migrations are applied in order, each once, in one transaction per
// version. Never edit a released migration: append a new one.
var migrations = []string{
	// 1: the initial schema.
	`
CREATE SEQUENCE op_id_seq AS bigint;

-- A group is one deployed sync rules version (a "replication group").
CREATE TABLE groups (
  id                   serial PRIMARY KEY,
  state                text NOT NULL DEFAULT 'PROCESSING'
                       CHECK (state IN ('PROCESSING', 'ACTIVE', 'STOP', 'TERMINATED')),
  rules                text NOT NULL,
  slot_name            text NOT NULL UNIQUE,
  snapshot_done        boolean NOT NULL DEFAULT false,
  snapshot_lsn         pg_lsn,
  stream_lsn           pg_lsn,       -- end LSN of the last committed stream batch
  last_checkpoint      bigint,
  last_checkpoint_lsn  pg_lsn,
  no_checkpoint_before pg_lsn,
  keepalive_op         bigint,
  last_error           text,
  last_error_at        timestamptz,
  last_keepalive_at    timestamptz,
  created_at           timestamptz NOT NULL DEFAULT now(),
  updated_at           timestamptz NOT NULL DEFAULT now()
);

-- One row per replicated source table per group. The id is part of every
-- REMOVE op's subkey, so it never changes for the table's life in the group.
CREATE TABLE source_tables (
  id                 text PRIMARY KEY,
  group_id           int NOT NULL REFERENCES groups (id),
  relation_id        oid NOT NULL,
  schema_name        text NOT NULL,
  table_name         text NOT NULL,
  replica_id_columns text[] NOT NULL,
  snapshot_done      boolean NOT NULL DEFAULT false,
  snapshot_lsn       pg_lsn,
  estimated_rows     bigint NOT NULL DEFAULT 0,
  UNIQUE (group_id, schema_name, table_name)
);

-- Snapshot progress per key range of a table: committed strictly in chunk
-- order, after the chunk's ops are durable.
CREATE TABLE snapshot_ranges (
  source_table_id text NOT NULL REFERENCES source_tables (id),
  range_no        int NOT NULL,
  lower_key       text[],          -- exclusive; NULL = table start
  upper_key       text[],          -- inclusive; NULL = table end
  last_key        text[],          -- last key of the last committed chunk
  rows_done       bigint NOT NULL DEFAULT 0,
  done            boolean NOT NULL DEFAULT false,
  PRIMARY KEY (source_table_id, range_no)
);

-- The current version of every replicated source row: which buckets and
-- parameter lookups it is in (so a change can REMOVE what it left), and its
-- data where the source may later omit unchanged TOASTed values.
CREATE TABLE current_data (
  group_id     int NOT NULL,
  source_table text NOT NULL,
  source_key   uuid NOT NULL,
  buckets      text[] NOT NULL,
  lookups      bytea[],
  data         bytea,
  PRIMARY KEY (group_id, source_table, source_key)
);

CREATE TABLE bucket_data (
  group_id     int NOT NULL,
  bucket_name  text NOT NULL,
  op_id        bigint NOT NULL,
  op           smallint NOT NULL,  -- 1 PUT, 2 REMOVE, 3 MOVE, 4 CLEAR
  source_table text,
  source_key   uuid,
  object_type  text,
  object_id    text,
  checksum     bigint NOT NULL,
  data         text,
  target_op    bigint,
  PRIMARY KEY (group_id, bucket_name, op_id)
);

-- Parameter lookup entries, versioned by op id: the newest entry per
-- (lookup, source row) at or below a checkpoint is the one in force.
CREATE TABLE bucket_parameters (
  id                bigint PRIMARY KEY,
  group_id          int NOT NULL,
  source_table      text NOT NULL,
  source_key        uuid NOT NULL,
  lookup            bytea NOT NULL,
  bucket_parameters text NOT NULL
);
CREATE INDEX bucket_parameters_lookup ON bucket_parameters (group_id, lookup, id DESC);
CREATE INDEX bucket_parameters_source ON bucket_parameters (group_id, source_table, source_key);

-- Op id ranges a writer may still commit. A checkpoint never passes the
-- lowest one (see doc.go, "The checkpoint invariant").
CREATE TABLE op_reservations (
  id            bigserial PRIMARY KEY,
  group_id      int NOT NULL,
  low           bigint NOT NULL,
  pid           int NOT NULL DEFAULT pg_backend_pid(),
  backend_start timestamptz NOT NULL
);
CREATE INDEX op_reservations_group ON op_reservations (group_id, low);

CREATE TABLE write_checkpoints (
  user_id          text PRIMARY KEY,
  lsn              pg_lsn NOT NULL,
  write_checkpoint bigint NOT NULL,
  requested_at     timestamptz NOT NULL DEFAULT now()
);

-- Work-unit leases for multi-process coordination.
CREATE TABLE leases (
  name       text PRIMARY KEY,
  owner      text NOT NULL,
  token      bigint NOT NULL,
  expires_at timestamptz NOT NULL
);
`,
	// 2: change records (see changerecords.go). One row per write
	// transaction, written in that transaction, naming the buckets and
	// parameter lookups it touched (NULL: not recorded, so unknown), so
	// that a checksum cache can carry unchanged buckets to a new checkpoint
	// without a query. changes_from: records are complete for every op id
	// above it. Ops written before this migration have no records, so
	// existing groups start at the sequence's current value.
	`
CREATE TABLE bucket_changes (
  group_id int NOT NULL,
  op_low   bigint NOT NULL,
  op_high  bigint NOT NULL,
  buckets  text[],
  lookups  bytea[]
);
CREATE INDEX bucket_changes_range ON bucket_changes (group_id, op_high);
ALTER TABLE groups ADD COLUMN changes_from bigint NOT NULL DEFAULT 0;
UPDATE groups SET changes_from = (SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM op_id_seq);
`,
	// 3: streams that survive large transactions and schema changes.
	// stream_txn_lsn / stream_txn_changes: a source transaction too large
	// for one write is stored in pieces; these name it (commit LSN) and
	// count its changes storage holds, and no checkpoint is published
	// while it is set (stream.go). source_tables.shape is the table shape
	// (columns, types, replica identity) the stored rows were made from,
	// compared with every relation the stream sees; resnapshot* is the
	// progress of re-reading a table whose shape changed, during which no
	// checkpoint is published either. Existing tables get their shape from
	// the source at the next start.
	`
ALTER TABLE groups ADD COLUMN stream_txn_lsn pg_lsn,
  ADD COLUMN stream_txn_changes bigint NOT NULL DEFAULT 0;
ALTER TABLE source_tables ADD COLUMN shape jsonb,
  ADD COLUMN resnapshot boolean NOT NULL DEFAULT false,
  ADD COLUMN resnapshot_key text[],
  ADD COLUMN resnapshot_rows bigint NOT NULL DEFAULT 0;
`,
	// 4: pipelines that write to a sink other than bucket storage (see
	// sinkpipelines.go). The sink keeps its own progress; storage keeps
	// what must outlive the sink's: the pipeline version (a changed sink
	// or table list starts a new one, which snapshots afresh), its slot,
	// the key ranges of its snapshot, and the last error for status.
	`
CREATE TABLE sink_pipelines (
  name          text PRIMARY KEY,
  version       int NOT NULL,
  fingerprint   text NOT NULL,
  sink_type     text NOT NULL,
  tables        text[] NOT NULL,
  slot_name     text NOT NULL UNIQUE,
  plan          jsonb,
  snapshot_done boolean NOT NULL DEFAULT false,
  stream_lsn    pg_lsn,
  last_error    text,
  last_error_at timestamptz,
  updated_at    timestamptz NOT NULL DEFAULT now()
);
`,
	// 5: op ids are drawn in blocks of 100 (writer.go, opIDBlock): one
	// nextval hands out last_value … last_value+99. Ids up to the current
	// last_value are taken; the next block starts after them.
	`
ALTER SEQUENCE op_id_seq INCREMENT BY 100;
`,
	// 6: a lease names the storage session of its holder's process
	// (leases.go): once that session is gone — the process died — the
	// lease is free at once, not only when it expires.
	`
ALTER TABLE leases ADD COLUMN pid int, ADD COLUMN backend_start timestamptz;
`,
	// 7: an acquisition records whether it took the lease over from a
	// holder that had not released it (leases.go), so that one statement
	// both claims the lease and says so.
	`
ALTER TABLE leases ADD COLUMN taken_over boolean NOT NULL DEFAULT false;
`,
	// 8: a snapshot unit claimed ahead of its start (leasebatch.go) is
	// held but not worked on: started tells the autoscaling counts which
	// leased units are active.
	`
ALTER TABLE leases ADD COLUMN started boolean NOT NULL DEFAULT true;
`,
	// 9: the group's last compaction (compact.go), for status, and its
	// floor: the checkpoint op id compaction may have rewritten ops up to,
	// which every bucket data read returns as the least target of its
	// ops (read.go).
	`
ALTER TABLE groups ADD COLUMN compaction jsonb, ADD COLUMN compact_floor bigint NOT NULL DEFAULT 0;
`,
	// 10: the warnings the source gave for a group's rules when they were
	// loaded (a table or column the rules name that the source lacks), for
	// status: a reload applies such rules, so the warning must outlive its
	// log line.
	`
ALTER TABLE groups ADD COLUMN rules_warnings text[] NOT NULL DEFAULT '{}';
`,
	// 11: storage layout v2 (see doc.go, "Storage versions"). A group's
	// storage_version names its layout; existing groups keep v1. A v2
	// group's ops and current rows live in partitions of its own of
	// bucket_data2 and current_data2 (CreateGroup creates them), name
	// buckets by ids interned in bucket_names and tables by
	// source_tables.num. bucket_ops shows every group's ops with names,
	// for people and test tools: nothing on a hot path reads it.
	`
ALTER TABLE groups ADD COLUMN storage_version int NOT NULL DEFAULT 1;
CREATE SEQUENCE source_table_num_seq AS int;
ALTER TABLE source_tables ADD COLUMN num int NOT NULL DEFAULT nextval('source_table_num_seq') UNIQUE;
CREATE SEQUENCE bucket_id_seq AS bigint;
CREATE TABLE bucket_names (
  group_id int NOT NULL,
  id       bigint NOT NULL,
  name     text NOT NULL,
  PRIMARY KEY (group_id, name),
  UNIQUE (group_id, id)
);
CREATE TABLE bucket_data2 (
  bucket       bigint NOT NULL,
  op_id        bigint NOT NULL,
  target_op    bigint,
  group_id     int NOT NULL,
  source_table int,
  checksum     int NOT NULL,       -- the 32-bit checksum's bits (sum(int) is an int8; readers take the low 32 bits)
  source_key   uuid,
  object_uuid  uuid,  -- the object id when it is a canonical UUID (lowercase, hyphenated), else NULL
  object_type  text,  -- NULL in a row's op when it is the source table's name
  object_id    text,  -- any other object id
  data         text,
  -- last: a smallint before data would leave 2 bytes of padding before
  -- its (4-byte aligned) length word
  op           smallint NOT NULL   -- 1 PUT, 2 REMOVE, 3 MOVE, 4 CLEAR
) PARTITION BY LIST (group_id);
CREATE TABLE current_data2 (
  group_id     int NOT NULL,
  source_table int NOT NULL,
  source_key   uuid NOT NULL,
  buckets      bytea NOT NULL,
  lookups      bytea[],
  data         bytea
) PARTITION BY LIST (group_id);
CREATE VIEW bucket_ops AS
  SELECT group_id, bucket_name, op_id, op, source_table, source_key, object_type, object_id, checksum, data, target_op
  FROM bucket_data
  UNION ALL
  SELECT d.group_id, n.name, d.op_id, d.op, t.id, d.source_key, coalesce(d.object_type, t.table_name), coalesce(d.object_id, d.object_uuid::text), d.checksum::int8 & 4294967295, d.data, d.target_op
  FROM bucket_data2 d
  JOIN bucket_names n ON n.group_id = d.group_id AND n.id = d.bucket
  LEFT JOIN source_tables t ON t.num = d.source_table;
`,
	// 12: storage layout v3 (see doc.go, "Storage versions"): a v3
	// group's current rows carry key_order, an order-preserving prefix of
	// the row's first key column, and live in its partition of
	// current_data3, keyed by (source_table, key_order, source_key). A
	// parent of its own rather than a column added to current_data2, so
	// that v2's parent stays as it was and key_order is NOT NULL, in
	// alignment order: the three int4s and the uuid, 28 fixed bytes, then
	// the varlenas. (It saves no bytes over the column added last: a
	// heap tuple is padded to 8 bytes either way; see doc.go.)
	`
CREATE TABLE current_data3 (
  group_id     int NOT NULL,
  source_table int NOT NULL,
  key_order    int NOT NULL,
  source_key   uuid NOT NULL,
  buckets      bytea NOT NULL,
  lookups      bytea[],
  data         bytea
) PARTITION BY LIST (group_id);
`,
}

// SchemaVersion is the version the code expects after migrating.
var SchemaVersion = len(migrations)

// ErrNoSchema is storage without syncpipe's schema at SchemaVersion (an
// empty database, or one an older syncpipe set up): Open with NoMigrate
// reports it rather than create or migrate anything.
var ErrNoSchema = errors.New("has no syncpipe schema")

// checkSchema returns nil when schema is at SchemaVersion, and an
// ErrNoSchema error saying what is missing when it is not there or older.
// It writes nothing.
func checkSchema(ctx context.Context, pool *pgxpool.Pool, schema string) error {
	ident := pgx.Identifier{schema}.Sanitize()
	var exists bool
	if err := pool.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", ident+".migrations").Scan(&exists); err != nil {
		return fmt.Errorf("read the storage schema version: %w", err)
	}
	version := 0
	if exists {
		if err := pool.QueryRow(ctx, "SELECT coalesce(max(version), 0) FROM "+ident+".migrations").Scan(&version); err != nil {
			return fmt.Errorf("read the storage schema version: %w", err)
		}
	}
	switch {
	case version == 0:
		return fmt.Errorf("%w %q yet: start `syncpipe run` once to create it", ErrNoSchema, schema)
	case version < len(migrations):
		return fmt.Errorf("%w %q at version %d yet (it is at %d): start this version's `syncpipe run` once to migrate it",
			ErrNoSchema, schema, len(migrations), version)
	case version > len(migrations):
		return fmt.Errorf("storage schema %s is at version %d but this syncpipe knows only %d: upgrade syncpipe", schema, version, len(migrations))
	}
	return nil
}

// Migrate creates the schema if needed and applies pending migrations. It
// is safe to run from several processes at once: an advisory lock
// serialises them and each version is applied once.
func Migrate(ctx context.Context, pool *pgxpool.Pool, schema string) error {
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("migrate: acquire connection: %w", err)
	}
	defer conn.Release()
	ident := pgx.Identifier{schema}.Sanitize()
	// The lock key is derived from the schema name so that two stores in
	// different schemas of one database do not block each other.
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock(hashtext('syncpipe.migrate.' || $1))", schema); err != nil {
		return fmt.Errorf("migrate: lock: %w", err)
	}
	defer func() {
		// Bounded: a shutdown must not wait on a dead storage; a lost
		// connection releases the lock anyway.
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		_, _ = conn.Exec(uctx, "SELECT pg_advisory_unlock(hashtext('syncpipe.migrate.' || $1))", schema)
	}()

	if _, err := conn.Exec(ctx, "CREATE SCHEMA IF NOT EXISTS "+ident); err != nil {
		return fmt.Errorf("migrate: create schema %s: %w", schema, err)
	}
	if _, err := conn.Exec(ctx, "CREATE TABLE IF NOT EXISTS "+ident+
		".migrations (version int PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())"); err != nil {
		return fmt.Errorf("migrate: create migrations table: %w", err)
	}
	var current int
	if err := conn.QueryRow(ctx, "SELECT coalesce(max(version), 0) FROM "+ident+".migrations").Scan(&current); err != nil {
		return fmt.Errorf("migrate: read version: %w", err)
	}
	if current > len(migrations) {
		return fmt.Errorf("migrate: storage schema %s is at version %d but this syncpipe knows only %d: upgrade syncpipe", schema, current, len(migrations))
	}
	for v := current + 1; v <= len(migrations); v++ {
		err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, "SET LOCAL search_path TO "+ident); err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, migrations[v-1]); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, "INSERT INTO migrations (version) VALUES ($1)", v)
			return err
		})
		if err != nil {
			return fmt.Errorf("migrate: apply version %d: %w", v, err)
		}
	}
	return nil
}
