// Package pgauth tells a PostgreSQL connection refused for its
// credentials from other connection failures, with the remedy.
package pgauth

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"strings"
	"syscall"

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

// Failure is why a connection could not be opened, in one line.
type Failure struct {
	// Reason says what failed and what to change.
	Reason string
	// Fatal is set when the URI or the server said no (a malformed URI,
	// credentials, TLS, a missing database): the configuration is wrong
	// wherever it runs. Otherwise the server was not reached (refused,
	// DNS, timeout), which may only be so where the check runs.
	Fatal bool
}

// Explain tells why a connection to the URI in the configuration key
// failed: invalid URI, authentication, TLS, host not found (DNS),
// connection refused, or no answer in time.
func Explain(err error, key string) Failure {
	var (
		parseErr *pgconn.ParseConfigError
		pgErr    *pgconn.PgError
		dnsErr   *net.DNSError
		opErr    *net.OpError
	)
	switch {
	case errors.As(err, &parseErr):
		_, msg, _ := strings.Cut(parseErr.Error(), "`: ")
		return Failure{Reason: "invalid URI in " + key + ": " + msg, Fatal: true}
	case Advice(err, key) != "":
		return Failure{Reason: "authentication failed (" + serverMessage(err) + "): " + Advice(err, key), Fatal: true}
	case errors.As(err, &pgErr) && pgErr.Code == "3D000":
		return Failure{Reason: pgErr.Message + ": check the database name in " + key, Fatal: true}
	case errors.As(err, &pgErr):
		return Failure{Reason: "the server refused the connection: " + pgErr.Message + " (SQLSTATE " + pgErr.Code + ")"}
	case strings.Contains(err.Error(), "server refused TLS connection"):
		return Failure{Reason: "TLS: the server does not support SSL, but " + key +
			" requires it (sslmode=require, verify-ca or verify-full): enable ssl on the server, or set sslmode=prefer or disable", Fatal: true}
	case isTLS(err):
		return Failure{Reason: "TLS: " + lastLine(err) + ": check sslmode, sslrootcert and the server's certificate for " + key, Fatal: true}
	case errors.As(err, &dnsErr):
		return Failure{Reason: "host not found (DNS): " + dnsErr.Name + " does not resolve: check the host in " + key}
	case errors.Is(err, syscall.ECONNREFUSED):
		addr := "the server"
		if errors.As(err, &opErr) && opErr.Addr != nil {
			addr = opErr.Addr.String()
		}
		return Failure{Reason: "connection refused by " + addr + ": nothing listens there; check the host and port in " + key + " and that the server runs"}
	case errors.Is(err, context.DeadlineExceeded) || errors.As(err, &opErr) && opErr.Timeout():
		return Failure{Reason: "no answer in time (timeout): check the host and port in " + key + ", and firewalls on the way"}
	}
	return Failure{Reason: "cannot connect: " + lastLine(err)}
}

// serverMessage is the server's message of a PostgreSQL error in err.
func serverMessage(err error) string {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Message
	}
	return ""
}

// isTLS reports a failed TLS handshake or certificate check.
func isTLS(err error) bool {
	var (
		rec     tls.RecordHeaderError
		unknown x509.UnknownAuthorityError
		host    x509.HostnameError
		invalid x509.CertificateInvalidError
	)
	return errors.As(err, &rec) || errors.As(err, &unknown) || errors.As(err, &host) || errors.As(err, &invalid) ||
		strings.Contains(err.Error(), "tls: ")
}

// lastLine is the last line of err's text, trimmed: pgx lists every
// address it tried, the cause last.
func lastLine(err error) string {
	lines := strings.Split(strings.TrimSpace(err.Error()), "\n")
	return strings.TrimSpace(lines[len(lines)-1])
}
