package jsonl

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/syncpipe/syncpipe/sinks"
	"github.com/syncpipe/syncpipe/stages"
	"github.com/syncpipe/syncpipe/stages/syncrules"
)

// writer is one flush lane. It turns a batch into one buffer of lines per
// table, then appends each buffer to its file under that file's lock in a
// single write, which is what keeps lines of concurrent writers whole.
type writer struct {
	s       *Sink
	tables  map[tableKey]*tableBuf
	touched []*tableBuf // tables of the current batch, in first-seen order
	files   []*file     // their files, reused from batch to batch
}

// tableKey identifies a table by value: sources may hand out a new
// *stages.Table per batch, and a struct of two strings is looked up without
// allocating.
type tableKey struct{ schema, name string }

// tableBuf is a writer's reusable line buffer for one table.
type tableBuf struct {
	file     string // file name within the sink's directory
	nameJSON []byte // "schema.name" as a JSON string, encoded once
	buf      []byte
}

// Write appends one line per change to the files of the tables in b and,
// unless fsync is off, fsyncs those files before returning, so a nil return
// means the batch is durable.
func (w *writer) Write(ctx context.Context, b sinks.Batch) error {
	for _, tb := range w.touched {
		tb.buf = tb.buf[:0]
	}
	w.touched = w.touched[:0]
	for i := range b.Items {
		c := &b.Items[i]
		if c.Table == nil {
			return fmt.Errorf("jsonl: change %d of batch %d has no table", i, b.Seq)
		}
		tb := w.table(c.Table)
		if len(tb.buf) == 0 {
			w.touched = append(w.touched, tb)
		}
		tb.buf = appendLine(tb.buf, tb.nameJSON, c)
	}
	files := w.files[:0]
	for _, tb := range w.touched {
		if err := ctx.Err(); err != nil {
			return err
		}
		f, err := w.s.file(tb.file)
		if err == nil {
			err = f.write(tb.buf)
		}
		if err != nil {
			return fmt.Errorf("jsonl: write %s: %w", tb.file, err)
		}
		files = append(files, f)
	}
	w.files = files
	if !w.s.fsync {
		return nil
	}
	// Outside the file locks: other writers keep appending while the disk
	// syncs, and a sync covers whatever reached the file before it.
	var errs []error
	for i, f := range files {
		if err := f.f.Sync(); err != nil {
			errs = append(errs, fmt.Errorf("jsonl: fsync %s: %w", w.touched[i].file, err))
		}
	}
	return errors.Join(errs...)
}

func (w *writer) table(t *stages.Table) *tableBuf {
	k := tableKey{t.Schema, t.Name}
	if tb := w.tables[k]; tb != nil {
		return tb
	}
	full := t.String()
	tb := &tableBuf{file: FileName(t.Schema, t.Name), nameJSON: appendString(nil, full)}
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

// appendLine appends the JSON line of c, field by field, with no
// intermediate values: the sink's cost per row is what it writes.
func appendLine(b, tableJSON []byte, c *stages.Change) []byte {
	b = append(b, `{"kind":`...)
	switch c.Kind {
	case stages.Upsert:
		b = append(b, `"upsert"`...)
	case stages.Delete:
		b = append(b, `"delete"`...)
	default:
		b = appendString(b, c.Kind.String())
	}
	b = append(b, `,"table":`...)
	b = append(b, tableJSON...)
	b = append(b, `,"key":"`...)
	b = appendUUID(b, &c.Key)
	b = append(b, `","puts":[`...)
	for i := range c.Puts {
		p := &c.Puts[i]
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"bucket":`...)
		b = appendString(b, p.Bucket)
		b = append(b, `,"object_type":`...)
		b = appendString(b, p.ObjectType)
		b = append(b, `,"object_id":`...)
		b = appendString(b, p.ObjectID)
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
		b = appendString(b, l.Key)
		b = append(b, `,"params":`...)
		b = appendRaw(b, l.Params)
		b = append(b, '}')
	}
	return append(b, "]}\n"...)
}

// appendRaw embeds JSON produced by the sync rules as is; an absent value
// becomes null so that the line stays valid JSON.
func appendRaw(b, raw []byte) []byte {
	if len(raw) == 0 {
		return append(b, "null"...)
	}
	return append(b, raw...)
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
	return syncrules.AppendJSONString(b, s)
}
