package rsocket

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"
)

// FuzzRSocketFrame: Parse never panics, fails only with an *Error (with
// a code and a message) or ErrIgnored, and a frame it reads re-encodes,
// with the appender of its type, to the bytes read, but for the flags
// the type does not define (dropped).
func FuzzRSocketFrame(f *testing.F) {
	for _, tc := range malformed {
		f.Add(unhex(f, tc.frame))
	}
	for _, tc := range roundTrips {
		b, err := encode(nil, &tc.want)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add(append(unhex(f, jsSetup), jsSetupMetadata...))
	f.Add(append(append(unhex(f, jsRequestStream), jsRequestMetadata...), jsSyncRequest...))
	f.Add(unhex(f, "00000001 fe00 00000007 aabb"))
	f.Fuzz(func(t *testing.T, b []byte) {
		fr, err := Parse(b)
		var perr *Error
		switch {
		case errors.Is(err, ErrIgnored):
			return
		case errors.As(err, &perr):
			if perr.Code == 0 || perr.Field == "" || perr.Problem == "" {
				t.Fatalf("incomplete error %#v", perr)
			}
			return
		case err != nil:
			t.Fatalf("Parse error of type %T: %v", err, err)
		}
		again, err := encode(nil, &fr)
		if err != nil {
			t.Fatalf("re-encoding %+v: %v", fr, err)
		}
		if len(again) != len(b) || !bytes.Equal(again[:4], b[:4]) || !bytes.Equal(again[6:], b[6:]) {
			t.Fatalf("re-encoded\n got %x\nwant %x", again, b)
		}
		in, out := binary.BigEndian.Uint16(b[4:]), binary.BigEndian.Uint16(again[4:])
		if in>>10 != out>>10 || out&^in != 0 || Flags(out)&flagsMask != fr.Flags {
			t.Fatalf("type and flags 0x%04X re-encoded as 0x%04X (flags kept %v)", in, out, fr.Flags)
		}
	})
}
