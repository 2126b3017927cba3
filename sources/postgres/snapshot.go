package postgres

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/syncpipe/syncpipe/model"
	"github.com/syncpipe/syncpipe/pipeline"
)

const (
	// DefaultChunkRows is the chunk size of a snapshot (SPEC §4 chunk_rows).
	DefaultChunkRows = 10000
	// DefaultStatementTimeout bounds one chunk query on the server.
	DefaultStatementTimeout = 5 * time.Minute
)

// ErrSchemaChanged reports that a table's columns changed while it was read;
// the table must be discovered and snapshotted again.
var ErrSchemaChanged = errors.New("table schema changed during the snapshot")

// KeyRange is a range of a table's key, (Lower, Upper]: Lower exclusive,
// Upper inclusive, both as the text forms of the key columns (col::text).
// A nil Lower is the start of the key space, a nil Upper its end.
type KeyRange struct {
	Lower, Upper []string
}

// SnapshotOptions configures a SnapshotReader.
type SnapshotOptions struct {
	// ChunkRows is the number of rows per chunk (DefaultChunkRows if ≤ 0).
	ChunkRows int
	// After resumes the read after this key (the LastKey of the last
	// committed chunk); nil starts at the range's Lower bound.
	After []string
	// StatementTimeout bounds each chunk query on the server
	// (DefaultStatementTimeout if 0; negative: no limit).
	StatementTimeout time.Duration
	// SocketTimeout bounds each chunk's round trip on the client, so a dead
	// server or network is noticed even without TCP keepalives (0: the
	// statement timeout plus 30s, or none without a statement timeout;
	// negative: no limit). When it fires, the
	// connection is closed: reconnect and resume from the last LastKey.
	// Between chunks no statement or transaction is open, so the time a
	// slow consumer takes is never bounded by it.
	SocketTimeout time.Duration
}

// Chunk is one batch of snapshot rows, in key order.
type Chunk struct {
	// Rows are the decoded rows, columns in TableInfo.Columns order. The
	// chunk owns them; they are never reused by the reader.
	Rows [][]model.Value
	// LastKey is the key of the last row (text forms of the key columns):
	// the resume point to commit once the chunk is durable.
	LastKey []string
	// Bytes is the size of the rows on the wire.
	Bytes int64
	// Final is set when the range has no rows after this chunk. A range
	// whose size is a multiple of ChunkRows ends with a full chunk that is
	// not Final, and the next call returns pipeline.ErrEndOfInput.
	Final bool
}

// SnapshotReader reads one key range of a table in key-ordered chunks with
// keyset pagination:
//
//	SELECT cols FROM t WHERE (k1,k2) > (after) [AND (k1,k2) <= (upper)]
//	ORDER BY k1, k2 LIMIT n
//
// Each chunk is its own statement at READ COMMITTED, so no transaction stays
// open while the consumer is busy; consistency comes from the stream, which
// replays everything since its slot was created (before the snapshot). The
// row comparison and ORDER BY use the key columns' own collations, so the
// order is consistent for text keys too.
//
// The reader owns conn while in use (one reader per connection at a time)
// and configures its session: SessionParams, statement_timeout, and
// idle_session_timeout = 0.
type SnapshotReader struct {
	conn    *pgx.Conn
	t       TableInfo
	rng     KeyRange
	opts    SnapshotOptions
	after   []string
	done    bool
	ready   bool
	err     error
	formats pgx.QueryResultFormats
	b       *chunkBuilder
}

// NewSnapshotReader returns a reader of range rng of table t on conn.
// Invalid arguments (a table without key columns, bounds of the wrong
// length) are reported by the first Next.
func NewSnapshotReader(conn *pgx.Conn, t TableInfo, rng KeyRange, opts SnapshotOptions) *SnapshotReader {
	if opts.ChunkRows <= 0 {
		opts.ChunkRows = DefaultChunkRows
	}
	if opts.StatementTimeout == 0 {
		opts.StatementTimeout = DefaultStatementTimeout
	}
	if opts.SocketTimeout == 0 && opts.StatementTimeout > 0 {
		opts.SocketTimeout = opts.StatementTimeout + 30*time.Second
	}
	r := &SnapshotReader{conn: conn, t: t, rng: rng, opts: opts, after: rng.Lower}
	if opts.After != nil {
		r.after = opts.After
	}
	name := t.QualifiedName()
	nk := len(t.KeyColumns)
	switch {
	case nk == 0:
		r.err = problemf(ErrNoKey, "table %s has no key columns: discover it with Discover before reading", name)
	case rng.Lower != nil && len(rng.Lower) != nk, rng.Upper != nil && len(rng.Upper) != nk:
		r.err = fmt.Errorf("snapshot %s: key range bounds must have %d values", name, nk)
	case opts.After != nil && len(opts.After) != nk:
		r.err = fmt.Errorf("snapshot %s: resume key must have %d values, got %d", name, nk, len(opts.After))
	}
	if r.err == nil {
		r.formats = NewDecoder(t.Columns).ResultFormats()
		r.b = newChunkBuilder(t.Columns, t.KeyColumns)
	}
	return r
}

// Position returns the key after which the next chunk starts (nil at the
// start of an unbounded range).
func (r *SnapshotReader) Position() []string { return r.after }

// Next reads the next chunk. It returns pipeline.ErrEndOfInput when the
// range is exhausted. After an error the reader is unusable; resume with a
// new reader from the last committed LastKey.
func (r *SnapshotReader) Next(ctx context.Context) (Chunk, error) {
	if r.err != nil {
		return Chunk{}, r.err
	}
	if r.done {
		return Chunk{}, pipeline.ErrEndOfInput
	}
	ch, err := r.next(ctx)
	if err != nil {
		r.err = err
		return Chunk{}, err
	}
	if len(ch.Rows) == 0 {
		r.done = true
		return Chunk{}, pipeline.ErrEndOfInput
	}
	return ch, nil
}

func (r *SnapshotReader) next(ctx context.Context) (Chunk, error) {
	name := r.t.QualifiedName()
	if r.opts.SocketTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, r.opts.SocketTimeout)
		defer cancel()
	}
	if !r.ready {
		if err := configureSession(ctx, r.conn, r.opts.StatementTimeout); err != nil {
			return Chunk{}, fmt.Errorf("snapshot %s: configure session: %w", name, err)
		}
		r.ready = true
	}
	sql, args := r.query()
	rows, err := r.conn.Query(ctx, sql, args...)
	if err != nil {
		return Chunk{}, r.queryError(err)
	}
	defer rows.Close()
	if err := r.checkFields(rows.FieldDescriptions()); err != nil {
		// pgx reports a failed query through rows.Err, not Query: a
		// connection lost here leaves no field descriptions, and must not
		// be taken for a schema change, which waits for the fatal back-off.
		rows.Close()
		if qerr := rows.Err(); qerr != nil {
			return Chunk{}, r.queryError(qerr)
		}
		return Chunk{}, err
	}
	r.b.start(r.opts.ChunkRows)
	for rows.Next() {
		if err := r.b.add(rows.RawValues()); err != nil {
			return Chunk{}, fmt.Errorf("snapshot %s: %w", name, err)
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return Chunk{}, r.queryError(err)
	}
	ch := Chunk{Bytes: r.b.bytes, Rows: r.b.finish()}
	if len(ch.Rows) == 0 {
		return ch, nil
	}
	ch.LastKey = r.b.lastKey()
	ch.Final = len(ch.Rows) < r.opts.ChunkRows
	r.after = ch.LastKey
	r.done = ch.Final
	return ch, nil
}

func (r *SnapshotReader) queryError(err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && (pgErr.Code == "0A000" || pgErr.Code == "42703" || pgErr.Code == "42P01") {
		// cached plan must not change result type / column or table gone
		return &problem{
			msg:  fmt.Sprintf("table %s changed while it was being snapshotted (%s): discover and snapshot it again", r.t.QualifiedName(), pgErr.Message),
			kind: ErrSchemaChanged,
		}
	}
	return fmt.Errorf("snapshot %s: read chunk after key %v: %w", r.t.QualifiedName(), r.after, err)
}

func (r *SnapshotReader) checkFields(fds []pgconn.FieldDescription) error {
	cols := r.t.Columns
	ok := len(fds) == len(cols)
	for i := 0; ok && i < len(fds); i++ {
		ok = fds[i].DataTypeOID == cols[i].TypeOID || cols[i].Domain
		r.b.binary[i] = fds[i].Format == pgx.BinaryFormatCode
	}
	if !ok {
		return problemf(ErrSchemaChanged, "table %s changed while it was being snapshotted (column types differ from discovery): discover and snapshot it again", r.t.QualifiedName())
	}
	return nil
}

// query returns the chunk statement and its arguments.
func (r *SnapshotReader) query() (string, []any) {
	args := []any{r.formats}
	var where []string
	if r.after != nil {
		where = append(where, keyCompare(r.t, ">", 1))
		for _, v := range r.after {
			args = append(args, v)
		}
	}
	if r.rng.Upper != nil {
		where = append(where, keyCompare(r.t, "<=", len(args)))
		for _, v := range r.rng.Upper {
			args = append(args, v)
		}
	}
	var sb strings.Builder
	sb.WriteString("SELECT ")
	for i, c := range r.t.Columns {
		if i > 0 {
			sb.WriteString(", ")
		}
		sb.WriteString(pgx.Identifier{c.Name}.Sanitize())
	}
	sb.WriteString(" FROM ")
	sb.WriteString(pgx.Identifier{r.t.Schema, r.t.Name}.Sanitize())
	if len(where) > 0 {
		sb.WriteString(" WHERE ")
		sb.WriteString(strings.Join(where, " AND "))
	}
	sb.WriteString(" ORDER BY ")
	sb.WriteString(keyList(r.t))
	sb.WriteString(" LIMIT $" + strconv.Itoa(len(args)))
	args = append(args, int64(r.opts.ChunkRows))
	return sb.String(), args
}

// keyList renders "k1, k2".
func keyList(t TableInfo) string {
	parts := make([]string, len(t.KeyColumns))
	for i, ci := range t.KeyColumns {
		parts[i] = pgx.Identifier{t.Columns[ci].Name}.Sanitize()
	}
	return strings.Join(parts, ", ")
}

// keyCompare renders "(k1, k2) op ($n::text::type1, $n+1::text::type2)".
// Parameters are sent as text and cast through text, so every key type
// (including enums and domains) round-trips via its text form; the cast
// keeps the comparison on the column's type, so the key index is used.
func keyCompare(t TableInfo, op string, firstParam int) string {
	vals := make([]string, len(t.KeyColumns))
	for i, ci := range t.KeyColumns {
		vals[i] = "$" + strconv.Itoa(firstParam+i) + "::text::" + t.Columns[ci].TypeName
	}
	return "(" + keyList(t) + ") " + op + " (" + strings.Join(vals, ", ") + ")"
}
