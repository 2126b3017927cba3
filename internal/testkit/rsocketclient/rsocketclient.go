// Package rsocketclient writes the frames a PowerSync client sends over
// the sync API's WebSocket transport (syncapi/rsocket/doc.go has the
// protocol), for the tests and the benchmarks that play such a client.
// The product never sends them: syncapi/rsocket appends the server's
// frames only (CI's dead code check refuses code only tests reach), and
// parses these.
package rsocketclient

import (
	"encoding/binary"

	"github.com/syncpipe/syncpipe/syncapi/rsocket"
)

// header starts a frame: stream id, type and flags.
func header(id uint32, typ rsocket.Type, flags rsocket.Flags) []byte {
	b := binary.BigEndian.AppendUint32(nil, id)
	return binary.BigEndian.AppendUint16(b, uint16(typ)<<10|uint16(flags))
}

// withMetadata appends metadata after its 24-bit length.
func withMetadata(b, meta []byte) []byte {
	n := len(meta)
	return append(append(b, byte(n>>16), byte(n>>8), byte(n)), meta...)
}

// Setup is the JS client's SETUP: version 1.0, the keepalive interval and
// max lifetime in milliseconds, JSON metadata and data, the metadata
// (the JSON {"token": "Token <jwt>", "user_agent": …}) and no data.
func Setup(metadata []byte, keepaliveMS, lifetimeMS uint32) []byte {
	b := header(0, rsocket.TypeSetup, rsocket.FlagMetadata)
	b = binary.BigEndian.AppendUint16(b, rsocket.MajorVersion)
	b = binary.BigEndian.AppendUint16(b, rsocket.MinorVersion)
	b = binary.BigEndian.AppendUint32(b, keepaliveMS)
	b = binary.BigEndian.AppendUint32(b, lifetimeMS)
	for range 2 {
		b = append(b, byte(len(rsocket.MIMEJSON)))
		b = append(b, rsocket.MIMEJSON...)
	}
	return withMetadata(b, metadata)
}

// RequestStream is the JS client's REQUEST_STREAM on stream id asking
// for n lines at first: metadata {"path":"/sync/stream"}, the sync
// request (JSON) as data.
func RequestStream(id, n uint32, request []byte) []byte {
	b := binary.BigEndian.AppendUint32(header(id, rsocket.TypeRequestStream, rsocket.FlagMetadata), n)
	return append(withMetadata(b, []byte(`{"path":"/sync/stream"}`)), request...)
}

// RequestN asks for n more lines on stream id.
func RequestN(id, n uint32) []byte {
	return binary.BigEndian.AppendUint32(header(id, rsocket.TypeRequestN, 0), n)
}

// Cancel cancels stream id.
func Cancel(id uint32) []byte { return header(id, rsocket.TypeCancel, 0) }

// Keepalive is a KEEPALIVE with RESPOND (the server answers it with the
// same data), last received position 0.
func Keepalive(data string) []byte {
	return append(binary.BigEndian.AppendUint64(header(0, rsocket.TypeKeepalive, rsocket.FlagRespond), 0), data...)
}

// Header is a frame's header alone, for frames a test builds by hand.
func Header(id uint32, typ rsocket.Type, flags rsocket.Flags) []byte { return header(id, typ, flags) }
