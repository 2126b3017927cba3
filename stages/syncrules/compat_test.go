package syncrules

import (
	"strings"
	"testing"
)

// TestCompatibility checks how config: resolves to options: PowerSync turns
// timestamps_iso8601, fixed_json_extract and custom_postgres_types on from
// edition 2, and each can be overridden in either edition.
func TestCompatibility(t *testing.T) {
	const streams = "streams: {s: {auto_subscribe: true, query: SELECT * FROM t}}\n"
	const buckets = "bucket_definitions: {b: {data: [SELECT * FROM t]}}\n"
	cases := []struct {
		src  string
		want Compatibility
	}{
		{buckets, Compatibility{Edition: 1, TimestampDigits: 9}},
		{"config: {edition: 1}\n" + buckets, Compatibility{Edition: 1, TimestampDigits: 9}},
		{"config: {edition: 3}\n" + streams, Compatibility{Edition: 3, TimestampsISO8601: true, TimestampDigits: 9, FixedJSONExtract: true, CustomPostgresTypes: true}},
		{"config: {edition: 3, timestamps_iso8601: false}\n" + streams, Compatibility{Edition: 3, TimestampDigits: 9, FixedJSONExtract: true, CustomPostgresTypes: true}},
		{"config: {edition: 3, fixed_json_extract: false, custom_postgres_types: false}\n" + streams, Compatibility{Edition: 3, TimestampsISO8601: true, TimestampDigits: 9}},
		{"config: {edition: 3, timestamp_max_precision: milliseconds}\n" + streams, Compatibility{Edition: 3, TimestampsISO8601: true, TimestampDigits: 3, FixedJSONExtract: true, CustomPostgresTypes: true}},
		{"config: {edition: 3, timestamp_max_precision: seconds}\n" + streams, Compatibility{Edition: 3, TimestampsISO8601: true, TimestampDigits: 0, FixedJSONExtract: true, CustomPostgresTypes: true}},
		{"config: {edition: 1, timestamps_iso8601: true, fixed_json_extract: false}\n" + buckets, Compatibility{Edition: 1, TimestampsISO8601: true, TimestampDigits: 9}},
	}
	for _, c := range cases {
		r, err := Parse([]byte(c.src), Options{})
		if err != nil {
			t.Errorf("%q: %v", c.src, err)
			continue
		}
		if got := r.Compatibility(); got != c.want {
			t.Errorf("%q:\n got  %+v\n want %+v", c.src, got, c.want)
		}
	}
}

func TestCompatibilityErrors(t *testing.T) {
	const streams = "streams: {s: {auto_subscribe: true, query: SELECT * FROM t}}\n"
	for src, want := range map[string]string{
		"config: {edition: 3, timestamps_iso8601: false, timestamp_max_precision: seconds}\n" + streams: "'timestamp_max_precision' requires 'timestamps_iso8601' to be enabled.",
		"config: {edition: 1, timestamp_max_precision: milliseconds}\nbucket_definitions: {}":           "'timestamp_max_precision' requires 'timestamps_iso8601' to be enabled.",
		"config: {edition: 3, timestamp_max_precision: minutes}\n" + streams:                            "timestamp_max_precision must be",
		"config: {edition: 3, fixed_json_extract: maybe}\n" + streams:                                   "fixed_json_extract must be true or false",
		"config: {edition: 3, versioned_bucket_ids: false}\n" + streams:                                 `config option "versioned_bucket_ids" is not supported`,
		"config: {edition: 1, fixed_json_extract: true}\nbucket_definitions: {}":                        "fixed_json_extract: true is not supported in edition 1",
		"config: {edition: 1, custom_postgres_types: true}\nbucket_definitions: {}":                     "custom_postgres_types: true is not supported in edition 1",
	} {
		_, err := Parse([]byte(src), Options{})
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: got %v, want %q", src, err, want)
		}
	}
}
