package chaos

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"
)

// sideEffects is a real HTTP endpoint for the http processor that counts
// every call of every job: the side effects a job must cause once. A job
// calls /<tenant>/<group>/<job>?ms=<how long the call takes>.
type sideEffects struct {
	srv   *http.Server
	addr  string
	mu    sync.Mutex
	calls map[string]int
	// at is when each call arrived, in order (T22's rate check).
	at []endpointCall
}

// endpointCall is one call of the endpoint: the job's path and when it
// arrived.
type endpointCall struct {
	path string
	at   time.Time
}

func newSideEffects(t *testing.T) *sideEffects {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &sideEffects{addr: l.Addr().String(), calls: map[string]int{}}
	s.srv = &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		now := time.Now()
		s.mu.Lock()
		s.calls[r.URL.Path]++
		s.at = append(s.at, endpointCall{r.URL.Path, now})
		s.mu.Unlock()
		if ms, _ := strconv.Atoi(r.URL.Query().Get("ms")); ms > 0 {
			select {
			case <-time.After(time.Duration(ms) * time.Millisecond):
			case <-r.Context().Done():
			}
		}
		w.WriteHeader(http.StatusNoContent)
	}), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = s.srv.Serve(l) }()
	t.Cleanup(func() { _ = s.srv.Close() })
	return s
}

// job returns a workload Job calling the endpoint, each call taking d.
func (s *sideEffects) job(tag string, d time.Duration) func(t, g, i int) (string, string, bool) {
	return func(t, g, i int) (string, string, bool) {
		return "http", fmt.Sprintf(`{"url":"http://%s/%s/t%d/g%d/j%06d?ms=%d","method":"POST"}`, s.addr, tag, t, g, i, d.Milliseconds()), false
	}
}

// total returns the calls made so far.
func (s *sideEffects) total() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, c := range s.calls {
		n += c
	}
	return n
}

// check reports, for the jobs of w, those not called exactly once.
func (s *sideEffects) check(tag string, w workload) []string {
	never, twice, calls, sample := s.count(tag, w)
	out := []string{fmt.Sprintf("endpoint: %d calls for %d jobs", calls, w.total())}
	if never > 0 || twice > 0 {
		out = append(out, fmt.Sprintf("side effects not exactly once: %d jobs never called, %d called more than once (%v)", never, twice, sample))
	}
	return out
}

// count counts, for the jobs of w, those never called and those called
// more than once (up to five of those named in sample), and every call.
func (s *sideEffects) count(tag string, w workload) (never, twice, calls int, sample []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for t := 0; t < w.Tenants; t++ {
		for g := 0; g < w.Groups; g++ {
			for i := 0; i < w.Jobs; i++ {
				path := fmt.Sprintf("/%s/t%d/g%d/j%06d", tag, t, g, i)
				c := s.calls[path]
				calls += c
				switch {
				case c == 0:
					never++
				case c > 1:
					twice++
					if len(sample) < 5 {
						sample = append(sample, fmt.Sprintf("%s ×%d", path, c))
					}
				}
			}
		}
	}
	return never, twice, calls, sample
}

// ---------------------------------------------------------------- T11

// t11: jobs that run for three times STUCK_AFTER (20 s in the chaos
// settings) with JOB_TIMEOUT_MS above it: each is called exactly once
// (docs/ARCHITECTURE.md §6.5: only an expired claim makes a run lost).
func t11(t *testing.T, p profile) run {
	se := newSideEffects(t)
	const stuck = 20 * time.Second
	w := workload{Tenants: 1, Groups: 2, Jobs: p.t11Jobs / 2, Job: se.job("t11", 3*stuck)}
	return run{
		id: "T11",
		opts: envOptions{Settings: map[string]string{
			"HTTP_ALLOWED_HOSTS": "127.0.0.1", "JOB_TIMEOUT_MS": strconv.Itoa(int((4 * stuck).Milliseconds())),
			"STUCK_AFTER": stuck.String(), "DUPLICATE_WINDOW": "5s",
		}},
		w:            w,
		timeout:      p.settle,
		maxFaultTime: 10 * time.Minute,
		faults: func(ctx context.Context, e *env) string {
			<-ctx.Done()
			return fmt.Sprintf("jobs of %s each (3× STUCK_AFTER %s, JOB_TIMEOUT_MS %s)", 3*stuck, stuck, 4*stuck)
		},
		check: func(*env, *tally) []string { return se.check("t11", w)[1:] },
		note:  func() string { return se.check("t11", w)[0] },
	}
}

// ---------------------------------------------------------------- T12

// t12: every aggregator stopped for twice STUCK_AFTER mid-run while the
// workers go on, so thousands of results back up on RESULT; once the
// aggregators are back, no job is called twice and the counts are exact.
func t12(t *testing.T, p profile) run {
	se := newSideEffects(t)
	const stuck = 20 * time.Second
	w := workload{Tenants: 2, Groups: 2, Jobs: p.t12Jobs / 4, Job: se.job("t12", 0)}
	return run{
		id: "T12",
		opts: envOptions{Settings: map[string]string{
			"HTTP_ALLOWED_HOSTS": "127.0.0.1", "STUCK_AFTER": stuck.String(), "DUPLICATE_WINDOW": "5s",
		}},
		w:            w,
		timeout:      p.settle,
		maxFaultTime: 10 * time.Minute,
		faults: func(ctx context.Context, e *env) string {
			for se.total() < w.total()/20 {
				if !sleepRand(ctx, 100*time.Millisecond, 200*time.Millisecond) {
					return "the run ended before the aggregators were stopped"
				}
			}
			aggs := e.services("aggregator")
			for _, s := range aggs {
				s.hold()
			}
			at := se.total()
			time.Sleep(2 * stuck)
			backed := se.total() - at
			for _, s := range aggs {
				s.release()
			}
			return fmt.Sprintf("%d aggregators stopped for %s (2× STUCK_AFTER) after %d calls; %d results backed up meanwhile", len(aggs), 2*stuck, at, backed)
		},
		check: func(*env, *tally) []string { return se.check("t12", w)[1:] },
		note:  func() string { return se.check("t12", w)[0] },
	}
}
