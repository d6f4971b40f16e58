package e2e_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/bulkaction/bulkaction/internal/config"
	"github.com/bulkaction/bulkaction/internal/stack"
	"github.com/bulkaction/bulkaction/pkg/contracts"
)

// bucketDownstream is a real HTTP endpoint with a hidden capacity: a token
// bucket of rate jobs/s and burst tokens. Past it, it answers 429 with
// Retry-After: 1, as a provider does.
type bucketDownstream struct {
	srv                *httptest.Server
	mu                 sync.Mutex
	rate, burst        float64
	tokens             float64
	last               time.Time
	accepted, rejected int
	firstOK, lastOK    time.Time
}

func newBucketDownstream(t *testing.T, rate, burst float64) *bucketDownstream {
	return newBucketDownstreamAt(t, "127.0.0.1", rate, burst)
}

// newBucketDownstreamAt is newBucketDownstream listening on host (a
// loopback address: 127.0.0.1, 127.0.0.2, ...).
func newBucketDownstreamAt(t *testing.T, host string, rate, burst float64) *bucketDownstream {
	d := &bucketDownstream{rate: rate, burst: burst, tokens: burst, last: time.Now()}
	d.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		time.Sleep(2 * time.Millisecond) // a downstream takes some time
		d.mu.Lock()
		now := time.Now()
		d.tokens = min(d.burst, d.tokens+now.Sub(d.last).Seconds()*d.rate)
		d.last = now
		ok := d.tokens >= 1
		if ok {
			d.tokens--
			d.accepted++
			if d.firstOK.IsZero() {
				d.firstOK = now
			}
			d.lastOK = now
		} else {
			d.rejected++
		}
		d.mu.Unlock()
		if !ok {
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusTooManyRequests)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		t.Fatal(err)
	}
	d.srv.Listener.Close()
	d.srv.Listener = l
	d.srv.Start()
	t.Cleanup(d.srv.Close)
	return d
}

// adaptiveRun submits n http jobs to the bucket downstream of capacity
// rate/s and returns 429s per accepted job and goodput ÷ capacity.
func adaptiveRun(t *testing.T, adaptive bool, n int, rate float64) (throttlesPerJob, goodputRatio float64) {
	e := newEnv(t)
	d := newBucketDownstream(t, rate, rate/5)
	cfg := e.config(func(c *config.Config) {
		c.HTTPAllowedHosts = []string{"127.0.0.1"}
		c.WorkerCount = 8
		c.BaseBackoffMs = 1000
		c.MaxBackoffMs = 10_000
		c.AdaptiveRateEnabled = adaptive
	})
	r := e.start(cfg, []string{stack.TargetFetcher, stack.TargetDispatcher, stack.TargetWorker, stack.TargetAggregator}, nil)
	payload := fmt.Sprintf(`{"url":%q,"method":"POST"}`, d.srv.URL+"/send")
	e.submit("bulk", "http", n, payload, contracts.PriorityNormal)
	ev := e.wait("bulk", 3*time.Minute)
	if ev.State != contracts.StateCompleted || ev.Succeeded != int64(n) {
		t.Fatalf("final event %+v, want COMPLETED with %d succeeded", ev, n)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	span := d.lastOK.Sub(d.firstOK).Seconds()
	throttlesPerJob = float64(d.rejected) / float64(d.accepted)
	goodputRatio = float64(d.accepted) / span / rate
	if adaptive {
		lr, err := r.st.Conns.Queue.DestinationRates(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("learned rates at the end: %+v", lr.Rates)
	}
	t.Logf("adaptive=%v: %d accepted, %d 429s (%.3f per job) in %.1f s: goodput %.1f/s, %.2f of capacity %.0f/s",
		adaptive, d.accepted, d.rejected, throttlesPerJob, span, float64(d.accepted)/span, goodputRatio, rate)
	return throttlesPerJob, goodputRatio
}

// TestAdaptiveRateLearnsDownstreamCapacity: against a real HTTP downstream
// with a token-bucket capacity of 100/s that answers 429 + Retry-After
// past it, on real Redis and NATS, the adaptive rate keeps 429s per
// accepted job low; today's behaviour (adaptive off) is run beside it for
// comparison. Goodput is logged, not asserted (timing goals live in
// `make bench-adaptive`).
func TestAdaptiveRateLearnsDownstreamCapacity(t *testing.T) {
	if testing.Short() {
		t.Skip("runs two bulk actions of 20 s each")
	}
	const n, rate = 2000, 100
	var onT, offT float64
	t.Run("on", func(t *testing.T) { onT, _ = adaptiveRun(t, true, n, rate) })
	t.Run("off", func(t *testing.T) { offT, _ = adaptiveRun(t, false, n, rate) })
	// Quiet, the adaptive rate draws about 0.05 429s per job here and
	// today's behaviour 3 to 4.5; a loaded machine (the whole suite at
	// once) was seen at 0.11. The bound tells a rate that learned the
	// capacity from one that did not, not how well it learned it (that is
	// make bench-adaptive's 0.05 goal).
	if onT > 0.25 {
		t.Errorf("adaptive on: %.3f 429s per accepted job, want at most 0.25", onT)
	}
	if onT >= offT {
		t.Errorf("adaptive on: %.3f 429s per accepted job, not below today's %.3f", onT, offT)
	}
}
