package worker

import (
	"context"
	"sync"

	"github.com/bulkaction/bulkaction/pkg/redisq"
)

// starts gathers the checks of the jobs about to start after waiting for a
// slot ([redisq.Queue.StartBatch]) into one Redis call: while a call is
// under way, the checks that arrive wait for the next one, so a worker
// whose jobs wait for slots spends one round trip per batch of starts
// rather than one per job.
type starts struct {
	check func(context.Context, []redisq.Delivery) ([]redisq.ClaimOutcome, error)

	mu      sync.Mutex
	pending []startCheck
	busy    bool // a goroutine is checking
}

// startCheck is one job waiting for its check.
type startCheck struct {
	d   redisq.Delivery
	out chan startAnswer // buffered: the checker never blocks
}

type startAnswer struct {
	o   redisq.ClaimOutcome
	err error
}

// start checks d with the others arriving meanwhile; ctx bounds the wait
// of this caller only.
func (s *starts) start(ctx context.Context, d redisq.Delivery) (redisq.ClaimOutcome, error) {
	c := startCheck{d: d, out: make(chan startAnswer, 1)}
	s.mu.Lock()
	s.pending = append(s.pending, c)
	if !s.busy {
		s.busy = true
		go s.run()
	}
	s.mu.Unlock()
	select {
	case a := <-c.out:
		return a.o, a.err
	case <-ctx.Done():
		return "", ctx.Err()
	}
}

// run checks the pending jobs, a batch at a time, until none is left.
func (s *starts) run() {
	for {
		s.mu.Lock()
		batch := s.pending
		s.pending = nil
		if len(batch) == 0 {
			s.busy = false
			s.mu.Unlock()
			return
		}
		s.mu.Unlock()
		ds := make([]redisq.Delivery, len(batch))
		for i, c := range batch {
			ds[i] = c.d
		}
		ctx, cancel := context.WithTimeout(context.Background(), settleTimeout)
		outs, err := s.check(ctx, ds)
		cancel()
		for i, c := range batch {
			a := startAnswer{err: err}
			if err == nil {
				a.o = outs[i]
			}
			c.out <- a
		}
	}
}
