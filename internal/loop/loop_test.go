package loop_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bulkaction/bulkaction/internal/loop"
)

func TestEveryCallsUntilDone(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	var n atomic.Int32
	done := make(chan struct{})
	go func() {
		defer close(done)
		loop.Every(ctx, time.Millisecond, func(context.Context) {
			if n.Add(1) == 3 {
				cancel()
			}
		})
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Every did not return once its context ended")
	}
	if got := n.Load(); got != 3 {
		t.Fatalf("%d calls, want 3 (none after the context ended)", got)
	}
}

func TestUntilStopsWhenToldAndFirstCallAtOnce(t *testing.T) {
	var calls []time.Duration
	start := time.Now()
	ended := loop.Until(context.Background(), time.Hour, func(context.Context) bool {
		calls = append(calls, time.Since(start))
		return false
	}, loop.Now())
	if !ended || len(calls) != 1 || calls[0] > time.Minute {
		t.Fatalf("Until with Now: ended %v, calls %v; want one call at once that ends the loop", ended, calls)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if loop.Until(ctx, time.Millisecond, func(context.Context) bool { t.Fatal("called after ctx ended"); return true }, loop.Now()) {
		t.Fatal("Until reports that f ended a loop its context ended")
	}
}

// With AfterRun the interval runs from the end of each call: a slow call
// is not followed by the next at once.
func TestAfterRunWaitsAfterEachCall(t *testing.T) {
	const d, slow = 20 * time.Millisecond, 60 * time.Millisecond
	var ends, starts []time.Time
	loop.Until(context.Background(), d, func(context.Context) bool {
		starts = append(starts, time.Now())
		if len(starts) == 1 {
			time.Sleep(slow)
		}
		ends = append(ends, time.Now())
		return len(starts) < 2
	}, loop.AfterRun())
	if gap := starts[1].Sub(ends[0]); gap < d {
		t.Fatalf("second call %s after the first ended, want at least %s", gap, d)
	}
}

func TestSleep(t *testing.T) {
	if !loop.Sleep(context.Background(), time.Millisecond) || !loop.Sleep(context.Background(), 0) {
		t.Fatal("Sleep on a live context reported it done")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	start := time.Now()
	if loop.Sleep(ctx, time.Hour) || time.Since(start) > time.Minute {
		t.Fatal("Sleep on an ended context waited or reported it live")
	}
}
