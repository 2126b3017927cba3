//go:build unix

package cli

import (
	"fmt"
	"syscall"
)

// raiseFileLimit raises the soft RLIMIT_NOFILE to the hard limit and
// returns the soft limit in effect. Go's runtime already raises it at
// start (to hard - 1, on Linux); doing it here as well keeps the API's
// connection bound (pendingConnLimit) right where it does not, and gives
// that bound its number. An error leaves the limit as it was, which is
// returned too.
func raiseFileLimit() (uint64, error) {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return 0, fmt.Errorf("read the open file limit (RLIMIT_NOFILE): %w", err)
	}
	if lim.Cur >= lim.Max {
		return uint64(lim.Cur), nil
	}
	raised := lim
	raised.Cur = lim.Max
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &raised); err != nil {
		return uint64(lim.Cur), fmt.Errorf("raise the open file limit (RLIMIT_NOFILE) from %d to %d: %w", lim.Cur, lim.Max, err)
	}
	return uint64(raised.Cur), nil
}
