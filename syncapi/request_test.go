package syncapi

import (
	"reflect"
	"strings"
	"testing"

	"github.com/syncpipe/syncpipe/stages/syncrules"
)

// TestParseStreams: the request's streams object as the Rust client sends
// it (null parameters and override_priority included), its defaults, and
// one error naming the field for each malformed part.
func TestParseStreams(t *testing.T) {
	req, err := parseSyncRequest([]byte(`{"streams":{"include_defaults":false,"subscriptions":[
		{"stream":"list_todos","parameters":{"list_id":"a"},"override_priority":1},
		{"stream":"lists","parameters":null,"override_priority":null}]}}`))
	if err != nil {
		t.Fatal(err)
	}
	want := &syncrules.StreamsRequest{Subscriptions: []syncrules.StreamSubscription{
		{Stream: "list_todos", Parameters: []byte(`{"list_id":"a"}`), OverridePriority: 1},
		{Stream: "lists", OverridePriority: -1}}}
	if !reflect.DeepEqual(req.streams, want) {
		t.Errorf("streams = %+v, want %+v", req.streams, want)
	}
	if req, _ := parseSyncRequest([]byte(`{"streams":{"subscriptions":[]}}`)); req == nil || !req.streams.IncludeDefaults {
		t.Error("include_defaults absent: want true")
	}
	if req, _ := parseSyncRequest([]byte(`{}`)); req == nil || req.streams != nil {
		t.Error("no streams object: want nil (defaults, no subscriptions)")
	}
	for body, msg := range map[string]string{
		`{"streams":[]}`:                                                                       "streams must be an object",
		`{"streams":{"include_defaults":1}}`:                                                   "streams.include_defaults must be a boolean",
		`{"streams":{"subscriptions":{}}}`:                                                     "streams.subscriptions must be an array",
		`{"streams":{"subscriptions":[{"stream":3}]}}`:                                         "streams.subscriptions[0].stream must be a string",
		`{"streams":{"subscriptions":[{"stream":"s","parameters":[1]}]}}`:                      "streams.subscriptions[0].parameters must be a JSON object",
		`{"streams":{"subscriptions":[{"stream":"s","parameters":{},"override_priority":7}]}}`: "override_priority must be an integer from 0 to 3",
	} {
		if _, err := parseSyncRequest([]byte(body)); err == nil || !strings.Contains(err.Error(), msg) {
			t.Errorf("%s: error %v, want %q", body, err, msg)
		}
	}
}
