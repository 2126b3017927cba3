package rsocket

import (
	"errors"
	"fmt"
	"time"
)

// Type is a frame type: the high 6 bits of the 16 bits after the stream
// id.
type Type uint8

// The frame types of RSocket 1.0. The server serves SETUP, REQUEST_STREAM,
// REQUEST_N, CANCEL, KEEPALIVE, PAYLOAD and ERROR; Parse refuses the
// others (see Parse).
const (
	TypeReserved        Type = 0x00
	TypeSetup           Type = 0x01
	TypeLease           Type = 0x02
	TypeKeepalive       Type = 0x03
	TypeRequestResponse Type = 0x04
	TypeRequestFNF      Type = 0x05
	TypeRequestStream   Type = 0x06
	TypeRequestChannel  Type = 0x07
	TypeRequestN        Type = 0x08
	TypeCancel          Type = 0x09
	TypePayload         Type = 0x0A
	TypeError           Type = 0x0B
	TypeMetadataPush    Type = 0x0C
	TypeResume          Type = 0x0D
	TypeResumeOK        Type = 0x0E
	TypeExt             Type = 0x3F
)

var typeNames = [...]string{
	TypeReserved:        "RESERVED",
	TypeSetup:           "SETUP",
	TypeLease:           "LEASE",
	TypeKeepalive:       "KEEPALIVE",
	TypeRequestResponse: "REQUEST_RESPONSE",
	TypeRequestFNF:      "REQUEST_FNF",
	TypeRequestStream:   "REQUEST_STREAM",
	TypeRequestChannel:  "REQUEST_CHANNEL",
	TypeRequestN:        "REQUEST_N",
	TypeCancel:          "CANCEL",
	TypePayload:         "PAYLOAD",
	TypeError:           "ERROR",
	TypeMetadataPush:    "METADATA_PUSH",
	TypeResume:          "RESUME",
	TypeResumeOK:        "RESUME_OK",
}

// String is the type's name in the specification, or its number when it
// has none.
func (t Type) String() string {
	if t == TypeExt {
		return "EXT"
	}
	if int(t) < len(typeNames) {
		return typeNames[t]
	}
	return fmt.Sprintf("type 0x%02X", uint8(t))
}

// Flags are the low 10 bits after the stream id. Some bits mean different
// things for different frame types, hence the aliases.
type Flags uint16

const (
	// FlagIgnore (every type): the receiver may ignore the frame if it
	// does not understand it.
	FlagIgnore Flags = 0x200
	// FlagMetadata (every type with a payload): metadata is present,
	// after a 24-bit length.
	FlagMetadata Flags = 0x100
	// FlagFollows (requests, PAYLOAD): more fragments of this payload
	// follow. Refused: the PowerSync clients never fragment (doc.go).
	FlagFollows Flags = 0x80
	// FlagRespond (KEEPALIVE): the receiver must answer with a KEEPALIVE.
	FlagRespond Flags = 0x80
	// FlagResume (SETUP): the client asks for resumption. Refused.
	FlagResume Flags = 0x80
	// FlagLease (SETUP): the client will honour LEASE. Refused.
	FlagLease Flags = 0x40
	// FlagComplete (PAYLOAD): the stream ends with this frame.
	FlagComplete Flags = 0x40
	// FlagNext (PAYLOAD): the frame carries a payload (onNext).
	FlagNext Flags = 0x20

	flagsMask Flags = 0x3FF
)

// ErrorCode is the code of an ERROR frame.
type ErrorCode uint32

// The error codes of RSocket 1.0. The first six are connection errors
// (stream 0), the last four stream errors.
const (
	CodeInvalidSetup     ErrorCode = 0x001
	CodeUnsupportedSetup ErrorCode = 0x002
	CodeRejectedSetup    ErrorCode = 0x003
	CodeRejectedResume   ErrorCode = 0x004
	CodeConnectionError  ErrorCode = 0x101
	CodeConnectionClose  ErrorCode = 0x102
	CodeApplicationError ErrorCode = 0x201
	CodeRejected         ErrorCode = 0x202
	CodeCanceled         ErrorCode = 0x203
	CodeInvalid          ErrorCode = 0x204
)

// String is the code's name in the specification, or its number.
func (c ErrorCode) String() string {
	switch c {
	case CodeInvalidSetup:
		return "INVALID_SETUP"
	case CodeUnsupportedSetup:
		return "UNSUPPORTED_SETUP"
	case CodeRejectedSetup:
		return "REJECTED_SETUP"
	case CodeRejectedResume:
		return "REJECTED_RESUME"
	case CodeConnectionError:
		return "CONNECTION_ERROR"
	case CodeConnectionClose:
		return "CONNECTION_CLOSE"
	case CodeApplicationError:
		return "APPLICATION_ERROR"
	case CodeRejected:
		return "REJECTED"
	case CodeCanceled:
		return "CANCELED"
	case CodeInvalid:
		return "INVALID"
	}
	return fmt.Sprintf("code 0x%08X", uint32(c))
}

// Limits of the encoding.
const (
	// MaxStreamID is the largest stream id (31 bits; the top bit is
	// reserved).
	MaxStreamID = 1<<31 - 1
	// MaxN is the largest request n, and the largest keepalive interval
	// and max lifetime in milliseconds (31 bits).
	MaxN = 1<<31 - 1
	// MaxMetadata is the largest metadata (its length has 24 bits).
	MaxMetadata = 1<<24 - 1
	// MaxFrameSize is the largest frame Parse reads: the most a 24-bit
	// frame length can describe on the transports that need one.
	// WebSocket needs none, so nothing else bounds a frame; the
	// transport sets a smaller read limit (the sync request size) on
	// the WebSocket itself, so an oversized message is never read whole.
	MaxFrameSize = 1<<24 - 1
	// headerSize is the stream id and the type and flags.
	headerSize = 6
)

// Frame is one parsed frame. Its byte slices alias the buffer given to
// Parse: copy them to keep them past the buffer's reuse.
type Frame struct {
	StreamID uint32
	Type     Type
	// Flags are the flags the type defines, as received; the others
	// are dropped (the specification says not to interpret them), FlagIgnore
	// included: the frame was understood.
	Flags Flags
	// N is REQUEST_STREAM's initial request n, or REQUEST_N's n.
	N uint32
	// Code is ERROR's error code.
	Code ErrorCode
	// Position is KEEPALIVE's last received position (0 without
	// resumption).
	Position uint64
	// Metadata is nil unless FlagMetadata is set; then it is not nil,
	// even when empty.
	Metadata []byte
	// Data is the payload's data (SETUP, REQUEST_STREAM, PAYLOAD),
	// KEEPALIVE's data, or ERROR's message (UTF-8).
	Data []byte
	// Setup holds SETUP's own fields.
	Setup Setup
}

// Setup is what a SETUP frame says of the connection. Resumption and
// leases are refused, so their token and flag are not kept.
type Setup struct {
	Major, Minor uint16
	// KeepaliveMillis is the time between the client's KEEPALIVE frames;
	// LifetimeMillis how long the client waits for an answer to one
	// before it considers the connection dead (both > 0).
	KeepaliveMillis, LifetimeMillis uint32
	// MetadataMIME and DataMIME are the encodings of the metadata and
	// data of every payload on the connection (US-ASCII).
	MetadataMIME, DataMIME string
}

// Keepalive is the time between the client's KEEPALIVE frames.
func (s *Setup) Keepalive() time.Duration {
	return time.Duration(s.KeepaliveMillis) * time.Millisecond
}

// Lifetime is how long the client goes without an answer to its
// KEEPALIVE frames before it considers the connection dead; the server
// gives up on a client silent for as long.
func (s *Setup) Lifetime() time.Duration {
	return time.Duration(s.LifetimeMillis) * time.Millisecond
}

// Error is a frame that cannot be served: malformed, or asking for what
// the server does not do. Every one is a connection error: the server
// answers with an ERROR frame of Code on stream 0 and closes the
// connection. (The PowerSync clients send none of these frames, so the
// peer is not one of them, or is broken: refusing one request of it and
// going on would serve no client.)
type Error struct {
	Code ErrorCode
	// Frame is the frame's type (TypeReserved when its header could not
	// be read), Field the part of it that is wrong, Problem what.
	Frame   Type
	Field   string
	Problem string
}

func (e *Error) Error() string {
	return fmt.Sprintf("rsocket: %v frame: %s: %s", e.Frame, e.Field, e.Problem)
}

// ErrIgnored is returned by Parse for a frame the server does not
// understand whose sender allowed it to be ignored (FlagIgnore): skip
// it. The returned frame has its header fields only.
var ErrIgnored = errors.New("rsocket: frame not understood, ignored as its ignore flag allows")
