package logrepl

import (
	"slices"
	"strings"
)

// CreatePublicationRemedy is the statement every message tells the user
// to run for a missing publication pub, so that no two of them disagree:
// CREATE PUBLICATION pub FOR TABLE the tables (qualified names as written
// in messages), or a placeholder for the sync rules' tables when the
// caller does not know them. FOR TABLE, never FOR ALL TABLES: it is what
// syncpipe itself creates, and a publication of every table would send
// every table's changes through the slot.
func CreatePublicationRemedy(pub string, tables []string) string {
	list := "<the sync-rules tables>"
	if len(tables) > 0 {
		list = strings.Join(tables, ", ")
	}
	return "CREATE PUBLICATION " + QuoteIdentIfNeeded(pub) + " FOR TABLE " + list
}

// AddTablesRemedy is the statement every message tells the user to run
// for tables (qualified names) missing from publication pub.
func AddTablesRemedy(pub string, tables []string) string {
	return "ALTER PUBLICATION " + QuoteIdentIfNeeded(pub) + " ADD TABLE " + strings.Join(tables, ", ")
}

// QuoteIdentIfNeeded quotes an SQL identifier only when it is not a plain
// lower-case one, so that messages show syncpipe, not "syncpipe".
func QuoteIdentIfNeeded(s string) string {
	plain := s != ""
	for i := 0; i < len(s) && plain; i++ {
		c := s[i]
		plain = c == '_' || (c >= 'a' && c <= 'z') || (i > 0 && (c >= '0' && c <= '9' || c == '$'))
	}
	if plain {
		return s
	}
	return quoteIdent(s)
}

// relationNames are the qualified names of rels, sorted: the tables a
// stream was seeded with, for a remedy naming them.
func relationNames(rels []*Relation) []string {
	names := make([]string, 0, len(rels))
	for _, r := range rels {
		names = append(names, QuoteIdentIfNeeded(r.Namespace)+"."+QuoteIdentIfNeeded(r.Name))
	}
	slices.Sort(names)
	return slices.Compact(names)
}
