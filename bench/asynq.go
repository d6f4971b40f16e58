package bench

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hibiken/asynq"
)

// Task types of the asynq runs: the large (or only) batch and the small
// batch of the head-of-line run. Both go to asynq's one "default" queue.
const (
	asynqTypeA = "noop"
	asynqTypeB = "noop-small"
)

// DefaultTaskCheckInterval is asynq's idle polling interval in these runs.
// asynq's own default (1 s) would add up to 1.5 s to a run that starts on an
// idle server; a short one only helps asynq.
const DefaultTaskCheckInterval = 10 * time.Millisecond

// AsynqOptions configure an [Asynq] harness.
type AsynqOptions struct {
	// RedisAddr is the redis-server's host:port. Required.
	RedisAddr string
	// DB is the Redis database; 0 means database 0 (the benchmark passes
	// [AsynqDB]).
	DB int
	// Concurrency is asynq's Config.Concurrency; 0 means [DefaultWorkers].
	Concurrency int
	// Producers is how many goroutines enqueue at once; 0 means
	// [DefaultProducers].
	Producers int
	// TaskCheckInterval is asynq's Config.TaskCheckInterval; 0 means
	// [DefaultTaskCheckInterval].
	TaskCheckInterval time.Duration
}

// Asynq runs the benchmark's workloads through an asynq client and server
// whose handler does nothing but count. Start it with [StartAsynq]; the
// runs must not overlap.
type Asynq struct {
	opts   AsynqOptions
	client *asynq.Client
	srv    *asynq.Server
	run    atomic.Pointer[asynqRun]
}

// asynqRun is the handler's view of the current run.
type asynqRun struct {
	gate  chan struct{} // handlers wait until it is closed; nil = never wait
	count [2]atomic.Int64
	want  [2]int64
	done  [2]chan struct{}

	mu  sync.Mutex
	lat []sample // when rec is set
	rec bool
}

func newAsynqRun(wantA, wantB int, gated, rec bool) *asynqRun {
	r := &asynqRun{want: [2]int64{int64(wantA), int64(wantB)}, done: [2]chan struct{}{make(chan struct{}), make(chan struct{})}, rec: rec}
	if gated {
		r.gate = make(chan struct{})
	}
	for i, w := range r.want {
		if w == 0 {
			close(r.done[i])
		}
	}
	return r
}

// StartAsynq starts an asynq server (queue "default") and a client.
func StartAsynq(o AsynqOptions) (*Asynq, error) {
	if o.RedisAddr == "" {
		return nil, errors.New("bench: AsynqOptions.RedisAddr is required")
	}
	if o.Concurrency <= 0 {
		o.Concurrency = DefaultWorkers
	}
	if o.Producers <= 0 {
		o.Producers = DefaultProducers
	}
	if o.TaskCheckInterval <= 0 {
		o.TaskCheckInterval = DefaultTaskCheckInterval
	}
	a := &Asynq{opts: o}
	a.run.Store(newAsynqRun(0, 0, false, false))
	a.client = asynq.NewClient(asynq.RedisClientOpt{Addr: o.RedisAddr, DB: o.DB, PoolSize: o.Producers + 4})
	a.srv = asynq.NewServer(asynq.RedisClientOpt{Addr: o.RedisAddr, DB: o.DB, PoolSize: max(32, o.Concurrency+8)}, asynq.Config{
		Concurrency:       o.Concurrency,
		TaskCheckInterval: o.TaskCheckInterval,
		LogLevel:          asynq.WarnLevel,
	})
	if err := a.srv.Start(asynq.HandlerFunc(a.handle)); err != nil {
		_ = a.client.Close()
		return nil, fmt.Errorf("bench: asynq server: %w", err)
	}
	return a, nil
}

// Close stops the server (waiting for running handlers) and the client.
func (a *Asynq) Close() {
	a.srv.Shutdown()
	_ = a.client.Close()
}

func (a *Asynq) handle(ctx context.Context, t *asynq.Task) error {
	r := a.run.Load()
	if r.gate != nil {
		select {
		case <-r.gate:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	i := 0
	if t.Type() == asynqTypeB {
		i = 1
	}
	if r.rec {
		if p := t.Payload(); len(p) == 8 {
			sub := int64(binary.BigEndian.Uint64(p))
			s := sample{submitNs: sub, d: time.Duration(time.Now().UnixNano() - sub)}
			r.mu.Lock()
			r.lat = append(r.lat, s)
			r.mu.Unlock()
		}
	}
	if r.count[i].Add(1) == r.want[i] {
		close(r.done[i])
	}
	return nil
}

// enqueue enqueues n tasks of type typ from the producer goroutines; each
// task's payload is the time of its enqueue call (8 bytes, Unix ns).
func (a *Asynq) enqueue(ctx context.Context, typ string, n int) error {
	var next atomic.Int64
	var first error
	var once sync.Once
	var wg sync.WaitGroup
	for range min(a.opts.Producers, n) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= int64(n) {
				if err := a.enqueueOne(ctx, typ); err != nil {
					once.Do(func() { first = err })
					return
				}
			}
		}()
	}
	wg.Wait()
	return first
}

func (a *Asynq) enqueueOne(ctx context.Context, typ string) error {
	var p [8]byte
	binary.BigEndian.PutUint64(p[:], uint64(time.Now().UnixNano()))
	if _, err := a.client.EnqueueContext(ctx, asynq.NewTask(typ, p[:])); err != nil {
		return fmt.Errorf("bench: asynq enqueue: %w", err)
	}
	return nil
}

func wait(ctx context.Context, ch <-chan struct{}) error {
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Throughput enqueues jobs tasks and waits until the handler has run for
// every one.
func (a *Asynq) Throughput(ctx context.Context, jobs int) (ThroughputResult, error) {
	r := newAsynqRun(jobs, 0, false, false)
	a.run.Store(r)
	start := time.Now()
	if err := a.enqueue(ctx, asynqTypeA, jobs); err != nil {
		return ThroughputResult{}, err
	}
	submitted := time.Since(start)
	if err := wait(ctx, r.done[0]); err != nil {
		return ThroughputResult{}, fmt.Errorf("bench: asynq throughput: %d of %d ran: %w", r.count[0].Load(), jobs, err)
	}
	return ThroughputResult{Jobs: jobs, Elapsed: time.Since(start), Submitted: submitted}, nil
}

// HeadOfLine holds the handlers, enqueues backlog tasks, then releases the
// handlers and enqueues small tasks into the same queue, and measures until
// the handler has run for the small ones. It returns after the backlog has
// drained too.
func (a *Asynq) HeadOfLine(ctx context.Context, backlog, small int) (HoLResult, error) {
	r := newAsynqRun(backlog, small, true, false)
	a.run.Store(r)
	if err := a.enqueue(ctx, asynqTypeA, backlog); err != nil {
		close(r.gate)
		return HoLResult{}, err
	}
	start := time.Now()
	close(r.gate)
	if err := a.enqueue(ctx, asynqTypeB, small); err != nil {
		return HoLResult{}, err
	}
	if err := wait(ctx, r.done[1]); err != nil {
		return HoLResult{}, fmt.Errorf("bench: asynq head-of-line: %d of %d small ran: %w", r.count[1].Load(), small, err)
	}
	res := HoLResult{Backlog: backlog, Small: small, Delay: time.Since(start), BacklogDoneFirst: r.count[0].Load()}
	if err := wait(ctx, r.done[0]); err != nil {
		return res, fmt.Errorf("bench: asynq head-of-line: backlog %d of %d ran: %w", r.count[0].Load(), backlog, err)
	}
	return res, nil
}

// Latency enqueues at rate tasks per second for d and returns each task's
// time from its enqueue call until its handler started, leaving out the
// tasks enqueued during warmup.
func (a *Asynq) Latency(ctx context.Context, rate float64, d, warmup time.Duration) (LatencyResult, error) {
	want := int(rate * d.Seconds())
	r := newAsynqRun(want, 0, false, true)
	a.run.Store(r)

	// Producers take due tasks from a queue so that a slow enqueue call
	// does not hold back the schedule.
	due := make(chan struct{}, want)
	errc := make(chan error, a.opts.Producers)
	var wg sync.WaitGroup
	pctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for range a.opts.Producers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range due {
				if err := a.enqueueOne(pctx, asynqTypeA); err != nil {
					errc <- err
					cancel()
					return
				}
			}
		}()
	}
	start := time.Now()
	sent, err := pace(pctx, rate, d, 5*time.Millisecond, func(n int) error {
		for range n {
			due <- struct{}{}
		}
		return nil
	})
	close(due)
	wg.Wait()
	select {
	case err = <-errc:
	default:
	}
	if err != nil {
		return LatencyResult{}, err
	}
	elapsed := time.Since(start)
	if sent != want {
		return LatencyResult{}, fmt.Errorf("bench: asynq latency: sent %d, want %d", sent, want)
	}
	if err := wait(ctx, r.done[0]); err != nil {
		return LatencyResult{}, fmt.Errorf("bench: asynq latency: %d of %d ran: %w", r.count[0].Load(), want, err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	from := start.Add(warmup).UnixNano()
	var total []time.Duration
	for _, s := range r.lat {
		if s.submitNs >= from {
			total = append(total, s.d)
		}
	}
	return LatencyResult{Rate: rate, Sent: sent, Duration: elapsed, Total: sorted(total)}, nil
}

// CPU returns this process's CPU time: asynq's client and server run in it.
func (a *Asynq) CPU(context.Context) (time.Duration, error) { return processCPU(), nil }
