package harness

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
)

// FreeAddr returns a 127.0.0.1 address that is free now and stays free for
// a child to bind, also after a restart on the same address.
//
// Why not port 0: a port the kernel hands out for 127.0.0.1:0 comes from
// the ephemeral range, the same range every outgoing connection (pgx to
// PostgreSQL, clients to the API) takes its local port from. A test that
// stops a child and starts it again on its address then finds, now and
// then, a connection of a parallel test holding that port ("bind: address
// already in use"). FreeAddr picks below the ephemeral range, where no
// outgoing connection goes, at random so that parallel test processes
// rarely pick alike, and checks that the port is free.
func FreeAddr(t testing.TB) string {
	t.Helper()
	lo, hi := 10000, ephemeralLow()
	for range 200 {
		addr := fmt.Sprintf("127.0.0.1:%d", lo+rand.IntN(hi-lo))
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			continue
		}
		if err := ln.Close(); err != nil {
			t.Fatal(err)
		}
		return addr
	}
	t.Fatal("no free port below the ephemeral range after 200 tries")
	return ""
}

// ephemeralLow is the lowest port of the kernel's ephemeral range (Linux's
// ip_local_port_range; 32768 where it cannot be read).
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 32768
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 32768
	}
	n, err := strconv.Atoi(f[0])
	if err != nil || n <= 11000 {
		return 32768
	}
	return n
}
