package testenv

import (
	"errors"
	"net"
	"strconv"
	"testing"
	"time"
)

// A redis-server that cannot bind its port exits, and the start says so at
// once (it does not wait for an answer that cannot come); starting on free
// ports tries other ports then.
func TestRedisServerThatExitsIsNoticed(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	taken := l.Addr().(*net.TCPAddr).Port
	s := &RedisServer{port: taken, dir: t.TempDir()}
	start := time.Now()
	if err := s.Start(); !errors.Is(err, errExited) {
		t.Fatalf("a server on a taken port: %v, want errExited", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("the exit was noticed after %s", d)
	}
	tries := 0
	s = &RedisServer{dir: t.TempDir()}
	err = s.startOnFreePorts(func(int) []string {
		tries++
		if tries == 1 {
			// the first port found is taken meanwhile (a later --port wins)
			return []string{"--port", strconv.Itoa(taken)}
		}
		return nil
	})
	defer s.Stop()
	if err != nil || tries != 2 {
		t.Fatalf("start on free ports after a taken one: %v after %d tries", err, tries)
	}
}
