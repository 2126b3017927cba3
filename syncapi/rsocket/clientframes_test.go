package rsocket

import (
	"encoding/binary"
	"fmt"
)

// A client's frames, for the tests: the server never sends them (see
// append.go).

func checkN(op, field string, n uint32) error {
	if n == 0 || n > MaxN {
		return fmt.Errorf("rsocket: append %s: %s %d, must be 1..%d", op, field, n, MaxN)
	}
	return nil
}

// AppendSetup appends a client's SETUP frame (stream 0) for s, version
// s.Major.s.Minor, with metadata (nil: none) and data.
func AppendSetup(dst []byte, s *Setup, metadata, data []byte) ([]byte, error) {
	if err := checkN("SETUP", "keepalive interval", s.KeepaliveMillis); err != nil {
		return dst, err
	}
	if err := checkN("SETUP", "max lifetime", s.LifetimeMillis); err != nil {
		return dst, err
	}
	for _, m := range [2]string{s.MetadataMIME, s.DataMIME} {
		if len(m) > 255 {
			return dst, fmt.Errorf("rsocket: append SETUP: MIME type of %d bytes, at most 255", len(m))
		}
		for i := range len(m) {
			if m[i] < 0x20 || m[i] > 0x7E {
				return dst, fmt.Errorf("rsocket: append SETUP: MIME type %q: not printable US-ASCII", m)
			}
		}
	}
	if err := checkMetadata("SETUP", metadata); err != nil {
		return dst, err
	}
	dst = appendHeader(dst, 0, TypeSetup, metadataFlag(metadata))
	dst = binary.BigEndian.AppendUint16(dst, s.Major)
	dst = binary.BigEndian.AppendUint16(dst, s.Minor)
	dst = binary.BigEndian.AppendUint32(dst, s.KeepaliveMillis)
	dst = binary.BigEndian.AppendUint32(dst, s.LifetimeMillis)
	dst = append(dst, byte(len(s.MetadataMIME)))
	dst = append(dst, s.MetadataMIME...)
	dst = append(dst, byte(len(s.DataMIME)))
	dst = append(dst, s.DataMIME...)
	return appendPayload(dst, metadata, data), nil
}

// AppendRequestStream appends a client's REQUEST_STREAM frame asking for
// n payloads at first, with metadata (nil: none) and data.
func AppendRequestStream(dst []byte, id, n uint32, metadata, data []byte) ([]byte, error) {
	if err := checkStream("REQUEST_STREAM", id); err != nil {
		return dst, err
	}
	if err := checkN("REQUEST_STREAM", "initial request n", n); err != nil {
		return dst, err
	}
	if err := checkMetadata("REQUEST_STREAM", metadata); err != nil {
		return dst, err
	}
	dst = appendHeader(dst, id, TypeRequestStream, metadataFlag(metadata))
	dst = binary.BigEndian.AppendUint32(dst, n)
	return appendPayload(dst, metadata, data), nil
}

// AppendRequestN appends a client's REQUEST_N frame: n more payloads on
// stream id.
func AppendRequestN(dst []byte, id, n uint32) ([]byte, error) {
	if err := checkStream("REQUEST_N", id); err != nil {
		return dst, err
	}
	if err := checkN("REQUEST_N", "request n", n); err != nil {
		return dst, err
	}
	dst = appendHeader(dst, id, TypeRequestN, 0)
	return binary.BigEndian.AppendUint32(dst, n), nil
}

// AppendCancel appends a client's CANCEL frame for stream id.
func AppendCancel(dst []byte, id uint32) ([]byte, error) {
	if err := checkStream("CANCEL", id); err != nil {
		return dst, err
	}
	return appendHeader(dst, id, TypeCancel, 0), nil
}
