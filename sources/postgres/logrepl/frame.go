package logrepl

import (
	"bytes"
	"encoding/binary"
	"fmt"
)

// checkFrame verifies that data is one well-formed pgoutput protocol v1
// message before it is handed to pglogrepl.Parse. Row changes (Insert,
// Update, Delete) never are: parseDML reads them with the same checks. pglogrepl indexes its
// input without bounds checks (a truncated or corrupt message would panic
// the process, and a bogus Truncate relation count would allocate
// gigabytes), so every length and terminator is checked here first. The
// layouts are those of the PostgreSQL "Logical Replication Message
// Formats" documentation, protocol version 1.
func checkFrame(data []byte) error {
	if len(data) == 0 {
		return fmt.Errorf("empty pgoutput message")
	}
	r := frameReader{b: data[1:]}
	switch data[0] {
	case 'B': // Begin: final LSN, commit time, xid
		r.skip(8 + 8 + 4)
	case 'C': // Commit: flags, commit LSN, end LSN, commit time
		r.skip(1 + 8 + 8 + 8)
	case 'O': // Origin: commit LSN, name
		r.skip(8)
		r.cstring()
	case 'R': // Relation
		r.skip(4)
		r.cstring()
		r.cstring()
		r.skip(1)
		n := r.uint16()
		for i := 0; i < n && r.err == nil; i++ {
			r.skip(1)
			r.cstring()
			r.skip(4 + 4)
		}
	case 'Y': // Type: oid, namespace, name
		r.skip(4)
		r.cstring()
		r.cstring()
	case 'T': // Truncate: relation count, options, relation ids
		n := r.uint32()
		r.skip(1)
		if r.err == nil && uint64(len(r.b)) != 4*uint64(n) {
			r.fail("truncate relation list")
		}
		r.skip(len(r.b))
	case 'M': // Message: flags, LSN, prefix, content length, content
		r.skip(1 + 8)
		r.cstring()
		n := r.uint32()
		if r.err == nil && uint64(n) > uint64(len(r.b)) {
			r.fail("message content")
		}
		r.skip(len(r.b))
	default:
		return fmt.Errorf("unsupported pgoutput message type %q (protocol version 1 expected)", data[0])
	}
	if r.err != nil {
		return fmt.Errorf("malformed pgoutput %q message: %w", data[0], r.err)
	}
	return nil
}

// frameReader walks a message, remembering the first problem.
type frameReader struct {
	b   []byte
	err error
}

func (r *frameReader) fail(what string) {
	if r.err == nil {
		r.err = fmt.Errorf("bad or truncated %s", what)
	}
	r.b = nil
}

func (r *frameReader) skip(n int) {
	if r.err != nil {
		return
	}
	if n > len(r.b) {
		r.fail("field")
		return
	}
	r.b = r.b[n:]
}

func (r *frameReader) byte1() byte {
	if r.err != nil || len(r.b) < 1 {
		r.fail("field")
		return 0
	}
	c := r.b[0]
	r.b = r.b[1:]
	return c
}

func (r *frameReader) expect(c byte) {
	if got := r.byte1(); r.err == nil && got != c {
		r.fail(fmt.Sprintf("tuple marker (want %q, got %q)", c, got))
	}
}

func (r *frameReader) uint16() int {
	if r.err != nil || len(r.b) < 2 {
		r.fail("field")
		return 0
	}
	v := binary.BigEndian.Uint16(r.b)
	r.b = r.b[2:]
	return int(v)
}

func (r *frameReader) uint32() uint32 {
	if r.err != nil || len(r.b) < 4 {
		r.fail("field")
		return 0
	}
	v := binary.BigEndian.Uint32(r.b)
	r.b = r.b[4:]
	return v
}

func (r *frameReader) cstring() {
	if r.err != nil {
		return
	}
	i := bytes.IndexByte(r.b, 0)
	if i < 0 {
		r.fail("string")
		return
	}
	r.b = r.b[i+1:]
}
