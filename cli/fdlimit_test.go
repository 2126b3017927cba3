package cli

import "testing"

// TestPendingConnLimit: the bound on connections that are not streams
// leaves half the descriptors the streams do not take, within 16 and
// max(1024, streams).
func TestPendingConnLimit(t *testing.T) {
	for _, c := range []struct {
		nofile  uint64
		streams int
		want    int
	}{
		{0, 200, 1024},          // unknown limit
		{1 << 20, 200, 1024},    // a container's usual limit
		{1 << 20, 5000, 5000},   // every stream may reconnect at once
		{20000, 200, 1024},      //
		{700, 200, 250},         // (700 - 200) / 2
		{256, 200, 28},          // (256 - 200) / 2
		{100, 200, 16},          // misconfigured: still serves
		{^uint64(0), 200, 1024}, // RLIM_INFINITY
	} {
		if got := pendingConnLimit(c.nofile, c.streams); got != c.want {
			t.Errorf("pendingConnLimit(%d, %d) = %d, want %d", c.nofile, c.streams, got, c.want)
		}
	}
}
