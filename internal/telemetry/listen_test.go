package telemetry

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
)

func TestAllInterfaces(t *testing.T) {
	for addr, want := range map[string]bool{
		":8080": true, "0.0.0.0:8080": true, "[::]:8080": true, ":0": true,
		"127.0.0.1:8080": false, "[::1]:8080": false, "localhost:8080": false, "10.0.0.5:8080": false,
		"": false, "8080": false,
	} {
		if got := AllInterfaces(addr); got != want {
			t.Errorf("AllInterfaces(%q) = %v, want %v", addr, got, want)
		}
	}
}

// lockedBuffer is a bytes.Buffer safe for the server's goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestListenLogSaysAllInterfaces checks that a server listening on every
// interface (the default HTTP_ADDR, :8080) says so when it starts, and one
// on loopback does not.
func TestListenLogSaysAllInterfaces(t *testing.T) {
	for addr, want := range map[string]bool{":0": true, "127.0.0.1:0": false} {
		var buf lockedBuffer
		s := NewServer(addr, nil, nil, slog.New(slog.NewTextHandler(&buf, nil)))
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- s.Run(ctx) }()
		<-s.Ready()
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		line := buf.String()
		if got := strings.Contains(line, "interfaces=all"); got != want {
			t.Errorf("%s: log %q, want interfaces=all: %v", addr, line, want)
		}
	}
}
