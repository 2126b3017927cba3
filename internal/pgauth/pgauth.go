// Package pgauth tells a PostgreSQL connection refused for its
// credentials from other connection failures, with the remedy.
package pgauth

import (
	"errors"

	"github.com/jackc/pgx/v5/pgconn"
)

// Advice returns the remedy for err when the server refused the
// connection's credentials (SQLSTATE 28P01 invalid_password or 28000
// invalid_authorization_specification), naming key, the configuration key
// that holds the connection string; "" for any other error. Retrying does
// not heal a wrong password, so the operator must be told what to change.
func Advice(err error, key string) string {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || (pgErr.Code != "28P01" && pgErr.Code != "28000") {
		return ""
	}
	return "the server refused these credentials: check the user and password in " + key +
		" (or PGPASSWORD or ~/.pgpass when it has none), and that pg_hba.conf lets this user in from this host"
}
