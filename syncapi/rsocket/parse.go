package rsocket

import (
	"encoding/binary"
	"fmt"
)

// Parse reads one frame: the whole of one WebSocket binary message (over
// WebSocket a frame has no length prefix; doc.go). It returns an *Error
// for a frame that is malformed or that the server does not serve, and
// ErrIgnored for one to skip. The frame's slices alias b.
//
// Served: SETUP (version 1.0 only, without resumption or leases),
// REQUEST_STREAM, REQUEST_N, CANCEL, KEEPALIVE, PAYLOAD and ERROR, none
// fragmented. Refused: REQUEST_RESPONSE, REQUEST_FNF, REQUEST_CHANNEL,
// METADATA_PUSH, LEASE, RESUME, RESUME_OK (RESUME with REJECTED_RESUME,
// the others with CONNECTION_ERROR). EXT and unknown types are ignored
// when their FlagIgnore is set, else refused.
//
// Parse checks each frame alone. What depends on the connection's state
// is the connection's to check: that SETUP comes first and only once,
// that a request's stream id is odd (a client's) and new, that REQUEST_N
// and CANCEL name an open stream.
func Parse(b []byte) (Frame, error) {
	if len(b) < headerSize {
		return Frame{}, &Error{Code: CodeConnectionError, Frame: TypeReserved, Field: "header",
			Problem: fmt.Sprintf("%d bytes, a frame header has %d", len(b), headerSize)}
	}
	id := binary.BigEndian.Uint32(b)
	tf := binary.BigEndian.Uint16(b[4:])
	// The frame is built in the parser, not pointed to by it: it stays
	// on the stack (no allocation per frame).
	p := parser{body: b[headerSize:], code: CodeConnectionError}
	p.f.StreamID, p.f.Type, p.f.Flags = id&MaxStreamID, Type(tf>>10), Flags(tf)&flagsMask
	if p.f.Type == TypeSetup {
		p.code = CodeInvalidSetup // anything wrong in a SETUP is an invalid setup
	}
	if len(b) > MaxFrameSize {
		return p.f, p.fail("size", "%d bytes, at most %d", len(b), MaxFrameSize)
	}
	if id > MaxStreamID {
		return p.f, p.fail("stream id", "the reserved top bit is set (0x%08X)", id)
	}
	var err error
	switch p.f.Type {
	case TypeSetup:
		err = p.setup()
	case TypeRequestStream:
		err = p.requestStream()
	case TypeRequestN:
		err = p.requestN()
	case TypeCancel:
		err = p.cancel()
	case TypeKeepalive:
		err = p.keepalive()
	case TypePayload:
		err = p.payload()
	case TypeError:
		err = p.errorFrame()
	case TypeResume:
		p.code = CodeRejectedResume
		err = p.fail("frame type", "resumption is not supported")
	case TypeRequestResponse, TypeRequestFNF, TypeRequestChannel, TypeMetadataPush, TypeLease, TypeResumeOK:
		err = p.fail("frame type", "not served: PowerSync clients send SETUP, REQUEST_STREAM, REQUEST_N, CANCEL, KEEPALIVE and ERROR only")
	default: // EXT, RESERVED and unassigned types
		if p.f.Flags&FlagIgnore != 0 {
			p.f.Flags &= FlagIgnore | FlagMetadata
			return p.f, ErrIgnored
		}
		err = p.fail("frame type", "not understood, and its ignore flag is not set")
	}
	return p.f, err
}

// parser reads the body of one frame into f: body is what is left of the
// frame after what was read, code the error code of its failures.
type parser struct {
	f    Frame
	body []byte
	code ErrorCode
}

func (p *parser) fail(field, format string, args ...any) *Error {
	return &Error{Code: p.code, Frame: p.f.Type, Field: field, Problem: fmt.Sprintf(format, args...)}
}

// keep keeps the flags of want that are set, dropping the rest.
func (p *parser) keep(want Flags) { p.f.Flags &= want }

// onStream checks the stream id of a frame about one stream (not 0).
func (p *parser) onStream() error {
	if p.f.StreamID == 0 {
		return p.fail("stream id", "0, but a %v frame belongs to a stream", p.f.Type)
	}
	return nil
}

// onConnection checks the stream id of a frame about the connection (0).
func (p *parser) onConnection() error {
	if p.f.StreamID != 0 {
		return p.fail("stream id", "%d, but a %v frame belongs to the connection (0)", p.f.StreamID, p.f.Type)
	}
	return nil
}

// unfragmented refuses FlagFollows: neither PowerSync's clients nor its
// server fragment (doc.go), so there is no reassembly.
func (p *parser) unfragmented() error {
	if p.f.Flags&FlagFollows != 0 {
		return p.fail("follows flag", "fragmented payloads are not supported")
	}
	return nil
}

// u31 reads a 31-bit count that must be positive (request n, keepalive
// interval, max lifetime).
func (p *parser) u31(field string) (uint32, error) {
	if len(p.body) < 4 {
		return 0, p.fail(field, "truncated: %d of 4 bytes", len(p.body))
	}
	v := binary.BigEndian.Uint32(p.body)
	if v == 0 || v > MaxN {
		return 0, p.fail(field, "%d, must be 1..%d", int32(v), MaxN)
	}
	p.body = p.body[4:]
	return v, nil
}

// end checks that nothing is left of a fixed-size frame.
func (p *parser) end() error {
	if len(p.body) != 0 {
		return p.fail("length", "%d bytes after the frame's end", len(p.body))
	}
	return nil
}

// payloadData reads the optional metadata and the data, the rest.
func (p *parser) payloadData() error {
	if p.f.Flags&FlagMetadata != 0 {
		if len(p.body) < 3 {
			return p.fail("metadata length", "truncated: %d of 3 bytes", len(p.body))
		}
		n := int(p.body[0])<<16 | int(p.body[1])<<8 | int(p.body[2])
		if n > len(p.body)-3 {
			return p.fail("metadata length", "%d, but %d bytes are left", n, len(p.body)-3)
		}
		p.f.Metadata, p.body = p.body[3:3+n:3+n], p.body[3+n:]
	}
	p.f.Data, p.body = p.body, nil
	return nil
}

func (p *parser) requestStream() error {
	p.keep(FlagMetadata | FlagFollows)
	if err := p.onStream(); err != nil {
		return err
	}
	if err := p.unfragmented(); err != nil {
		return err
	}
	n, err := p.u31("initial request n")
	if err != nil {
		return err
	}
	p.f.N = n
	return p.payloadData()
}

func (p *parser) requestN() error {
	p.keep(0)
	if err := p.onStream(); err != nil {
		return err
	}
	n, err := p.u31("request n")
	if err != nil {
		return err
	}
	p.f.N = n
	return p.end()
}

func (p *parser) cancel() error {
	p.keep(0)
	if err := p.onStream(); err != nil {
		return err
	}
	return p.end()
}

func (p *parser) keepalive() error {
	p.keep(FlagRespond)
	if err := p.onConnection(); err != nil {
		return err
	}
	if len(p.body) < 8 {
		return p.fail("last received position", "truncated: %d of 8 bytes", len(p.body))
	}
	pos := binary.BigEndian.Uint64(p.body)
	if pos > 1<<63-1 {
		return p.fail("last received position", "the reserved top bit is set")
	}
	p.f.Position, p.f.Data, p.body = pos, p.body[8:], nil
	return nil
}

func (p *parser) payload() error {
	p.keep(FlagMetadata | FlagFollows | FlagComplete | FlagNext)
	if err := p.onStream(); err != nil {
		return err
	}
	if err := p.unfragmented(); err != nil {
		return err
	}
	if p.f.Flags&(FlagNext|FlagComplete) == 0 {
		return p.fail("flags", "neither NEXT nor COMPLETE is set")
	}
	return p.payloadData()
}

func (p *parser) errorFrame() error {
	p.keep(0)
	if len(p.body) < 4 {
		return p.fail("error code", "truncated: %d of 4 bytes", len(p.body))
	}
	code := ErrorCode(binary.BigEndian.Uint32(p.body))
	if code == 0 {
		return p.fail("error code", "0 is reserved")
	}
	p.f.Code, p.f.Data, p.body = code, p.body[4:], nil
	return nil
}
