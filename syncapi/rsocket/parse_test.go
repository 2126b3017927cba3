package rsocket

import (
	"encoding/hex"
	"errors"
	"strings"
	"testing"
)

// unhex decodes a hex frame written with spaces between its fields.
func unhex(t testing.TB, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(strings.ReplaceAll(s, " ", ""))
	if err != nil {
		t.Fatalf("bad hex %q: %v", s, err)
	}
	return b
}

// setupHead is a well-formed SETUP up to its MIME types: stream 0, SETUP
// with the flags to be appended, version 1.0, keepalive 20 s, lifetime
// 90 s.
const setupHead = "00000000 04"

const (
	v10      = " 0001 0000"
	times    = " 00004e20 00015f90"
	mimeJSON = " 10 6170706c69636174696f6e2f6a736f6e" // application/json
)

// malformed are frames Parse refuses, with the ERROR code the server
// answers (always on stream 0, closing the connection) and the exact
// error. A frame other than SETUP arriving before SETUP, or a second
// SETUP, is the connection's concern (Parse sees one frame), as are
// stream ids that are even or reused, and REQUEST_N or CANCEL for a
// stream that is not open.
var malformed = []struct {
	name, frame string
	code        ErrorCode
	err         string
}{
	{"empty", "", CodeConnectionError,
		"rsocket: RESERVED frame: header: 0 bytes, a frame header has 6"},
	{"truncated header", "00000001 20", CodeConnectionError,
		"rsocket: RESERVED frame: header: 5 bytes, a frame header has 6"},
	{"stream id top bit", "80000001 2000 00000001", CodeConnectionError,
		"rsocket: REQUEST_N frame: stream id: the reserved top bit is set (0x80000001)"},
	{"REQUEST_N on stream 0", "00000000 2000 00000001", CodeConnectionError,
		"rsocket: REQUEST_N frame: stream id: 0, but a REQUEST_N frame belongs to a stream"},
	{"REQUEST_STREAM on stream 0", "00000000 1800 00000001", CodeConnectionError,
		"rsocket: REQUEST_STREAM frame: stream id: 0, but a REQUEST_STREAM frame belongs to a stream"},
	{"CANCEL on stream 0", "00000000 2400", CodeConnectionError,
		"rsocket: CANCEL frame: stream id: 0, but a CANCEL frame belongs to a stream"},
	{"PAYLOAD on stream 0", "00000000 2820", CodeConnectionError,
		"rsocket: PAYLOAD frame: stream id: 0, but a PAYLOAD frame belongs to a stream"},
	{"KEEPALIVE on a stream", "00000001 0c80 0000000000000000", CodeConnectionError,
		"rsocket: KEEPALIVE frame: stream id: 1, but a KEEPALIVE frame belongs to the connection (0)"},
	{"SETUP on a stream", "00000001 0400" + v10 + times + mimeJSON + mimeJSON, CodeInvalidSetup,
		"rsocket: SETUP frame: stream id: 1, but a SETUP frame belongs to the connection (0)"},
	{"zero request n", "00000001 2000 00000000", CodeConnectionError,
		"rsocket: REQUEST_N frame: request n: 0, must be 1..2147483647"},
	{"negative request n", "00000001 2000 ffffffff", CodeConnectionError,
		"rsocket: REQUEST_N frame: request n: -1, must be 1..2147483647"},
	{"truncated request n", "00000001 2000 0000", CodeConnectionError,
		"rsocket: REQUEST_N frame: request n: truncated: 2 of 4 bytes"},
	{"REQUEST_N too long", "00000001 2000 00000001 00", CodeConnectionError,
		"rsocket: REQUEST_N frame: length: 1 bytes after the frame's end"},
	{"zero initial request n", "00000001 1800 00000000", CodeConnectionError,
		"rsocket: REQUEST_STREAM frame: initial request n: 0, must be 1..2147483647"},
	{"negative initial request n", "00000001 1800 80000000", CodeConnectionError,
		"rsocket: REQUEST_STREAM frame: initial request n: -2147483648, must be 1..2147483647"},
	{"fragmented REQUEST_STREAM", "00000001 1880 00000001", CodeConnectionError,
		"rsocket: REQUEST_STREAM frame: follows flag: fragmented payloads are not supported"},
	{"metadata longer than the frame", "00000001 1900 00000001 000010 7b7d", CodeConnectionError,
		"rsocket: REQUEST_STREAM frame: metadata length: 16, but 2 bytes are left"},
	{"truncated metadata length", "00000001 1900 00000001 0000", CodeConnectionError,
		"rsocket: REQUEST_STREAM frame: metadata length: truncated: 2 of 3 bytes"},
	{"CANCEL too long", "00000001 2400 00", CodeConnectionError,
		"rsocket: CANCEL frame: length: 1 bytes after the frame's end"},
	{"PAYLOAD neither NEXT nor COMPLETE", "00000001 2800 aa", CodeConnectionError,
		"rsocket: PAYLOAD frame: flags: neither NEXT nor COMPLETE is set"},
	{"fragmented PAYLOAD", "00000001 28a0 aa", CodeConnectionError,
		"rsocket: PAYLOAD frame: follows flag: fragmented payloads are not supported"},
	{"ERROR code 0", "00000001 2c00 00000000", CodeConnectionError,
		"rsocket: ERROR frame: error code: 0 is reserved"},
	{"truncated ERROR code", "00000000 2c00 0000", CodeConnectionError,
		"rsocket: ERROR frame: error code: truncated: 2 of 4 bytes"},
	{"truncated KEEPALIVE position", "00000000 0c80 00000000", CodeConnectionError,
		"rsocket: KEEPALIVE frame: last received position: truncated: 4 of 8 bytes"},
	{"KEEPALIVE position top bit", "00000000 0c80 8000000000000000", CodeConnectionError,
		"rsocket: KEEPALIVE frame: last received position: the reserved top bit is set"},
	{"unknown type", "00000001 8000", CodeConnectionError,
		"rsocket: type 0x20 frame: frame type: not understood, and its ignore flag is not set"},
	{"RESERVED type", "00000000 0000", CodeConnectionError,
		"rsocket: RESERVED frame: frame type: not understood, and its ignore flag is not set"},
	{"EXT without ignore", "00000001 fc00 00000007", CodeConnectionError,
		"rsocket: EXT frame: frame type: not understood, and its ignore flag is not set"},
	{"REQUEST_RESPONSE", "00000001 1000 7b7d", CodeConnectionError, "rsocket: REQUEST_RESPONSE frame: frame type: " + notServed},
	{"REQUEST_FNF", "00000001 1400 7b7d", CodeConnectionError, "rsocket: REQUEST_FNF frame: frame type: " + notServed},
	{"REQUEST_CHANNEL", "00000001 1c00 00000001", CodeConnectionError, "rsocket: REQUEST_CHANNEL frame: frame type: " + notServed},
	{"REQUEST_RESPONSE with ignore", "00000001 1200 7b7d", CodeConnectionError, "rsocket: REQUEST_RESPONSE frame: frame type: " + notServed},
	{"METADATA_PUSH", "00000000 3100 7b7d", CodeConnectionError, "rsocket: METADATA_PUSH frame: frame type: " + notServed},
	{"LEASE", "00000000 0800 00000001 00000001", CodeConnectionError, "rsocket: LEASE frame: frame type: " + notServed},
	{"RESUME_OK", "00000000 3800 0000000000000000", CodeConnectionError, "rsocket: RESUME_OK frame: frame type: " + notServed},
	{"RESUME", "00000000 3400 0001 0000 0001 aa 0000000000000000 0000000000000000", CodeRejectedResume,
		"rsocket: RESUME frame: frame type: resumption is not supported"},
	{"SETUP version 2.0", setupHead + "00 0002 0000" + times + mimeJSON + mimeJSON, CodeUnsupportedSetup,
		"rsocket: SETUP frame: version: 2.0, the server speaks 1.0"},
	{"SETUP version 0.2", setupHead + "00 0000 0002", CodeUnsupportedSetup,
		"rsocket: SETUP frame: version: 0.2, the server speaks 1.0"},
	{"truncated SETUP version", setupHead + "00 0001", CodeInvalidSetup,
		"rsocket: SETUP frame: version: truncated: 2 of 4 bytes"},
	{"zero keepalive", setupHead + "00" + v10 + " 00000000 00015f90" + mimeJSON + mimeJSON, CodeInvalidSetup,
		"rsocket: SETUP frame: keepalive interval: 0, must be 1..2147483647"},
	{"negative lifetime", setupHead + "00" + v10 + " 00004e20 80000000" + mimeJSON + mimeJSON, CodeInvalidSetup,
		"rsocket: SETUP frame: max lifetime: -2147483648, must be 1..2147483647"},
	{"truncated lifetime", setupHead + "00" + v10 + " 00004e20 0001", CodeInvalidSetup,
		"rsocket: SETUP frame: max lifetime: truncated: 2 of 4 bytes"},
	{"MIME length beyond the frame", setupHead + "00" + v10 + times + " 20 6170706c", CodeInvalidSetup,
		"rsocket: SETUP frame: metadata MIME type: length 32, but 4 bytes are left"},
	{"MIME not ASCII", setupHead + "00" + v10 + times + " 02 61ff" + mimeJSON, CodeInvalidSetup,
		"rsocket: SETUP frame: metadata MIME type: byte 1 is 0xFF, not printable US-ASCII"},
	{"data MIME missing", setupHead + "00" + v10 + times + mimeJSON, CodeInvalidSetup,
		"rsocket: SETUP frame: data MIME type: length truncated"},
	{"SETUP metadata beyond the frame", "00000000 0500" + v10 + times + mimeJSON + mimeJSON + " 000005 7b7d", CodeInvalidSetup,
		"rsocket: SETUP frame: metadata length: 5, but 2 bytes are left"},
	{"resume token beyond the frame", setupHead + "80" + v10 + times + " 0010 aabb", CodeInvalidSetup,
		"rsocket: SETUP frame: resume token length: 16, but 2 bytes are left"},
	{"resume asked", setupHead + "80" + v10 + times + " 0002 aabb" + mimeJSON + mimeJSON, CodeRejectedSetup,
		"rsocket: SETUP frame: resume flag: resumption is not supported"},
	{"lease asked", setupHead + "40" + v10 + times + mimeJSON + mimeJSON, CodeUnsupportedSetup,
		"rsocket: SETUP frame: lease flag: leases are not supported"},
}

const notServed = "not served: PowerSync clients send SETUP, REQUEST_STREAM, REQUEST_N, CANCEL, KEEPALIVE and ERROR only"

func TestParseMalformed(t *testing.T) {
	for _, tc := range malformed {
		t.Run(tc.name, func(t *testing.T) {
			checkRefused(t, unhex(t, tc.frame), tc.code, tc.err)
		})
	}
}

func checkRefused(t *testing.T, b []byte, code ErrorCode, msg string) {
	t.Helper()
	_, err := Parse(b)
	var perr *Error
	if !errors.As(err, &perr) {
		t.Fatalf("Parse = %v, want an *Error", err)
	}
	if err.Error() != msg {
		t.Errorf("error:\n got %s\nwant %s", err, msg)
	}
	if perr.Code != code {
		t.Errorf("code = %v, want %v", perr.Code, code)
	}
}

// An oversized frame is refused before its body is looked at. (The
// transport's WebSocket read limit refuses one far smaller first.)
func TestParseOversized(t *testing.T) {
	b := make([]byte, MaxFrameSize+1)
	copy(b, unhex(t, "00000001 2820"))
	checkRefused(t, b, CodeConnectionError, "rsocket: PAYLOAD frame: size: 16777216 bytes, at most 16777215")
	if _, err := Parse(b[:MaxFrameSize]); err != nil {
		t.Errorf("a frame of MaxFrameSize: %v", err)
	}
}

// Frames not understood whose ignore flag is set are skipped, the others
// refused (TestParseMalformed).
func TestParseIgnored(t *testing.T) {
	for _, tc := range []struct {
		frame string
		typ   Type
		id    uint32
	}{
		{"00000001 fe00 00000007 aabb", TypeExt, 1},      // EXT, ignore
		{"00000000 ff00 00000007 000001 aa", TypeExt, 0}, // EXT, ignore, metadata
		{"00000003 8200", Type(0x20), 3},                 // unassigned, ignore
		{"00000000 0200", TypeReserved, 0},               // reserved, ignore
	} {
		f, err := Parse(unhex(t, tc.frame))
		if !errors.Is(err, ErrIgnored) {
			t.Errorf("%s: err = %v, want ErrIgnored", tc.frame, err)
		}
		if f.Type != tc.typ || f.StreamID != tc.id || f.Flags&FlagIgnore == 0 {
			t.Errorf("%s: frame %+v, want type %v stream %d with the ignore flag", tc.frame, f, tc.typ, tc.id)
		}
	}
}

// Flags a type does not define are dropped, not refused: the
// specification says not to interpret them.
func TestParseDropsUndefinedFlags(t *testing.T) {
	f, err := Parse(unhex(t, "00000001 23ff 00000005")) // REQUEST_N with every flag
	if err != nil || f.Flags != 0 || f.N != 5 {
		t.Fatalf("REQUEST_N with every flag set: %+v, %v", f, err)
	}
	f, err = Parse(unhex(t, "00000000 0fff 0000000000000000 aa")) // KEEPALIVE: only RESPOND kept
	if err != nil || f.Flags != FlagRespond || string(f.Data) != "\xaa" {
		t.Fatalf("KEEPALIVE with every flag set: %+v, %v", f, err)
	}
	f, err = Parse(unhex(t, "00000001 2a60 000000aa")) // PAYLOAD: ignore dropped, NEXT and COMPLETE kept
	if err != nil || f.Flags != FlagNext|FlagComplete || f.Metadata != nil || len(f.Data) != 4 {
		t.Fatalf("PAYLOAD with ignore: %+v, %v", f, err)
	}
}

func TestEncodings(t *testing.T) {
	s := Setup{MetadataMIME: MIMEJSON, DataMIME: MIMEBSON}
	if m, d, err := s.Encodings(); err != nil || m != EncodingJSON || d != EncodingBSON {
		t.Errorf("Encodings() = %v, %v, %v", m, d, err)
	}
	for _, tc := range []struct {
		s   Setup
		err string
	}{
		{Setup{MetadataMIME: "application/octet-stream", DataMIME: MIMEJSON},
			`rsocket: SETUP frame: metadata MIME type: "application/octet-stream": expected application/json or application/bson`},
		{Setup{MetadataMIME: MIMEJSON, DataMIME: "Application/JSON"},
			`rsocket: SETUP frame: data MIME type: "Application/JSON": expected application/json or application/bson`},
	} {
		_, _, err := tc.s.Encodings()
		var perr *Error
		if !errors.As(err, &perr) || perr.Code != CodeRejectedSetup || err.Error() != tc.err {
			t.Errorf("Encodings() error %v, want REJECTED_SETUP %s", err, tc.err)
		}
	}
}

func TestNames(t *testing.T) {
	for _, tc := range []struct{ got, want string }{
		{TypeRequestStream.String(), "REQUEST_STREAM"},
		{TypeExt.String(), "EXT"},
		{Type(0x2A).String(), "type 0x2A"},
		{CodeRejectedSetup.String(), "REJECTED_SETUP"},
		{CodeApplicationError.String(), "APPLICATION_ERROR"},
		{ErrorCode(0x7).String(), "code 0x00000007"},
	} {
		if tc.got != tc.want {
			t.Errorf("got %q, want %q", tc.got, tc.want)
		}
	}
}
