package testkit

import (
	"log/slog"
	"sync"
	"testing"
)

// Logger returns a logger writing warnings and errors to t's log until the
// test ends (later lines are dropped; see [Writer]).
func Logger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(NewWriter(t), &slog.HandlerOptions{Level: slog.LevelWarn}))
}

// Writer writes each Write to a test's log, as one t.Log call, until the
// test ends; what is written later (by a goroutine outliving the test) is
// dropped, since t.Log would panic then. Make one with [NewWriter].
type Writer struct {
	mu   sync.Mutex
	t    testing.TB
	done bool
}

// NewWriter returns a Writer on t's log. It stops writing when t's
// cleanups run, after those registered later (such as the stop function of
// a service started after the call) have run.
func NewWriter(t testing.TB) *Writer {
	w := &Writer{t: t}
	t.Cleanup(func() {
		w.mu.Lock()
		w.done = true
		w.mu.Unlock()
	})
	return w
}

// Write logs p to the test log, or drops it once the test has ended. It
// always reports the whole of p written.
func (w *Writer) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.done {
		w.t.Log(string(p))
	}
	return len(p), nil
}
