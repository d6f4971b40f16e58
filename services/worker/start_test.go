package worker

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bulkaction/bulkaction/pkg/contracts"
	"github.com/bulkaction/bulkaction/pkg/redisq"
)

// TestStartsGathersChecks: checks that arrive while one is under way wait
// for the next call and share it; each caller gets its own job's outcome,
// and a failed call answers every job of its batch with the error.
func TestStartsGathersChecks(t *testing.T) {
	var calls, jobs atomic.Int64
	gate := make(chan struct{})
	var fail atomic.Bool
	s := &starts{check: func(_ context.Context, ds []redisq.Delivery) ([]redisq.ClaimOutcome, error) {
		if calls.Add(1) == 1 {
			<-gate // the first call is slow: the others gather meanwhile
		}
		jobs.Add(int64(len(ds)))
		if fail.Load() {
			return nil, errors.New("redis down")
		}
		out := make([]redisq.ClaimOutcome, len(ds))
		for i, d := range ds {
			out[i] = redisq.ClaimRun
			if d.Attempt == 2 {
				out[i] = redisq.ClaimCancelled
			}
		}
		return out, nil
	}}
	ctx := context.Background()
	first := make(chan redisq.ClaimOutcome)
	go func() {
		o, _ := s.start(ctx, redisq.Delivery{Group: contracts.GroupRef{Tenant: "t", ID: "g"}, JobID: "first", Attempt: 1})
		first <- o
	}()
	for calls.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	const n = 100
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Go(func() {
			attempt := 1 + i%2
			o, err := s.start(ctx, redisq.Delivery{Group: contracts.GroupRef{Tenant: "t", ID: "g"},
				JobID: fmt.Sprint(i), Attempt: attempt})
			want := redisq.ClaimRun
			if attempt == 2 {
				want = redisq.ClaimCancelled
			}
			if err != nil || o != want {
				errs <- fmt.Errorf("job %d: %v %v, want %v", i, o, err, want)
			}
		})
	}
	for s.waiting() < n {
		time.Sleep(time.Millisecond)
	}
	close(gate)
	if o := <-first; o != redisq.ClaimRun {
		t.Fatalf("first job: %v", o)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if c := calls.Load(); c != 2 || jobs.Load() != n+1 {
		t.Errorf("%d calls checked %d jobs, want 2 calls for %d", c, jobs.Load(), n+1)
	}

	fail.Store(true)
	if _, err := s.start(ctx, redisq.Delivery{JobID: "x", Attempt: 1}); err == nil {
		t.Error("a failed check answered no error")
	}
}

// waiting is how many checks wait for a call.
func (s *starts) waiting() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.pending)
}
