package postgres

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/syncpipe/syncpipe/model"
)

// ReadRow reads the current state of one row of info's table, found by the
// text forms of its key columns (info.KeyColumns order), decoded in
// info.Columns order. ok is false when the row no longer exists. The
// stream uses it to fill values an UPDATE left out (unchanged TOAST).
func ReadRow(ctx context.Context, conn *pgx.Conn, info TableInfo, key []string) (row []model.Value, ok bool, err error) {
	if len(key) != len(info.KeyColumns) {
		return nil, false, fmt.Errorf("read a row of %s: %d key values for %d key columns", info.QualifiedName(), len(key), len(info.KeyColumns))
	}
	var q strings.Builder
	q.WriteString("SELECT ")
	for i, c := range info.Columns {
		if i > 0 {
			q.WriteString(", ")
		}
		q.WriteString(pgx.Identifier{c.Name}.Sanitize() + "::text")
	}
	q.WriteString(" FROM " + pgx.Identifier{info.Schema, info.Name}.Sanitize() + " WHERE ")
	args := make([]any, len(key))
	for n, k := range info.KeyColumns {
		if n > 0 {
			q.WriteString(" AND ")
		}
		args[n] = key[n]
		fmt.Fprintf(&q, "%s = $%d::%s", pgx.Identifier{info.Columns[k].Name}.Sanitize(), n+1, info.Columns[k].TypeName)
	}
	vals := make([]*string, len(info.Columns))
	dst := make([]any, len(vals))
	for i := range vals {
		dst[i] = &vals[i]
	}
	if err := conn.QueryRow(ctx, q.String(), args...).Scan(dst...); errors.Is(err, pgx.ErrNoRows) {
		return nil, false, nil
	} else if err != nil {
		return nil, false, fmt.Errorf("read a row of %s: %w", info.QualifiedName(), err)
	}
	row = make([]model.Value, len(vals))
	for i, v := range vals {
		if v == nil {
			continue // NULL
		}
		if row[i], err = DecodeText(info.Columns[i], []byte(*v)); err != nil {
			return nil, false, err
		}
	}
	return row, true, nil
}
