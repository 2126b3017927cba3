// Package bucketcheck compares what bucket storage holds with an
// expectation computed independently from the source, for end-to-end and
// crash tests of the todo data set (internal/todos).
package bucketcheck

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"sort"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/syncpipe/syncpipe/stages/checksum"
)

// State is what a client holds: bucket → "type/id" → data JSON. Rows whose
// latest op is a REMOVE are absent, and so are empty buckets.
type State map[string]map[string]string

// Stored replays a storage schema's ops in op id order into a State,
// checking that every PUT's checksum matches its data.
func Stored(ctx context.Context, pool *pgxpool.Pool, schema string) (State, error) {
	return StoredGroup(ctx, pool, schema, 0)
}

// StoredGroup is Stored for the ops of one group (0: all groups).
func StoredGroup(ctx context.Context, pool *pgxpool.Pool, schema string, group int) (State, error) {
	rows, err := pool.Query(ctx, `SELECT bucket_name, op, coalesce(object_type, ''), coalesce(object_id, ''), checksum, coalesce(data, '')
		FROM `+pgx.Identifier{schema, "bucket_ops"}.Sanitize()+` WHERE $1 = 0 OR group_id = $1 ORDER BY op_id`, group)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	st := State{}
	for rows.Next() {
		var bucket, typ, id, data string
		var op int16
		var sum int64
		if err := rows.Scan(&bucket, &op, &typ, &id, &sum, &data); err != nil {
			return nil, err
		}
		if st[bucket] == nil {
			st[bucket] = map[string]string{}
		}
		switch op {
		case 1: // PUT
			if uint32(sum) != checksum.Put(typ, id, []byte(data)) {
				return nil, fmt.Errorf("PUT %s/%s in %s: checksum %d does not match its data", typ, id, bucket, sum)
			}
			st[bucket][typ+"/"+id] = data
		case 2: // REMOVE
			delete(st[bucket], typ+"/"+id)
		case 4: // CLEAR: what came before is gone (compaction; a MOVE changes nothing)
			clear(st[bucket])
		}
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	for b, m := range st {
		if len(m) == 0 {
			delete(st, b)
		}
	}
	return st, nil
}

// ExpectedTodos computes with SQL on the source, independently of the rules
// engine, what the todo rules (todos.Rules, group 1) put in which bucket.
func ExpectedTodos(ctx context.Context, src *pgx.Conn) (State, error) {
	return ExpectedTodosGroup(ctx, src, 1)
}

// ExpectedTodosGroup is ExpectedTodos for the buckets of another group.
func ExpectedTodosGroup(ctx context.Context, src *pgx.Conn, group int) (State, error) {
	prefix := fmt.Sprint(group) + "#"
	st := State{}
	add := func(q, typ string) error {
		rows, err := src.Query(ctx, q)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var bucket, id, data string
			if err := rows.Scan(&bucket, &id, &data); err != nil {
				return err
			}
			if st[bucket] == nil {
				st[bucket] = map[string]string{}
			}
			st[bucket][typ+"/"+id] = data
		}
		return rows.Err()
	}
	// lists has only text-like columns, so row_to_json is SELECT * (also
	// after a column is added while streaming).
	if err := add(`SELECT '`+prefix+`global[]', id::text, row_to_json(l)::text FROM lists l`, "lists"); err != nil {
		return nil, err
	}
	err := add(`SELECT '`+prefix+`by_list["' || list_id || '"]', id::text, json_build_object('id', id, 'list_id', list_id,
		'description', description, 'completed', completed::int,
		'created_at', regexp_replace(to_char(created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS.US'), '\.?0+$', '') || 'Z')::text
		FROM todos`, "todos")
	return st, err
}

// Diff returns nil when got and want hold the same rows in the same
// buckets (data compared as JSON values), else the first difference.
func Diff(got, want State) error {
	if len(got) != len(want) {
		return fmt.Errorf("%d buckets, want %d", len(got), len(want))
	}
	for b, rows := range want {
		if len(got[b]) != len(rows) {
			var extra, missing []string
			for id := range got[b] {
				if _, ok := rows[id]; !ok {
					extra = append(extra, id)
				}
			}
			for id := range rows {
				if _, ok := got[b][id]; !ok {
					missing = append(missing, id)
				}
			}
			return fmt.Errorf("bucket %s has %d rows, want %d (unexpected %q, missing %q)", b, len(got[b]), len(rows), first(extra, 5), first(missing, 5))
		}
		for id, data := range rows {
			var g, w any
			if err := json.Unmarshal([]byte(got[b][id]), &g); err != nil {
				return fmt.Errorf("bucket %s row %s: data %q: %v", b, id, got[b][id], err)
			}
			if err := json.Unmarshal([]byte(data), &w); err != nil {
				return fmt.Errorf("expected data %q: %v", data, err)
			}
			if !reflect.DeepEqual(g, w) {
				return fmt.Errorf("bucket %s row %s:\n got %s\nwant %s", b, id, got[b][id], data)
			}
		}
	}
	return nil
}

func first(s []string, n int) []string {
	sort.Strings(s)
	return s[:min(n, len(s))]
}
