package pgauth

import (
	"errors"
	"fmt"
	"strings"
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
