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
// The server sends PAYLOAD, ERROR and KEEPALIVE frames. A client's
// frames (SETUP, REQUEST_STREAM, REQUEST_N, CANCEL) are appended by
// clientframes_test.go, for this package's tests only: no command sends
// them, and CI's dead code check (.ci/deadcode.sh) refuses product code
// that only tests reach. syncapi's tests and the benchmarks write theirs
// with internal/testkit/rsocketclient.

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
