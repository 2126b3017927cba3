package syncrules

import "go.yaml.in/yaml/v3"

// Compatibility is the outcome of the config: section: the edition and the
// PowerSync compatibility options it turns on (from edition 2) unless the
// file overrides them.
type Compatibility struct {
	// Edition is 1 (bucket_definitions) or 3 (Sync Streams).
	Edition int
	// TimestampsISO8601 renders timestamptz, timestamp and time values as
	// ISO 8601 with a fixed number of sub-second digits
	// (timestamps_iso8601). The source connector applies it.
	TimestampsISO8601 bool
	// TimestampDigits is the most sub-second digits a timestamp keeps
	// (timestamp_max_precision: 0, 3, 6 or 9; 9 when not set, which for
	// Postgres's microseconds means 6).
	TimestampDigits int
	// FixedJSONExtract makes x ->> 'a.b' read the key "a.b" rather than a
	// path (fixed_json_extract); '$.a.b' is a path either way.
	FixedJSONExtract bool
	// CustomPostgresTypes is PowerSync's structured mapping of enums,
	// domains and composite types (custom_postgres_types). It is accepted
	// but not applied: such values replicate as their text.
	CustomPostgresTypes bool
}

// Compatibility returns the file's edition and compatibility options.
func (r *Rules) Compatibility() Compatibility { return r.compat }

// compatOptions are the boolean options of config:, by key, with the
// edition that turns each on.
var compatOptions = map[string]int{
	"timestamps_iso8601":    2,
	"fixed_json_extract":    2,
	"custom_postgres_types": 2,
}

// precisionDigits are the values of timestamp_max_precision.
var precisionDigits = map[string]int{"seconds": 0, "milliseconds": 3, "microseconds": 6, "nanoseconds": 9}

// compatibility resolves the options given under config: (boolean
// overrides and the precision node, nil if absent) for edition.
func (ld *loader) compatibility(edition int, overrides map[string]bool, precision *yaml.Node) Compatibility {
	on := func(key string) bool {
		if v, ok := overrides[key]; ok {
			return v
		}
		return edition >= compatOptions[key]
	}
	c := Compatibility{
		Edition:             edition,
		TimestampsISO8601:   on("timestamps_iso8601"),
		TimestampDigits:     9,
		FixedJSONExtract:    on("fixed_json_extract"),
		CustomPostgresTypes: on("custom_postgres_types"),
	}
	// Applied to streams only (fixed_json_extract) or not at all
	// (custom_postgres_types): turning them on in edition 1 would
	// silently differ from PowerSync, so it is refused.
	for _, key := range []string{"fixed_json_extract", "custom_postgres_types"} {
		if edition < compatOptions[key] && overrides[key] {
			ld.errAt(nil, "", "", key, "config option %s: true is not supported in edition %d", key, edition)
		}
	}
	if precision == nil {
		return c
	}
	d, ok := precisionDigits[precision.Value]
	switch {
	case !ok:
		ld.errAt(precision, "", "", precision.Value, "timestamp_max_precision must be seconds, milliseconds, microseconds or nanoseconds")
	case !c.TimestampsISO8601:
		ld.errAt(precision, "", "", precision.Value, "'timestamp_max_precision' requires 'timestamps_iso8601' to be enabled.")
	default:
		c.TimestampDigits = d
	}
	return c
}
