// Package checksum computes PowerSync-compatible operation checksums and
// replica ids.
//
// PowerSync clients verify every bucket they download by adding up the
// checksums of its operations and comparing the total with the one announced
// in the checkpoint. syncpipe therefore has to reproduce PowerSync's
// formulas bit for bit (SPEC §3):
//
//   - Put: the first four bytes of SHA-256("put." + object_type + "." +
//     object_id + "." + data), read as a little-endian uint32. The op build
//     stage calls it once per PUT op at replication time.
//   - Remove: the same hash of "delete." + subkey, where the subkey is
//     Subkey(source table id, replica id). The op build stage calls it for
//     every REMOVE op.
//   - Add: bucket checksums are the sum of their ops' checksums modulo 2^32.
//     The sync API adds per-op checksums (and cached partial sums) with it.
//   - Sign: checkpoint lines carry the bucket checksum as a signed int32
//     (JavaScript's sums), data lines carry per-op checksums unsigned; both
//     are the same 32 bits, converted with int32() and uint32().
//
// A replica id identifies a source row independently of its data: it is the
// UUIDv5 (namespace a396dd91-09fc-4017-a28d-3df722f651e9) of the BSON
// document {column: value, ...} built from the row's replica-identity
// columns in column order, exactly as PowerSync builds it. ReplicaKey is a
// tiny append-only BSON encoder for the value kinds a row can hold (string,
// int64, double, null, binary); it is reusable so the hot path does
// not allocate. For example the BSON of {id: "test1"} hashes to
// b40bd986-036a-51c7-ad7d-789ecb75e38c.
//
// All functions are pure and safe for concurrent use; ReplicaKey values are
// not (use one per goroutine).
package checksum
