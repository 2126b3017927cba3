//go:build !unix

package cli

// raiseFileLimit has no file descriptor limit to raise here; 0 means
// unknown (pendingConnLimit then takes its default).
func raiseFileLimit() (uint64, error) { return 0, nil }
