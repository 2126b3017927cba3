// Package config loads and validates the syncpipe YAML configuration
// (SPEC §7). It imports nothing else of syncpipe.
//
// # Load order
//
// Later steps override earlier ones:
//
//  1. Defaults: Default() holds every default value.
//  2. The YAML file, after ${VAR} interpolation of its text. ${VAR} is the
//     variable's value and an error (with file:line) when unset;
//     ${VAR:-default} falls back to default when VAR is unset or empty;
//     $${ is a literal "${"; a lone "$" is kept as is; whole-line comments
//     are not interpolated. A key that is present but empty (or null) keeps
//     its default. Top-level keys starting with "x-" are ignored, so they can
//     hold YAML anchors.
//  3. Environment overrides: SYNCPIPE_<SECTION>__<KEY>, with "__" for each
//     level of nesting, e.g. SYNCPIPE_SOURCE__URI,
//     SYNCPIPE_REPLICATION__STREAM__BATCH_MAX_WAIT. Lists of strings are
//     comma-separated (SYNCPIPE_API__AUTH__HS256_SECRETS=a,b) or a YAML flow
//     list; mappings and lists of mappings are YAML/JSON
//     (SYNCPIPE_PIPELINES='[{name: a}]'). A relative sync_rules.path set from
//     the environment is relative to the working directory, not the config
//     file. SYNCPIPE_ variables without "__" that do not name a section (for
//     example SYNCPIPE_CONFIG) are ignored, so the CLI may use them.
//
// Durations are Go duration strings ("500ms", "30s", "5m", "24h"); a bare
// number other than 0 is rejected rather than read as nanoseconds. Byte sizes
// are integers (bytes) or strings with a unit ("16MiB", "1MB"); see ByteSize.
//
// # Errors
//
// Load and Validate report every problem at once as an Errors (a sorted
// []*Error), one line each:
//
//	bad.yaml:12:5: replication.workers_per_process: must be ≥ 1 (got 0)
//	env SYNCPIPE_API__LISTEN: api.listen: invalid listen address "x": ...
//	bad.yaml: storage.uri: required: the postgres:// URI of bucket storage
//
// i.e. file:line:column (or "env NAME" for a value from the environment, or
// just the file for a key absent from it), the key path, and the message.
// Each Error has a Kind (syntax, unknown_key, type, required, conflict,
// range, enum, address, duplicate, interpolation, uri, file, ...). Positions
// point at the key. Validation is offline: nothing is connected to; only the
// sync rules file is opened to check that it is readable. URIs are never
// echoed in messages because they may hold passwords.
//
// # Implementation
//
// The interpolated text is parsed into a yaml.Node tree and walked against
// the config structs by reflection (koanf tags): unknown keys (with "did you
// mean"), duplicate keys and type mismatches are reported with positions and
// bad values are dropped. koanf then loads the remaining YAML and the
// environment and decodes onto Default(); Validate finally checks semantics,
// looking up each key's position in the index the walk built. Reference()
// renders the key table for the README from the same structs and their `doc`
// tags.
package config
