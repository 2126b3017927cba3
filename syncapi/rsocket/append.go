package rsocket

import (
	"encoding/binary"
	"fmt"
)

// The appenders encode one frame each at the end of dst, ready to be sent
// as one WebSocket binary message, and allocate nothing beyond growing
// dst. They refuse values the encoding cannot hold (an error, and dst
// unchanged) rather than send a frame the peer would misread.
//
// The server sends PAYLOAD, ERROR and KEEPALIVE frames; SETUP,
// REQUEST_STREAM, REQUEST_N and CANCEL are a client's, for the tests and
// the transport's raw protocol test (a client that requests one line at
// a time).

// appendHeader appends the stream id and the type and flags.
func appendHeader(dst []byte, id uint32, t Type, flags Flags) []byte {
	dst = binary.BigEndian.AppendUint32(dst, id)
	return binary.BigEndian.AppendUint16(dst, uint16(t)<<10|uint16(flags&flagsMask))
}

// appendPayload appends metadata (after its length) when it is not nil,
// then data.
func appendPayload(dst, metadata, data []byte) []byte {
	if metadata != nil {
		n := len(metadata)
		dst = append(dst, byte(n>>16), byte(n>>8), byte(n))
		dst = append(dst, metadata...)
	}
	return append(dst, data...)
}

// metadataFlag is FlagMetadata when there is metadata (not nil).
func metadataFlag(metadata []byte) Flags {
	if metadata != nil {
		return FlagMetadata
	}
	return 0
}

func checkStream(op string, id uint32) error {
	if id == 0 || id > MaxStreamID {
		return fmt.Errorf("rsocket: append %s: stream id %d, must be 1..%d", op, id, MaxStreamID)
	}
	return nil
}

func checkN(op, field string, n uint32) error {
	if n == 0 || n > MaxN {
		return fmt.Errorf("rsocket: append %s: %s %d, must be 1..%d", op, field, n, MaxN)
	}
	return nil
}

func checkMetadata(op string, metadata []byte) error {
	if len(metadata) > MaxMetadata {
		return fmt.Errorf("rsocket: append %s: metadata of %d bytes, at most %d", op, len(metadata), MaxMetadata)
	}
	return nil
}

// AppendPayload appends a PAYLOAD frame on stream id. flags are FlagNext
// (the frame carries a payload: a sync line is data with FlagNext),
// FlagComplete (the stream ends: alone, after the last line), or both;
// FlagMetadata is set from metadata (nil: none), other flags are dropped.
func AppendPayload(dst []byte, id uint32, metadata, data []byte, flags Flags) ([]byte, error) {
	flags &= FlagNext | FlagComplete
	if err := checkStream("PAYLOAD", id); err != nil {
		return dst, err
	}
	if flags == 0 {
		return dst, fmt.Errorf("rsocket: append PAYLOAD: neither NEXT nor COMPLETE is set")
	}
	if err := checkMetadata("PAYLOAD", metadata); err != nil {
		return dst, err
	}
	dst = appendHeader(dst, id, TypePayload, flags|metadataFlag(metadata))
	return appendPayload(dst, metadata, data), nil
}

// AppendError appends an ERROR frame: on stream 0 a connection error
// (the sender closes the connection after it), else the end of that
// stream. msg is the error's UTF-8 message.
func AppendError(dst []byte, id uint32, code ErrorCode, msg string) ([]byte, error) {
	if id > MaxStreamID {
		return dst, fmt.Errorf("rsocket: append ERROR: stream id %d, at most %d", id, MaxStreamID)
	}
	if code == 0 {
		return dst, fmt.Errorf("rsocket: append ERROR: error code 0 is reserved")
	}
	dst = appendHeader(dst, id, TypeError, 0)
	dst = binary.BigEndian.AppendUint32(dst, uint32(code))
	return append(dst, msg...), nil
}

// AppendServiceError appends an ERROR frame carrying a PowerSync error
// the way PowerSync's service sends one: the message is
// "[<psyncCode>] <description>" (its ServiceError's message), which the
// clients search for "PSYNC_" (an S21xx code makes them drop their
// credentials and fetch a new token). code is REJECTED_SETUP for an error
// while accepting the SETUP (stream 0: token, connection limit) and
// APPLICATION_ERROR for one on the sync stream.
func AppendServiceError(dst []byte, id uint32, code ErrorCode, psyncCode, description string) ([]byte, error) {
	out, err := AppendError(dst, id, code, "[")
	if err != nil {
		return dst, err
	}
	out = append(out, psyncCode...)
	out = append(out, "] "...)
	return append(out, description...), nil
}

// AppendKeepalive appends a KEEPALIVE frame (stream 0). The server answers
// a client's KEEPALIVE that has FlagRespond with one without it, with the
// same data, and position 0 (no resumption).
func AppendKeepalive(dst []byte, respond bool, position uint64, data []byte) ([]byte, error) {
	if position > 1<<63-1 {
		return dst, fmt.Errorf("rsocket: append KEEPALIVE: last received position %d, at most %d", position, uint64(1<<63-1))
	}
	var flags Flags
	if respond {
		flags = FlagRespond
	}
	dst = appendHeader(dst, 0, TypeKeepalive, flags)
	dst = binary.BigEndian.AppendUint64(dst, position)
	return append(dst, data...), nil
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
