package builtin_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/bulkaction/bulkaction/pkg/processor"
	"github.com/bulkaction/bulkaction/pkg/processor/builtin"
)

// seq returns a Rand that yields vals in order and counts its calls; it fails the test when called
// more often than len(vals).
func seq(t *testing.T, vals ...float64) (func() float64, func() int) {
	var mu sync.Mutex
	n := 0
	return func() float64 {
			mu.Lock()
			defer mu.Unlock()
			if n >= len(vals) {
				t.Errorf("Rand called %d times, want at most %d", n+1, len(vals))
				return 0
			}
			n++
			return vals[n-1]
		}, func() int {
			mu.Lock()
			defer mu.Unlock()
			return n
		}
}

func runSleep(opts builtin.Options, payload string) error {
	return builtin.Sleep(opts).Process(context.Background(), &processor.Job{Type: "sleep", Payload: []byte(payload)})
}

func TestSleepProbabilities(t *testing.T) {
	t.Parallel()
	draws := []float64{0, 0.5, 0.999999}
	tests := []struct {
		payload string
		want    processor.Outcome
	}{
		{`{}`, processor.OutcomeSuccess},
		{`{"failRate":0,"rateLimitRate":0,"permanentFailRate":0}`, processor.OutcomeSuccess},
		{`{"failRate":1}`, processor.OutcomeRetry},
		{`{"rateLimitRate":1}`, processor.OutcomeRateLimited},
		{`{"permanentFailRate":1}`, processor.OutcomeFailed},
	}
	for _, tt := range tests {
		for _, u := range draws {
			t.Run(fmt.Sprintf("%s/u=%v", tt.payload, u), func(t *testing.T) {
				err := runSleep(builtin.Options{Rand: func() float64 { return u }}, tt.payload)
				if got, _ := processor.Classify(err); got != tt.want {
					t.Fatalf("outcome %v (%v), want %v", got, err, tt.want)
				}
				if tt.want != processor.OutcomeSuccess && !errors.Is(err, builtin.ErrInjected) {
					t.Fatalf("%v does not wrap ErrInjected", err)
				}
			})
		}
	}
}

func TestSleepPartition(t *testing.T) {
	t.Parallel()
	const payload = `{"failRate":0.25,"rateLimitRate":0.25,"permanentFailRate":0.25}`
	for u, want := range map[float64]processor.Outcome{
		0: processor.OutcomeRetry, 0.2499: processor.OutcomeRetry,
		0.25: processor.OutcomeRateLimited, 0.4999: processor.OutcomeRateLimited,
		0.5: processor.OutcomeFailed, 0.7499: processor.OutcomeFailed,
		0.75: processor.OutcomeSuccess, 0.9999: processor.OutcomeSuccess,
	} {
		err := runSleep(builtin.Options{Rand: func() float64 { return u }}, payload)
		if got, _ := processor.Classify(err); got != want {
			t.Errorf("u=%v: outcome %v (%v), want %v", u, got, err, want)
		}
	}
}

func TestSleepRetryAfter(t *testing.T) {
	t.Parallel()
	zero := func() float64 { return 0 }
	for _, tt := range []struct {
		payload string
		opts    builtin.Options
		want    time.Duration
	}{
		{`{"rateLimitRate":1}`, builtin.Options{}, time.Second},
		{`{"rateLimitRate":1}`, builtin.Options{DefaultRetryAfter: 7 * time.Second}, 7 * time.Second},
		{`{"rateLimitRate":1,"retryAfterMs":250}`, builtin.Options{DefaultRetryAfter: 7 * time.Second}, 250 * time.Millisecond},
		{`{"rateLimitRate":1,"retryAfterMs":0}`, builtin.Options{}, 0},
	} {
		tt.opts.Rand = zero
		err := runSleep(tt.opts, tt.payload)
		var rl *processor.RateLimitError
		if !errors.As(err, &rl) || rl.RetryAfter != tt.want {
			t.Errorf("%s with %+v: %v, want RetryAfter %v", tt.payload, tt.opts.DefaultRetryAfter, err, tt.want)
		}
	}
}

func TestSleepWaits(t *testing.T) {
	t.Parallel()
	// Lower bounds only: the sleep must last at least ms + jitter.
	rnd, calls := seq(t, 0.5, 0.1) // jitter draw, then outcome draw
	start := time.Now()
	err := runSleep(builtin.Options{Rand: rnd}, `{"ms":20,"jitterMs":40,"failRate":0.2}`)
	if elapsed := time.Since(start); elapsed < 40*time.Millisecond {
		t.Errorf("slept %v, want at least 20ms + 0.5*40ms", elapsed)
	}
	if !errors.Is(err, builtin.ErrInjected) {
		t.Errorf("outcome draw 0.1 < failRate 0.2 gave %v, want an injected failure", err)
	}
	if calls() != 2 {
		t.Errorf("Rand called %d times, want 2", calls())
	}

	rnd, calls = seq(t) // no jitter and no rates: no draws
	start = time.Now()
	if err := runSleep(builtin.Options{Rand: rnd}, `{"ms":15}`); err != nil {
		t.Errorf("sleep = %v", err)
	}
	if elapsed := time.Since(start); elapsed < 15*time.Millisecond {
		t.Errorf("slept %v, want at least 15ms", elapsed)
	}
	if calls() != 0 {
		t.Errorf("Rand called %d times, want 0", calls())
	}
}

func TestSleepHonoursContext(t *testing.T) {
	t.Parallel()
	p := builtin.Sleep(builtin.Options{})
	job := &processor.Job{Type: "sleep", Payload: []byte(`{"ms":3600000}`)}

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := p.Process(ctx, job); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled before: %v, want context.Canceled", err)
	}

	ctx, cancel = context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- p.Process(ctx, job) }()
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("cancelled during: %v, want context.Canceled", err)
		}
		if o, _ := processor.Classify(err); o != processor.OutcomeRetry {
			t.Fatalf("cancelled sleep classified %v, want retry", o)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("sleep did not return after its context was cancelled")
	}

	ctx, cancel = context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	if err := p.Process(ctx, job); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("deadline: %v, want context.DeadlineExceeded", err)
	}
}

func TestSleepInvalidPayload(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		payload, field string
	}{
		{`{"ms":-1}`, "ms"},
		{`{"ms":86400001}`, "ms"},
		{`{"ms":"10"}`, "ms"},
		{`{"ms":1.5}`, "ms"},
		{`{"jitterMs":-3}`, "jitterMs"},
		{`{"failRate":1.5}`, "failRate"},
		{`{"rateLimitRate":-0.1}`, "rateLimitRate"},
		{`{"permanentFailRate":"high"}`, "permanentFailRate"},
		{`{"retryAfterMs":-1}`, "retryAfterMs"},
		{`{"failRate":0.6,"permanentFailRate":0.6}`, ""},
		{`{"bogus":1}`, "bogus"},
		{`[1,2]`, ""},
		{`"ms"`, ""},
		{`{"ms":`, ""},
		{`{"ms":1} {}`, ""},
	} {
		err := runSleep(builtin.Options{}, tt.payload)
		var pe *builtin.PayloadError
		if !errors.As(err, &pe) {
			t.Errorf("%s: %v, want a *PayloadError", tt.payload, err)
			continue
		}
		if pe.Field != tt.field || pe.Type != "sleep" {
			t.Errorf("%s: %v names field %q type %q, want field %q", tt.payload, err, pe.Field, pe.Type, tt.field)
		}
		if o, _ := processor.Classify(err); o != processor.OutcomeFailed {
			t.Errorf("%s: outcome %v, want failed", tt.payload, o)
		}
	}
	// Rounding in a sum of exactly 1 is tolerated (0.33+0.56+0.11 is 1.0000000000000002 in float64).
	if err := runSleep(builtin.Options{Rand: func() float64 { return 0.99 }}, `{"failRate":0.33,"rateLimitRate":0.56,"permanentFailRate":0.11}`); !errors.Is(err, processor.ErrSkipRetry) || !errors.Is(err, builtin.ErrInjected) {
		t.Errorf("rates summing to 1: %v, want an injected permanent failure", err)
	}
	// An empty payload is a zero sleep.
	if err := builtin.Sleep(builtin.Options{}).Process(context.Background(), &processor.Job{}); err != nil {
		t.Errorf("empty payload: %v", err)
	}
}
