package jsonl

import (
	"context"
	"fmt"
	"slices"
	"strconv"

	"github.com/syncpipe/syncpipe/model"
	"github.com/syncpipe/syncpipe/sinks"
)

// writer is one flush lane. It turns a batch into one buffer of lines per
// table and stages them with the sink; Commit appends them to the files in
// source order. Encoding is the work, so it is what the writers share out.
type writer struct {
	s      *Sink
	tables map[tableKey]*tableBuf
}

// tableKey identifies a table by value: sources may hand out a new
// *model.Table per batch, and a struct of two strings is looked up without
// allocating.
type tableKey struct{ schema, name string }

// tableBuf is a writer's per-table state: the file name and the table name
// as JSON, computed once.
type tableBuf struct {
	file     string // file name within the sink's directory
	nameJSON []byte // "schema.name" as a JSON string, encoded once
}

// Write encodes one line per change and stages the lines of each table for
// Commit, which makes them durable together with the batch's position (see
// the package doc: that is what keeps every line exactly once).
func (w *writer) Write(ctx context.Context, b sinks.Batch) error {
	if len(b.Items) == 0 {
		return nil
	}
	chunks := w.s.take()
	for i := range b.Items {
		c := &b.Items[i]
		if c.Table == nil {
			w.s.recycle(chunks)
			return fmt.Errorf("jsonl: change %d of batch %d has no table", i, b.Seq)
		}
		tb := w.table(c.Table)
		k := slices.IndexFunc(chunks, func(c chunk) bool { return c.file == tb.file })
		if k < 0 {
			// Reuse the buffer of a recycled chunk when there is one.
			if k = len(chunks); k < cap(chunks) {
				chunks = chunks[:k+1]
				chunks[k].file, chunks[k].lines = tb.file, chunks[k].lines[:0]
			} else {
				chunks = append(chunks, chunk{file: tb.file})
			}
		}
		chunks[k].lines = appendLine(chunks[k].lines, tb.nameJSON, c)
	}
	if err := ctx.Err(); err != nil {
		w.s.recycle(chunks)
		return err
	}
	return w.s.stage(b.Progress, chunks)
}

func (w *writer) table(t *model.Table) *tableBuf {
	k := tableKey{t.Schema, t.Name}
	if tb := w.tables[k]; tb != nil {
		return tb
	}
	full := t.String()
	tb := &tableBuf{file: FileName(t.Schema, t.Name), nameJSON: model.AppendJSONString(nil, full)}
	w.tables[k] = tb
	return tb
}

// FileName returns the name of the file that holds the changes of table
// schema.name within the sink's directory. Characters that are unsafe in a
// file name ('/', '\', '%', control characters) are written as %XX, so a
// table name can never point outside the directory.
func FileName(schema, name string) string {
	b := make([]byte, 0, len(schema)+len(name)+7)
	b = appendEscapedName(b, schema)
	b = append(b, '.')
	b = appendEscapedName(b, name)
	return string(append(b, ".jsonl"...))
}

func appendEscapedName(b []byte, s string) []byte {
	const hex = "0123456789ABCDEF"
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == '/' || c == '\\' || c == '%' || c < 0x20 || c == 0x7f {
			b = append(b, '%', hex[c>>4], hex[c&0xf])
			continue
		}
		b = append(b, c)
	}
	return b
}

// AppendChanges appends changes to b as a JSON array of the objects the
// sink writes as lines (fields as in the package doc), for programs that
// deliver changes elsewhere in the same form: examples/httpsink POSTs
// them. A change without a table has "table":null.
func AppendChanges(b []byte, changes []model.Change) []byte {
	b = append(b, '[')
	for i := range changes {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendChange(b, nil, &changes[i])
	}
	return append(b, ']')
}

// appendLine appends the JSON line of c; tableJSON is its table's name as
// a JSON string, which writers encode once per table.
func appendLine(b, tableJSON []byte, c *model.Change) []byte {
	return append(appendChange(b, tableJSON, c), '\n')
}

// appendChange appends the JSON object of c, field by field, with no
// intermediate values: the sink's cost per row is what it writes. A nil
// tableJSON is encoded from c.Table here.
func appendChange(b, tableJSON []byte, c *model.Change) []byte {
	b = append(b, `{"kind":`...)
	switch c.Kind {
	case model.Upsert:
		b = append(b, `"upsert"`...)
	case model.Delete:
		b = append(b, `"delete"`...)
	default:
		b = model.AppendJSONString(b, c.Kind.String())
	}
	b = append(b, `,"table":`...)
	switch {
	case tableJSON != nil:
		b = append(b, tableJSON...)
	case c.Table != nil:
		b = model.AppendJSONString(b, c.Table.String())
	default:
		b = append(b, "null"...)
	}
	b = append(b, `,"key":"`...)
	b = appendUUID(b, &c.Key)
	b = append(b, '"')
	if c.TxnLSN != 0 {
		b = append(b, `,"lsn":"`...)
		b = appendLSN(b, c.TxnLSN)
		b = append(b, `","i":`...)
		b = strconv.AppendInt(b, c.TxnIndex, 10)
	}
	b = append(b, `,"puts":[`...)
	for i := range c.Puts {
		p := &c.Puts[i]
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"bucket":`...)
		b = model.AppendJSONString(b, p.Bucket)
		b = append(b, `,"object_type":`...)
		b = model.AppendJSONString(b, p.ObjectType)
		b = append(b, `,"object_id":`...)
		b = model.AppendJSONString(b, p.ObjectID)
		b = append(b, `,"checksum":`...)
		b = strconv.AppendUint(b, uint64(p.Checksum), 10)
		b = append(b, `,"data":`...)
		b = appendRaw(b, p.Data)
		b = append(b, '}')
	}
	b = append(b, `],"lookups":[`...)
	for i := range c.Lookups {
		l := &c.Lookups[i]
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"key":`...)
		b = model.AppendJSONString(b, l.Key)
		b = append(b, `,"params":`...)
		b = appendRaw(b, l.Params)
		b = append(b, '}')
	}
	return append(b, "]}"...)
}

// appendRaw embeds JSON produced by the sync rules as is; an absent value
// becomes null so that the line stays valid JSON.
func appendRaw(b, raw []byte) []byte {
	if len(raw) == 0 {
		return append(b, "null"...)
	}
	return append(b, raw...)
}

// appendLSN appends an LSN in PostgreSQL's text form, as 0/16B3748.
func appendLSN(b []byte, lsn uint64) []byte {
	start := len(b)
	b = strconv.AppendUint(b, lsn>>32, 16)
	b = append(b, '/')
	b = strconv.AppendUint(b, lsn&0xffffffff, 16)
	for i := start; i < len(b); i++ {
		if 'a' <= b[i] && b[i] <= 'f' {
			b[i] -= 'a' - 'A'
		}
	}
	return b
}

func appendUUID(b []byte, u *[16]byte) []byte {
	const hex = "0123456789abcdef"
	for i, c := range u {
		if i == 4 || i == 6 || i == 8 || i == 10 {
			b = append(b, '-')
		}
		b = append(b, hex[c>>4], hex[c&0xf])
	}
	return b
}

// appendString appends s as a JSON string (invalid UTF-8 becomes U+FFFD),
// with the escaper the rest of syncpipe uses.
func appendString[S ~string | ~[]byte](b []byte, s S) []byte {
	return model.AppendJSONString(b, s)
}
