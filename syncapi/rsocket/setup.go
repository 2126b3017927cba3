package rsocket

import (
	"encoding/binary"
	"fmt"
)

// The version the server speaks: RSocket 1.0, what rsocket-js (the
// PowerSync clients' and service's library) sends. Every version change
// is incompatible (the specification), so no other is accepted.
const (
	MajorVersion = 1
	MinorVersion = 0
)

// setup reads a SETUP frame. Every structural fault is INVALID_SETUP; a
// version other than 1.0 is UNSUPPORTED_SETUP, checked first because
// another version may lay the rest out otherwise; resumption is
// REJECTED_SETUP and leases are UNSUPPORTED_SETUP (what the
// specification asks of a server without them), once the frame is
// known to be well formed.
func (p *parser) setup() error {
	p.keep(FlagMetadata | FlagResume | FlagLease)
	if err := p.onConnection(); err != nil {
		return err
	}
	if len(p.body) < 4 {
		return p.fail("version", "truncated: %d of 4 bytes", len(p.body))
	}
	s := &p.f.Setup
	s.Major, s.Minor = binary.BigEndian.Uint16(p.body), binary.BigEndian.Uint16(p.body[2:])
	if s.Major != MajorVersion || s.Minor != MinorVersion {
		p.code = CodeUnsupportedSetup
		return p.fail("version", "%d.%d, the server speaks %d.%d", s.Major, s.Minor, MajorVersion, MinorVersion)
	}
	p.body = p.body[4:]
	var err error
	if s.KeepaliveMillis, err = p.u31("keepalive interval"); err != nil {
		return err
	}
	if s.LifetimeMillis, err = p.u31("max lifetime"); err != nil {
		return err
	}
	if p.f.Flags&FlagResume != 0 {
		if len(p.body) < 2 {
			return p.fail("resume token length", "truncated: %d of 2 bytes", len(p.body))
		}
		n := int(binary.BigEndian.Uint16(p.body))
		if n > len(p.body)-2 {
			return p.fail("resume token length", "%d, but %d bytes are left", n, len(p.body)-2)
		}
		p.body = p.body[2+n:] // the token is not kept: resumption is refused below
	}
	if s.MetadataMIME, err = p.mime("metadata MIME type"); err != nil {
		return err
	}
	if s.DataMIME, err = p.mime("data MIME type"); err != nil {
		return err
	}
	if err := p.payloadData(); err != nil {
		return err
	}
	if p.f.Flags&FlagResume != 0 {
		p.code = CodeRejectedSetup
		return p.fail("resume flag", "resumption is not supported")
	}
	if p.f.Flags&FlagLease != 0 {
		p.code = CodeUnsupportedSetup
		return p.fail("lease flag", "leases are not supported")
	}
	return nil
}

// mime reads a MIME type: a length byte, then that many US-ASCII bytes
// (printable: they end up in logs).
func (p *parser) mime(field string) (string, error) {
	if len(p.body) < 1 {
		return "", p.fail(field, "length truncated")
	}
	n := int(p.body[0])
	if n > len(p.body)-1 {
		return "", p.fail(field, "length %d, but %d bytes are left", n, len(p.body)-1)
	}
	m := p.body[1 : 1+n]
	for i, c := range m {
		if c < 0x20 || c > 0x7E {
			return "", p.fail(field, "byte %d is 0x%02X, not printable US-ASCII", i, c)
		}
	}
	p.body = p.body[1+n:]
	return string(m), nil
}

// Encoding is how a connection's metadata or data are encoded.
type Encoding uint8

// The encodings PowerSync's service decodes (its clients send JSON).
const (
	EncodingJSON Encoding = iota + 1
	EncodingBSON
)

// The MIME types of the encodings, compared exactly as PowerSync's
// service does.
const (
	MIMEJSON = "application/json"
	MIMEBSON = "application/bson"
)

// Encodings returns the encodings of the connection's metadata and data,
// or an *Error (REJECTED_SETUP, as PowerSync's service refuses a setup
// it cannot decode) when one is neither JSON nor BSON. The sync lines the
// server sends are BSON whatever the data encoding: the encodings are
// those of what the client sends.
func (s *Setup) Encodings() (metadata, data Encoding, err error) {
	if metadata, err = encoding("metadata MIME type", s.MetadataMIME); err != nil {
		return 0, 0, err
	}
	if data, err = encoding("data MIME type", s.DataMIME); err != nil {
		return 0, 0, err
	}
	return metadata, data, nil
}

func encoding(field, mime string) (Encoding, error) {
	switch mime {
	case MIMEJSON:
		return EncodingJSON, nil
	case MIMEBSON:
		return EncodingBSON, nil
	}
	return 0, &Error{Code: CodeRejectedSetup, Frame: TypeSetup, Field: field,
		Problem: fmt.Sprintf("%q: expected %s or %s", mime, MIMEJSON, MIMEBSON)}
}
