package testkit

import (
	"net"
	"testing"
)

// FreePorts returns n distinct TCP ports on 127.0.0.1 that were free a
// moment ago. It holds every listener open until all n are picked, so
// that the kernel cannot hand the same port out twice (as separate
// listen-and-close calls may); a process started with them can still
// lose one to another process, as with any picked port.
func FreePorts(t testing.TB, n int) []int {
	t.Helper()
	ports := make([]int, n)
	for i := range ports {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		ports[i] = l.Addr().(*net.TCPAddr).Port
	}
	return ports
}

// FreePort is one port of [FreePorts].
func FreePort(t testing.TB) int {
	t.Helper()
	return FreePorts(t, 1)[0]
}
