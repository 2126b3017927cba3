// Package postgres is the PostgreSQL replication source: chunked,
// parallel, resumable snapshots and pgoutput streaming.
package postgres
