package main

import (
	"context"
	"io"
)

func runValidate(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return errNotYet
}

func runToken(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return errNotYet
}
