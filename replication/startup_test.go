package replication

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"syscall"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
)

// TestTransient: what a server restart looks like to a client is
// transient; what a running server answers is not.
func TestTransient(t *testing.T) {
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
	for _, c := range []struct {
		err  error
		want bool
	}{
		{fmt.Errorf("list groups: %w", io.ErrUnexpectedEOF), true},
		{fmt.Errorf("connect: %w", refused), true},
		{&pgconn.PgError{Code: "57P01", Message: "terminating connection due to administrator command"}, true},
		{&pgconn.PgError{Code: "57P03", Message: "the database system is starting up"}, true},
		{&pgconn.PgError{Code: "08006"}, true},
		{&pgconn.PgError{Code: "28P01", Message: "password authentication failed"}, false},
		{&pgconn.PgError{Code: "3D000", Message: "database does not exist"}, false},
		{&pgconn.PgError{Code: "42P01", Message: "relation does not exist"}, false},
		{errors.New("table public.items has no primary key"), false},
	} {
		if got := transient(c.err); got != c.want {
			t.Errorf("transient(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}

// TestAtStartRetries: a start-up step that loses its connection is run
// again; a source that cannot be connected to (left to the background
// start) and an error a server answered with are returned at once.
func TestAtStartRetries(t *testing.T) {
	r := &Replicator{log: slog.New(slog.DiscardHandler)}
	ctx := context.Background()
	calls := 0
	err := r.atStart(ctx, "step", func(context.Context) error {
		if calls++; calls < 3 {
			return fmt.Errorf("list groups: %w", io.ErrUnexpectedEOF)
		}
		return nil
	})
	if err != nil || calls != 3 {
		t.Errorf("a step that lost its connection twice: err %v after %d calls, want nil after 3", err, calls)
	}
	for _, fail := range []error{
		sourceDown(fmt.Errorf("connect to the source: %w", &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED})),
		&pgconn.PgError{Code: "28P01"},
	} {
		calls = 0
		err = r.atStart(ctx, "step", func(context.Context) error { calls++; return fail })
		if !errors.Is(err, fail) || calls != 1 {
			t.Errorf("a step failing with %v: err %v after %d calls, want that error after 1", fail, err, calls)
		}
	}
}

// TestSourceDown: a connection to the source that a returning source
// heals is errSourceDown, with its message unchanged; one the server
// refused (credentials) is not.
func TestSourceDown(t *testing.T) {
	refused := fmt.Errorf("connect to the source: %w", &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED})
	if err := sourceDown(refused); !errors.Is(err, errSourceDown) || err.Error() != refused.Error() {
		t.Errorf("refused: %v (errSourceDown %v), want errSourceDown with the message %q", err, errors.Is(err, errSourceDown), refused)
	}
	auth := fmt.Errorf("connect to the source: %w", &pgconn.PgError{Code: "28P01"})
	if err := sourceDown(auth); errors.Is(err, errSourceDown) {
		t.Errorf("a refused password is errSourceDown: %v", err)
	}
	if sourceDown(nil) != nil {
		t.Error("sourceDown(nil) != nil")
	}
}
