// Package sources holds the replication sources; sources/postgres reads a
// PostgreSQL database by snapshot and logical replication.
package sources
