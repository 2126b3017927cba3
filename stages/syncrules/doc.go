// Package syncrules compiles PowerSync edition-1 sync rules and evaluates
// source rows and sync requests against them, bit for bit as PowerSync
// does (SPEC §3), so unmodified PowerSync clients accept the buckets and
// checksums syncpipe serves.
//
// # Model
//
// Sync rules are YAML bucket_definitions. Each definition has optional
// parameter queries and a list of data queries:
//
//	bucket_definitions:
//	  by_list:
//	    parameters: SELECT id AS list_id FROM lists WHERE owner_id = request.user_id()
//	    data:
//	      - SELECT * FROM todos WHERE list_id = bucket.list_id
//
// A bucket is a definition plus values for its parameters; its id is
// "<group>#<definition>[<params as compact JSON>]", e.g. 1#by_list["a1"]. A
// definition without parameters has the single bucket 1#global[]. NULL (and
// BLOB) parameter values never produce a bucket.
//
// Values follow SQLite's types (NULL, INTEGER, REAL, TEXT, BLOB; booleans
// are 1/0), with PowerSync's JavaScript-flavoured conversions: numbers print
// like Number.prototype.toString, text compares in UTF-16 order, AND/OR/NOT
// treat NULL as false, and JSON paths use the edition-1 rules.
//
// # Loading
//
// Parse compiles every query once, at load time; unsupported syntax
// (joins, subqueries, aggregates, unknown functions, …) is rejected then,
// never while evaluating rows. Errors come back together as RuleErrors,
// each naming file, line, column, bucket, query and token. CheckSchema
// additionally validates tables and columns once the source schema is
// known. Tables lists the source tables the rules read.
//
// # Replication time (bucket eval and op build stages)
//
// For each source table, call Rules.Bind with its ordered column names to
// get a BoundTable, and BoundTable.NewEvaluator once per goroutine. Rows
// arrive as []Value in column order, built with Null, Int, Real, Text,
// Blob and Bool by the decode stage.
//
//   - Evaluator.EvaluateRow gives the row's Outputs: bucket id, object type
//     and id, data JSON (exactly the bytes PowerSync would hash) and
//     priority. Outputs append into caller-owned slices and a byte buffer,
//     so steady state allocates almost nothing.
//   - Evaluator.EvaluateParameterRow gives a parameter table row's
//     LookupEntries: a canonical lookup key and the JSON parameter rows to
//     store under it (versioned by op id in storage).
//
// The checksum package turns outputs into op checksums.
//
// # Sync time (sync API)
//
// Rules.Request evaluates the parameter queries for a request (JWT sub,
// claims, client parameters). Static queries, json_each queries and
// definitions without parameters yield buckets directly (RequestPlan.Static);
// table parameter queries yield Lookups whose keys the API looks up in
// storage at the checkpoint, passing each stored parameter-rows value to
// Lookup.Buckets. MergeBuckets de-duplicates the result.
//
// Deviations from PowerSync are limited to corner cases and documented
// where they occur (upper/lower special casing, integers beyond int64,
// NULL parameters, which PowerSync sometimes turns into "[null]" buckets).
package syncrules
