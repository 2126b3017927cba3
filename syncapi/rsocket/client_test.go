package rsocket

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"testing"
)

// The frames of a PowerSync JS client's WebSocket sync, written by hand
// from the facts in doc.go (not captured from a client: none runs here),
// field by field, and what the server answers.

// jsSetup is the client's SETUP: stream 0; SETUP with METADATA
// (0x0400|0x100); version 1.0; keepalive 20000 ms; lifetime 90000 ms;
// application/json for metadata and data; metadata {token, user_agent}
// as JSON (82 bytes), the token as the HTTP Authorization header has it;
// no data (the SDK's setup payload data is null).
const jsSetup = "00000000 0500 0001 0000 00004e20 00015f90" +
	" 10 6170706c69636174696f6e2f6a736f6e" +
	" 10 6170706c69636174696f6e2f6a736f6e" +
	" 000052"

const jsSetupMetadata = `{"token":"Token eyJhbGciOiJIUzI1NiJ9.e30.c2ln","user_agent":"powersync-js/1.41.0"}`

// jsRequestStream is the client's REQUEST_STREAM: its first stream, 1;
// REQUEST_STREAM with METADATA (0x1800|0x100); initial request n 10 (the
// SDK's default buffered fetch strategy; 1 unbuffered); metadata
// {"path":"/sync/stream"} (23 bytes); the sync request as JSON data.
const jsRequestStream = "00000001 1900 0000000a 000017"

const (
	jsRequestMetadata = `{"path":"/sync/stream"}`
	jsSyncRequest     = `{"buckets":[],"include_checksum":true,"raw_data":true,"client_id":"c1","parameters":{}}`
)

func TestJSClientSetup(t *testing.T) {
	b := append(unhex(t, jsSetup), jsSetupMetadata...)
	f, err := Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	s := f.Setup
	if f.Type != TypeSetup || f.StreamID != 0 || f.Flags != FlagMetadata || len(f.Data) != 0 {
		t.Errorf("frame %+v", f)
	}
	if s.Major != 1 || s.Minor != 0 || s.Keepalive().Seconds() != 20 || s.Lifetime().Seconds() != 90 {
		t.Errorf("setup %+v", s)
	}
	if m, d, err := s.Encodings(); err != nil || m != EncodingJSON || d != EncodingJSON {
		t.Errorf("Encodings() = %v, %v, %v", m, d, err)
	}
	var meta struct {
		Token     string `json:"token"`
		UserAgent string `json:"user_agent"`
	}
	if err := json.Unmarshal(f.Metadata, &meta); err != nil {
		t.Fatal(err)
	}
	if meta.Token != "Token eyJhbGciOiJIUzI1NiJ9.e30.c2ln" || meta.UserAgent != "powersync-js/1.41.0" {
		t.Errorf("metadata %+v", meta)
	}
	again, err := AppendSetup(nil, &s, f.Metadata, nil)
	if err != nil || !bytes.Equal(again, b) {
		t.Errorf("AppendSetup = %x, %v; want %x", again, err, b)
	}
}

func TestJSClientRequestStream(t *testing.T) {
	b := append(append(unhex(t, jsRequestStream), jsRequestMetadata...), jsSyncRequest...)
	f, err := Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	if f.Type != TypeRequestStream || f.StreamID != 1 || f.N != 10 || f.Flags != FlagMetadata {
		t.Errorf("frame %+v", f)
	}
	if string(f.Metadata) != jsRequestMetadata || string(f.Data) != jsSyncRequest {
		t.Errorf("metadata %q, data %q", f.Metadata, f.Data)
	}
	again, err := AppendRequestStream(nil, 1, 10, f.Metadata, f.Data)
	if err != nil || !bytes.Equal(again, b) {
		t.Errorf("AppendRequestStream = %x, %v; want %x", again, err, b)
	}
}

// The rest of a client's frames, and the server's, as bytes.
func TestJSClientExchange(t *testing.T) {
	// The client asks for one more line (its queue drained one), then
	// sends its 20 s keepalive asking for an answer, then cancels.
	for _, tc := range []struct {
		frame string
		want  Frame
	}{
		{"00000001 2000 00000001", Frame{Type: TypeRequestN, StreamID: 1, N: 1}},
		{"00000000 0c80 0000000000000000", Frame{Type: TypeKeepalive, Flags: FlagRespond, Data: []byte{}}},
		{"00000001 2400", Frame{Type: TypeCancel, StreamID: 1}},
	} {
		f, err := Parse(unhex(t, tc.frame))
		if err != nil || f.Type != tc.want.Type || f.StreamID != tc.want.StreamID || f.N != tc.want.N || f.Flags != tc.want.Flags {
			t.Errorf("%s: %+v, %v; want %+v", tc.frame, f, err, tc.want)
		}
	}
	line := []byte("\x05\x00\x00\x00\x00") // an empty BSON document
	for _, tc := range []struct {
		name string
		got  func() ([]byte, error)
		want string
	}{
		// The answer to the keepalive: RESPOND cleared, position 0, its data.
		{"keepalive", func() ([]byte, error) { return AppendKeepalive(nil, false, 0, nil) },
			"00000000 0c00 0000000000000000"},
		// A sync line: PAYLOAD with NEXT, the BSON document as data.
		{"line", func() ([]byte, error) { return AppendPayload(nil, 1, nil, line, FlagNext) },
			"00000001 2820 0500000000"},
		// The stream's end (token expired): PAYLOAD with COMPLETE alone.
		{"complete", func() ([]byte, error) { return AppendPayload(nil, 1, nil, nil, FlagComplete) },
			"00000001 2840"},
		// Too many connections, answered to the SETUP: REJECTED_SETUP on
		// stream 0, the PowerSync code in the message.
		{"limit", func() ([]byte, error) {
			return AppendServiceError(nil, 0, CodeRejectedSetup, "PSYNC_S2304", "Maximum active concurrent connections limit has been reached")
		}, "00000000 2c00 00000003" + hexOf("[PSYNC_S2304] Maximum active concurrent connections limit has been reached")},
		// An error on the sync stream: APPLICATION_ERROR on its stream.
		{"stream error", func() ([]byte, error) {
			return AppendServiceError(nil, 1, CodeApplicationError, "PSYNC_S2101", "Authorization failed")
		}, "00000001 2c00 00000201" + hexOf("[PSYNC_S2101] Authorization failed")},
	} {
		got, err := tc.got()
		if want := unhex(t, tc.want); err != nil || !bytes.Equal(got, want) {
			t.Errorf("%s: %x, %v; want %x", tc.name, got, err, want)
		}
	}
}

func hexOf(s string) string { return hex.EncodeToString([]byte(s)) }
