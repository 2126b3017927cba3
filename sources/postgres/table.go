package postgres

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/syncpipe/syncpipe/sources/postgres/logrepl"
)

// Column is one user column of a source table.
type Column struct {
	// Name is the column name, unquoted.
	Name string
	// Num is the attribute number (pg_attribute.attnum).
	Num int16
	// TypeOID is the column's type (for a domain, the domain's own OID).
	TypeOID uint32
	// TypeName is the SQL name of the type without modifiers, qualified
	// when not on the search path and usable in casts ("integer",
	// "character varying", "myschema.mood", "pg_catalog.bpchar").
	TypeName string
	// IsArray is set for true array types (not int2vector/oidvector or
	// domains over arrays).
	IsArray bool
	// ElemOID is the element type of an array column, else 0.
	ElemOID uint32
	// ElemDelim is the element delimiter of an array column's text form
	// (',' for everything built in except box, which uses ';').
	ElemDelim byte
	// Domain reports a domain type. It decodes as text, whatever its base
	// type (as in PowerSync); query results describe it by its base type.
	Domain bool
	// NotNull reports a NOT NULL constraint.
	NotNull bool
	// Generated reports a stored generated column. The snapshot reads it;
	// pgoutput before PostgreSQL 18 does not send it.
	Generated bool
	// Toastable reports a variable-length column whose storage lets
	// PostgreSQL move large values out of line (TOAST). pgoutput omits such
	// a value from an UPDATE that leaves it unchanged.
	Toastable bool
	// Times is how timestamptz, timestamp and time values (and arrays of
	// them) render; the zero value is edition 1's text. It comes from the
	// sync rules, not the catalog: see TableInfo.WithTimeStyle.
	Times TimeStyle
}

// ReplicaIdentity is a table's REPLICA IDENTITY setting (relreplident).
type ReplicaIdentity byte

// The replica identity settings.
const (
	IdentityDefault ReplicaIdentity = 'd' // primary key
	IdentityIndex   ReplicaIdentity = 'i' // a unique index
	IdentityFull    ReplicaIdentity = 'f' // all columns
	IdentityNothing ReplicaIdentity = 'n' // none: updates and deletes cannot be replicated
)

// String returns the SQL keyword of the setting.
func (r ReplicaIdentity) String() string {
	switch r {
	case IdentityDefault:
		return "DEFAULT"
	case IdentityIndex:
		return "USING INDEX"
	case IdentityFull:
		return "FULL"
	case IdentityNothing:
		return "NOTHING"
	}
	return fmt.Sprintf("unknown(%q)", byte(r))
}

// TableInfo is what replication needs to know about one source table.
type TableInfo struct {
	// Schema and Name identify the table (unquoted).
	Schema, Name string
	// OID is the relation's oid (pgoutput's relation id).
	OID uint32
	// Columns are the user columns in attnum order.
	Columns []Column
	// ReplicaIdentity is the table's REPLICA IDENTITY setting.
	ReplicaIdentity ReplicaIdentity
	// IdentityColumns are indexes into Columns of the replica identity: the
	// primary key (DEFAULT), the index columns (USING INDEX) or all columns
	// (FULL).
	IdentityColumns []int
	// KeyColumns are indexes into Columns of the unique, not-null key the
	// snapshot orders by: the primary key, else the replica identity index.
	KeyColumns []int
	// EstimatedRows is pg_class.reltuples (0 when never analysed).
	EstimatedRows int64
	// Pages is pg_class.relpages.
	Pages int64
}

// QualifiedName returns schema.name, quoting parts only where SQL needs it.
func (t TableInfo) QualifiedName() string { return qualify(t.Schema, t.Name) }

// Sentinel errors, matched with errors.Is; each reported error is a
// one-line message naming the object and the fix.
var (
	// ErrTableNotFound: a sync-rules table does not exist in the source.
	ErrTableNotFound = errors.New("table does not exist in the source database")
	// ErrNoKey: a table has no primary key or replica identity index, or
	// REPLICA IDENTITY NOTHING, so it cannot be snapshotted or replicated.
	ErrNoKey = errors.New("table has no usable key")
	// ErrBadTableName: a table name is not of the form schema.name.
	ErrBadTableName = errors.New("malformed table name")
)

// problem is a user-facing, one-line error that matches a sentinel.
type problem struct {
	msg  string
	kind error
}

func (p *problem) Error() string { return p.msg }
func (p *problem) Unwrap() error { return p.kind }

func problemf(kind error, format string, args ...any) error {
	return &problem{msg: fmt.Sprintf(format, args...), kind: kind}
}

// Discover reads the catalog entries of tables ("schema.name", or "name" for
// public; double quotes may wrap a part that contains dots or quotes; names
// are case-sensitive as given). All problems — missing tables, tables
// without a key — are returned together (errors.Join) along with the tables
// that are fine.
func Discover(ctx context.Context, conn *pgx.Conn, tables []string) ([]TableInfo, error) {
	out, _, problems, err := discover(ctx, conn, tables)
	if err != nil {
		return nil, err
	}
	return out, errors.Join(problems...)
}

// discover separates user-facing problems from query failures (err). ok
// are the usable tables, all every table that exists.
func discover(ctx context.Context, conn *pgx.Conn, tables []string) (ok, all []TableInfo, problems []error, err error) {
	var schemas, names []string
	for _, s := range tables {
		schema, name, err := ParseTableName(s)
		if err != nil {
			problems = append(problems, err)
			continue
		}
		schemas = append(schemas, schema)
		names = append(names, name)
	}
	infos, missing, err := lookupRelations(ctx, conn, schemas, names)
	if err != nil {
		return nil, nil, nil, err
	}
	problems = append(problems, missing...)
	if len(infos) == 0 {
		return nil, nil, problems, nil
	}
	byOID := make(map[uint32]*TableInfo, len(infos))
	oids := make([]uint32, len(infos))
	for i := range infos {
		byOID[infos[i].OID] = &infos[i]
		oids[i] = infos[i].OID
	}
	if err := loadColumns(ctx, conn, oids, byOID); err != nil {
		return nil, nil, nil, err
	}
	keys, err := loadKeys(ctx, conn, oids)
	if err != nil {
		return nil, nil, nil, err
	}
	ok = make([]TableInfo, 0, len(infos))
	for i := range infos {
		t := &infos[i]
		if err := resolveKeys(t, keys[t.OID]); err != nil {
			problems = append(problems, err)
			continue
		}
		ok = append(ok, *t)
	}
	return ok, infos, problems, nil
}

// lookupRelations resolves names to relations; missing or non-table names
// become problems.
func lookupRelations(ctx context.Context, conn *pgx.Conn, schemas, names []string) ([]TableInfo, []error, error) {
	const q = `
SELECT q.nsp, q.rel, c.oid, c.relkind::text, c.relreplident::text,
       coalesce(c.reltuples, 0)::float8, coalesce(c.relpages, 0)::int8
FROM unnest($1::text[], $2::text[]) WITH ORDINALITY AS q(nsp, rel, ord)
LEFT JOIN pg_namespace n ON n.nspname = q.nsp
LEFT JOIN pg_class c ON c.relnamespace = n.oid AND c.relname = q.rel
ORDER BY q.ord`
	rows, err := conn.Query(ctx, q, schemas, names)
	if err != nil {
		return nil, nil, fmt.Errorf("discover tables: %w", err)
	}
	defer rows.Close()
	var infos []TableInfo
	var problems []error
	seen := map[uint32]bool{}
	for rows.Next() {
		var (
			nsp, rel    string
			oid         *uint32
			kind, ident *string
			tuples      float64
			pages       int64
		)
		if err := rows.Scan(&nsp, &rel, &oid, &kind, &ident, &tuples, &pages); err != nil {
			return nil, nil, fmt.Errorf("discover tables: %w", err)
		}
		name := qualify(nsp, rel)
		switch {
		case oid == nil:
			problems = append(problems, problemf(ErrTableNotFound,
				"table %s from the sync rules does not exist in the source database (check the name and schema)", name))
			continue
		case *kind != "r" && *kind != "p":
			problems = append(problems, problemf(ErrTableNotFound,
				"%s from the sync rules is a %s, not a table: only tables can be replicated", name, relkindName(*kind)))
			continue
		case seen[*oid]:
			continue
		}
		seen[*oid] = true
		if tuples < 0 {
			tuples = 0
		}
		infos = append(infos, TableInfo{
			Schema: nsp, Name: rel, OID: *oid,
			ReplicaIdentity: ReplicaIdentity((*ident)[0]),
			EstimatedRows:   int64(tuples), Pages: pages,
		})
	}
	if err := rows.Err(); err != nil {
		return nil, nil, fmt.Errorf("discover tables: %w", err)
	}
	return infos, problems, nil
}

func relkindName(k string) string {
	switch k {
	case "v":
		return "view"
	case "m":
		return "materialized view"
	case "f":
		return "foreign table"
	case "S":
		return "sequence"
	case "i", "I":
		return "index"
	}
	return "relation of kind " + k
}

func loadColumns(ctx context.Context, conn *pgx.Conn, oids []uint32, byOID map[uint32]*TableInfo) error {
	// A true array type has array_in as its input function; that excludes
	// int2vector/oidvector (typelem set, own input function) and domains.
	const q = `
SELECT a.attrelid, a.attnum, a.attname::text, a.atttypid,
       CASE a.atttypid WHEN 1042 THEN 'pg_catalog.bpchar' WHEN 1560 THEN 'pg_catalog."bit"'
            ELSE format_type(a.atttypid, NULL) END,
       t.typinput = 'array_in'::regproc,
       CASE WHEN t.typinput = 'array_in'::regproc THEN t.typelem ELSE 0 END,
       coalesce(et.typdelim::text, ','), t.typtype = 'd', a.attnotnull, a.attgenerated <> '',
       t.typlen = -1 AND a.attstorage <> 'p'
FROM pg_attribute a
JOIN pg_type t ON t.oid = a.atttypid
LEFT JOIN pg_type et ON et.oid = t.typelem AND t.typinput = 'array_in'::regproc
WHERE a.attrelid = ANY($1::oid[]) AND a.attnum > 0 AND NOT a.attisdropped
ORDER BY a.attrelid, a.attnum`
	rows, err := conn.Query(ctx, q, oids)
	if err != nil {
		return fmt.Errorf("discover columns: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var rel uint32
		var c Column
		var delim string
		if err := rows.Scan(&rel, &c.Num, &c.Name, &c.TypeOID, &c.TypeName, &c.IsArray, &c.ElemOID, &delim, &c.Domain, &c.NotNull, &c.Generated, &c.Toastable); err != nil {
			return fmt.Errorf("discover columns: %w", err)
		}
		if c.IsArray && len(delim) == 1 {
			c.ElemDelim = delim[0]
		}
		t := byOID[rel]
		t.Columns = append(t.Columns, c)
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("discover columns: %w", err)
	}
	return nil
}

type tableKeys struct {
	primary, identity []int16 // attnums
}

func loadKeys(ctx context.Context, conn *pgx.Conn, oids []uint32) (map[uint32]*tableKeys, error) {
	const q = `
SELECT i.indrelid, i.indisprimary, i.indisreplident, i.indkey::int2[]
FROM pg_index i
WHERE i.indrelid = ANY($1::oid[]) AND (i.indisprimary OR i.indisreplident) AND i.indisvalid`
	rows, err := conn.Query(ctx, q, oids)
	if err != nil {
		return nil, fmt.Errorf("discover keys: %w", err)
	}
	defer rows.Close()
	out := map[uint32]*tableKeys{}
	for rows.Next() {
		var rel uint32
		var primary, ident bool
		var attnums []int16
		if err := rows.Scan(&rel, &primary, &ident, &attnums); err != nil {
			return nil, fmt.Errorf("discover keys: %w", err)
		}
		k := out[rel]
		if k == nil {
			k = &tableKeys{}
			out[rel] = k
		}
		if primary {
			k.primary = attnums
		}
		if ident {
			k.identity = attnums
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("discover keys: %w", err)
	}
	return out, nil
}

// resolveKeys fills KeyColumns and IdentityColumns.
func resolveKeys(t *TableInfo, k *tableKeys) error {
	if k == nil {
		k = &tableKeys{}
	}
	name := t.QualifiedName()
	pk, pkOK := columnIndexes(t.Columns, k.primary)
	ri, riOK := columnIndexes(t.Columns, k.identity)
	switch {
	case pkOK:
		t.KeyColumns = pk
	case riOK:
		t.KeyColumns = ri
	default:
		return problemf(ErrNoKey, "table %s has no primary key or replica identity index: add one (ALTER TABLE %s ADD PRIMARY KEY (…)) or set REPLICA IDENTITY USING INDEX", name, name)
	}
	switch t.ReplicaIdentity {
	case IdentityDefault:
		if !pkOK {
			return problemf(ErrNoKey, "table %s has REPLICA IDENTITY DEFAULT but no primary key, so updates and deletes cannot be replicated: add a primary key (ALTER TABLE %s ADD PRIMARY KEY (…)) or run ALTER TABLE %s REPLICA IDENTITY USING INDEX <unique index>", name, name, name)
		}
		t.IdentityColumns = pk
	case IdentityIndex:
		if !riOK {
			return problemf(ErrNoKey, "table %s has REPLICA IDENTITY USING INDEX but the index is gone: run ALTER TABLE %s REPLICA IDENTITY DEFAULT (or USING INDEX <unique index>)", name, name)
		}
		t.IdentityColumns = ri
	case IdentityFull:
		t.IdentityColumns = make([]int, len(t.Columns))
		for i := range t.Columns {
			t.IdentityColumns[i] = i
		}
	default:
		return problemf(ErrNoKey, "table %s has REPLICA IDENTITY NOTHING, so updates and deletes cannot be replicated: run ALTER TABLE %s REPLICA IDENTITY DEFAULT", name, name)
	}
	return nil
}

func columnIndexes(cols []Column, attnums []int16) ([]int, bool) {
	if len(attnums) == 0 {
		return nil, false
	}
	out := make([]int, 0, len(attnums))
	for _, n := range attnums {
		found := false
		for i, c := range cols {
			if c.Num == n {
				out = append(out, i)
				found = true
				break
			}
		}
		if !found { // expression column: not usable as a key
			return nil, false
		}
	}
	return out, true
}

// ParseTableName splits "schema.name" (or "name", meaning public) into its
// parts. A part may be double-quoted ("My Schema"."a.b", with "" for a
// quote); unquoted parts are taken as written, not case-folded.
func ParseTableName(s string) (schema, name string, err error) {
	var parts []string
	rest := s
	for {
		var part string
		if strings.HasPrefix(rest, `"`) {
			var b strings.Builder
			i := 1
			closed := false
			for i < len(rest) {
				if rest[i] == '"' {
					if i+1 < len(rest) && rest[i+1] == '"' {
						b.WriteByte('"')
						i += 2
						continue
					}
					closed = true
					i++
					break
				}
				b.WriteByte(rest[i])
				i++
			}
			if !closed {
				return "", "", problemf(ErrBadTableName, "table name %q has an unterminated quote: write it as schema.name", s)
			}
			part, rest = b.String(), rest[i:]
		} else {
			j := strings.IndexByte(rest, '.')
			if j < 0 {
				j = len(rest)
			}
			part, rest = rest[:j], rest[j:]
		}
		if part == "" {
			return "", "", problemf(ErrBadTableName, "table name %q has an empty part: write it as schema.name", s)
		}
		parts = append(parts, part)
		if rest == "" {
			break
		}
		if rest[0] != '.' || len(parts) == 2 {
			return "", "", problemf(ErrBadTableName, "table name %q is not of the form schema.name (quote parts that contain dots)", s)
		}
		rest = rest[1:]
	}
	if len(parts) == 1 {
		return "public", parts[0], nil
	}
	return parts[0], parts[1], nil
}

// qualify renders schema.name for messages and generated SQL hints,
// quoting a part only when it is not a plain lower-case identifier.
func qualify(schema, name string) string {
	return quoteIdentIfNeeded(schema) + "." + quoteIdentIfNeeded(name)
}

// quoteIdentIfNeeded is logrepl's, so that the messages of both packages
// (and their remedies) quote names alike.
func quoteIdentIfNeeded(s string) string { return logrepl.QuoteIdentIfNeeded(s) }
