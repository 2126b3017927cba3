package pgauth

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
)

func TestAdvice(t *testing.T) {
	refused := fmt.Errorf("connect: %w", &pgconn.PgError{Code: "28P01", Message: `password authentication failed for user "x"`})
	if got := Advice(refused, "source.uri"); !strings.Contains(got, "check the user and password in source.uri") {
		t.Fatalf("advice for 28P01: %q", got)
	}
	if got := Advice(&pgconn.PgError{Code: "28000"}, "storage.uri"); !strings.Contains(got, "storage.uri") {
		t.Fatalf("advice for 28000: %q", got)
	}
	for _, err := range []error{errors.New("dial tcp: connection refused"), &pgconn.PgError{Code: "3D000"}, nil} {
		if got := Advice(err, "source.uri"); got != "" {
			t.Fatalf("advice for %v: %q, want none", err, got)
		}
	}
}

// TestExplain: each kind of failed connection gets its one-line reason,
// and only a URI or server that said no is fatal.
func TestExplain(t *testing.T) {
	_, parseErr := pgconn.ParseConfig("postgres://u@127.0.0.1:99999/db")
	refused := &net.OpError{Op: "dial", Net: "tcp", Addr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 1},
		Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
	for _, c := range []struct {
		err    error
		prefix string
		fatal  bool
	}{
		{parseErr, "invalid URI in source.uri: invalid port", true},
		{&pgconn.PgError{Code: "28P01", Message: `password authentication failed for user "x"`}, `authentication failed (password authentication failed for user "x"): the server refused these credentials`, true},
		{&pgconn.PgError{Code: "3D000", Message: `database "nope" does not exist`}, `database "nope" does not exist: check the database name in source.uri`, true},
		{errors.New("failed to connect: server refused TLS connection"), "TLS: the server does not support SSL", true},
		{fmt.Errorf("connect: %w", &net.DNSError{Name: "nohost.invalid", Err: "no such host", IsNotFound: true}), "host not found (DNS): nohost.invalid does not resolve", false},
		{fmt.Errorf("connect: %w", refused), "connection refused by 127.0.0.1:1: nothing listens there", false},
		{fmt.Errorf("connect: %w", context.DeadlineExceeded), "no answer in time (timeout)", false},
		{&pgconn.PgError{Code: "53300", Message: "sorry, too many clients already"}, "the server refused the connection: sorry, too many clients already (SQLSTATE 53300)", false},
	} {
		f := Explain(c.err, "source.uri")
		if !strings.HasPrefix(f.Reason, c.prefix) || f.Fatal != c.fatal || strings.Contains(f.Reason, "\n") {
			t.Errorf("Explain(%v) = %+v, want a line starting %q, fatal %v", c.err, f, c.prefix, c.fatal)
		}
	}
}
