package main

import (
	"context"
	"errors"
	"io"
)

// errNotYet is returned by subcommands whose subsystem has not landed yet.
var errNotYet = errors.New("not yet available in this build (see README \"Status\")")

func runStatus(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return errNotYet
}
