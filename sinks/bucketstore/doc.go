// Package bucketstore is the PostgreSQL bucket storage sink: the write side
// of replication and the read side the sync API serves from.
package bucketstore
