package rsocket

import (
	"bytes"
	"errors"
	"reflect"
	"strings"
	"testing"
)

// encode appends f with the appender of its type: the inverse of Parse
// for the served types.
func encode(dst []byte, f *Frame) ([]byte, error) {
	switch f.Type {
	case TypeSetup:
		return AppendSetup(dst, &f.Setup, f.Metadata, f.Data)
	case TypeRequestStream:
		return AppendRequestStream(dst, f.StreamID, f.N, f.Metadata, f.Data)
	case TypeRequestN:
		return AppendRequestN(dst, f.StreamID, f.N)
	case TypeCancel:
		return AppendCancel(dst, f.StreamID)
	case TypeKeepalive:
		return AppendKeepalive(dst, f.Flags&FlagRespond != 0, f.Position, f.Data)
	case TypePayload:
		return AppendPayload(dst, f.StreamID, f.Metadata, f.Data, f.Flags)
	case TypeError:
		return AppendError(dst, f.StreamID, f.Code, string(f.Data))
	}
	return dst, errors.New("not a served type: " + f.Type.String())
}

// roundTrips are frames as appended and as Parse must read them.
var roundTrips = []struct {
	name string
	want Frame
}{
	{"SETUP", Frame{Type: TypeSetup, Flags: FlagMetadata, Metadata: []byte(`{"token":"Token t"}`), Data: []byte{},
		Setup: Setup{Major: 1, KeepaliveMillis: 20000, LifetimeMillis: 90000, MetadataMIME: MIMEJSON, DataMIME: MIMEJSON}}},
	{"SETUP without metadata", Frame{Type: TypeSetup, Data: []byte("d"),
		Setup: Setup{Major: 1, KeepaliveMillis: 1, LifetimeMillis: MaxN, MetadataMIME: "", DataMIME: MIMEBSON}}},
	{"SETUP with empty metadata", Frame{Type: TypeSetup, Flags: FlagMetadata, Metadata: []byte{}, Data: []byte{},
		Setup: Setup{Major: 1, KeepaliveMillis: 5, LifetimeMillis: 6, MetadataMIME: MIMEBSON, DataMIME: MIMEBSON}}},
	{"REQUEST_STREAM", Frame{Type: TypeRequestStream, StreamID: 1, N: 10, Flags: FlagMetadata,
		Metadata: []byte(`{"path":"/sync/stream"}`), Data: []byte(`{"buckets":[]}`)}},
	{"REQUEST_STREAM max", Frame{Type: TypeRequestStream, StreamID: MaxStreamID, N: MaxN, Data: []byte{}}},
	{"REQUEST_N", Frame{Type: TypeRequestN, StreamID: 1, N: 1}},
	{"REQUEST_N max", Frame{Type: TypeRequestN, StreamID: 7, N: MaxN}},
	{"CANCEL", Frame{Type: TypeCancel, StreamID: 1}},
	{"KEEPALIVE asking", Frame{Type: TypeKeepalive, Flags: FlagRespond, Data: []byte{}}},
	{"KEEPALIVE answer", Frame{Type: TypeKeepalive, Position: 1<<63 - 1, Data: []byte("ping")}},
	{"PAYLOAD NEXT", Frame{Type: TypePayload, StreamID: 1, Flags: FlagNext, Data: []byte("\x05\x00\x00\x00\x00")}},
	{"PAYLOAD COMPLETE", Frame{Type: TypePayload, StreamID: 1, Flags: FlagComplete, Data: []byte{}}},
	{"PAYLOAD NEXT COMPLETE metadata", Frame{Type: TypePayload, StreamID: 3, Flags: FlagNext | FlagComplete | FlagMetadata,
		Metadata: []byte("m"), Data: []byte("d")}},
	{"ERROR connection", Frame{Type: TypeError, Code: CodeRejectedSetup, Data: []byte("[PSYNC_S2304] too many")}},
	{"ERROR stream", Frame{Type: TypeError, StreamID: 1, Code: CodeApplicationError, Data: []byte{}}},
}

func TestRoundTrip(t *testing.T) {
	for _, tc := range roundTrips {
		t.Run(tc.name, func(t *testing.T) {
			b, err := encode([]byte("prefix"), &tc.want)
			if err != nil {
				t.Fatal(err)
			}
			if string(b[:6]) != "prefix" {
				t.Fatalf("dst's contents changed: %q", b[:6])
			}
			b = b[6:]
			got, err := Parse(b)
			if err != nil {
				t.Fatalf("Parse(%x): %v", b, err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("Parse(%x)\n got %+v\nwant %+v", b, got, tc.want)
			}
			again, err := encode(nil, &got)
			if err != nil || !bytes.Equal(again, b) {
				t.Fatalf("re-encoded %x, %v; want %x", again, err, b)
			}
		})
	}
}

// The server's appenders allocate nothing when dst has room, nor does
// Parse of what clients send: a stream's per-line cost is its bytes.
func TestNoAllocations(t *testing.T) {
	line := bytes.Repeat([]byte("x"), 1000)
	buf := make([]byte, 0, 2048)
	frames := [][]byte{
		unhex(t, "00000001 2000 00000001"),
		unhex(t, "00000000 0c80 0000000000000000"),
		unhex(t, "00000001 1900 00000001 000002 7b7d 7b7d"),
		unhex(t, "00000001 2400"),
	}
	allocs := testing.AllocsPerRun(100, func() {
		buf, _ = AppendPayload(buf[:0], 1, nil, line, FlagNext)
		buf, _ = AppendPayload(buf[:0], 1, nil, nil, FlagComplete)
		buf, _ = AppendKeepalive(buf[:0], false, 0, line[:8])
		buf, _ = AppendServiceError(buf[:0], 0, CodeRejectedSetup, "PSYNC_S2304", "Maximum active concurrent connections limit has been reached")
		buf, _ = AppendError(buf[:0], 1, CodeApplicationError, "bad")
		for _, f := range frames {
			_, _ = Parse(f)
		}
	})
	if allocs != 0 {
		t.Errorf("%v allocations per run, want 0", allocs)
	}
}

func TestAppendRefuses(t *testing.T) {
	big := make([]byte, MaxMetadata+1)
	dst := []byte("keep")
	for _, tc := range []struct {
		name string
		do   func() ([]byte, error)
		err  string
	}{
		{"PAYLOAD stream 0", func() ([]byte, error) { return AppendPayload(dst, 0, nil, nil, FlagNext) },
			"rsocket: append PAYLOAD: stream id 0, must be 1..2147483647"},
		{"PAYLOAD stream top bit", func() ([]byte, error) { return AppendPayload(dst, 1<<31, nil, nil, FlagNext) },
			"rsocket: append PAYLOAD: stream id 2147483648, must be 1..2147483647"},
		{"PAYLOAD no flags", func() ([]byte, error) { return AppendPayload(dst, 1, nil, nil, FlagFollows) },
			"rsocket: append PAYLOAD: neither NEXT nor COMPLETE is set"},
		{"PAYLOAD big metadata", func() ([]byte, error) { return AppendPayload(dst, 1, big, nil, FlagNext) },
			"rsocket: append PAYLOAD: metadata of 16777216 bytes, at most 16777215"},
		{"ERROR code 0", func() ([]byte, error) { return AppendError(dst, 1, 0, "") },
			"rsocket: append ERROR: error code 0 is reserved"},
		{"ERROR stream top bit", func() ([]byte, error) {
			return AppendServiceError(dst, 1<<31, CodeApplicationError, "PSYNC_S2101", "x")
		},
			"rsocket: append ERROR: stream id 2147483648, at most 2147483647"},
		{"KEEPALIVE position", func() ([]byte, error) { return AppendKeepalive(dst, true, 1<<63, nil) },
			"rsocket: append KEEPALIVE: last received position 9223372036854775808, at most 9223372036854775807"},
		{"SETUP keepalive", func() ([]byte, error) {
			return AppendSetup(dst, &Setup{Major: 1, LifetimeMillis: 1}, nil, nil)
		}, "rsocket: append SETUP: keepalive interval 0, must be 1..2147483647"},
		{"SETUP lifetime", func() ([]byte, error) {
			return AppendSetup(dst, &Setup{Major: 1, KeepaliveMillis: 1, LifetimeMillis: 1 << 31}, nil, nil)
		}, "rsocket: append SETUP: max lifetime 2147483648, must be 1..2147483647"},
		{"SETUP MIME length", func() ([]byte, error) {
			return AppendSetup(dst, &Setup{KeepaliveMillis: 1, LifetimeMillis: 1, DataMIME: strings.Repeat("a", 256)}, nil, nil)
		}, "rsocket: append SETUP: MIME type of 256 bytes, at most 255"},
		{"SETUP MIME bytes", func() ([]byte, error) {
			return AppendSetup(dst, &Setup{KeepaliveMillis: 1, LifetimeMillis: 1, MetadataMIME: "a\n"}, nil, nil)
		}, `rsocket: append SETUP: MIME type "a\n": not printable US-ASCII`},
		{"REQUEST_STREAM n", func() ([]byte, error) { return AppendRequestStream(dst, 1, 0, nil, nil) },
			"rsocket: append REQUEST_STREAM: initial request n 0, must be 1..2147483647"},
		{"REQUEST_STREAM stream", func() ([]byte, error) { return AppendRequestStream(dst, 0, 1, nil, nil) },
			"rsocket: append REQUEST_STREAM: stream id 0, must be 1..2147483647"},
		{"REQUEST_N n", func() ([]byte, error) { return AppendRequestN(dst, 1, 1<<31) },
			"rsocket: append REQUEST_N: request n 2147483648, must be 1..2147483647"},
		{"CANCEL stream", func() ([]byte, error) { return AppendCancel(dst, 0) },
			"rsocket: append CANCEL: stream id 0, must be 1..2147483647"},
	} {
		got, err := tc.do()
		if err == nil || err.Error() != tc.err {
			t.Errorf("%s: error %v, want %s", tc.name, err, tc.err)
		}
		if string(got) != "keep" {
			t.Errorf("%s: dst became %q", tc.name, got)
		}
	}
}
