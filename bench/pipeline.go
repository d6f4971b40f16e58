package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/bulkaction/bulkaction/internal/config"
	"github.com/bulkaction/bulkaction/internal/conns"
	"github.com/bulkaction/bulkaction/internal/stack"
	"github.com/bulkaction/bulkaction/pkg/client"
	"github.com/bulkaction/bulkaction/pkg/contracts"
	"github.com/bulkaction/bulkaction/pkg/processor"
	"github.com/bulkaction/bulkaction/pkg/processor/builtin"
	"github.com/bulkaction/bulkaction/pkg/redisq"
)

// Pipeline defaults.
const (
	// DefaultGlobalRps is the global rate limit of the runs: high enough
	// never to limit them.
	DefaultGlobalRps = 1_000_000
	// DefaultSubmitBatch is how many jobs one client Submit call carries.
	DefaultSubmitBatch = 1000
)

// PipelineOptions configure a [Pipeline].
type PipelineOptions struct {
	// RedisURL and NatsURL locate the servers. Required.
	RedisURL, NatsURL string
	// Prefix is the Redis key prefix; "" means the configuration default.
	Prefix string
	// Workers is the worker target's WorkerCount; 0 means [DefaultWorkers].
	Workers int
	// SubmitBatch is how many jobs one Submit call carries; 0 means
	// [DefaultSubmitBatch].
	SubmitBatch int
	// Configure, when set, adjusts the configuration after the benchmark's
	// own settings: config.Load (its defaults, and any BULKACTION_*
	// variable set in the environment), then the servers above, GlobalRps
	// [DefaultGlobalRps], WorkerCount Workers and no HTTP endpoint.
	Configure func(*config.Config)
	// Log receives the services' logs; nil means none.
	Log *slog.Logger
}

// Pipeline is every bulkaction target running in this process
// (stack.PipelineTargets) with a worker whose "noop" processor does nothing,
// and a producer client. Start it with [StartPipeline]; runs must not
// overlap.
type Pipeline struct {
	cfg    *config.Config
	conns  *conns.Conns
	client *client.Client
	batch  int

	gate   atomic.Pointer[chan struct{}] // nil = processors run at once
	starts atomic.Pointer[startLog]      // nil = processor starts are not timed
	runs   atomic.Int64                  // processor calls
	seq    atomic.Int64                  // group id sequence

	lastDepths Depths // of the last throughput run

	stack *stack.Stack
}

// StartPipeline connects, provisions the streams and starts every target,
// returning once they run.
func StartPipeline(ctx context.Context, o PipelineOptions) (*Pipeline, error) {
	if o.RedisURL == "" || o.NatsURL == "" {
		return nil, errors.New("bench: PipelineOptions.RedisURL and NatsURL are required")
	}
	if o.Workers <= 0 {
		o.Workers = DefaultWorkers
	}
	if o.SubmitBatch <= 0 {
		o.SubmitBatch = DefaultSubmitBatch
	}
	if o.Log == nil {
		o.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	cfg, err := config.Load()
	if err != nil {
		return nil, err
	}
	cfg.RedisURL, cfg.NatsURL, cfg.HTTPAddr = o.RedisURL, o.NatsURL, ""
	if o.Prefix != "" {
		cfg.RedisPrefix = o.Prefix
	}
	cfg.GlobalRps = DefaultGlobalRps
	cfg.WorkerCount = o.Workers
	if o.Configure != nil {
		o.Configure(cfg)
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	conns, err := conns.Connect(ctx, cfg, "bench", nil)
	if err != nil {
		return nil, err
	}
	p := &Pipeline{cfg: cfg, conns: conns, batch: o.SubmitBatch}
	p.client = client.New(conns.JS, client.Options{Names: conns.Names})
	mux := processor.NewMux()
	mux.HandleFunc(builtin.TypeNoop, p.process)

	st, err := stack.Start(ctx, stack.Options{Config: cfg, Targets: stack.PipelineTargets, Conns: conns, Mux: mux, Log: o.Log})
	if err != nil {
		conns.Close()
		return nil, fmt.Errorf("bench: pipeline: %w", err)
	}
	p.stack = st
	return p, nil
}

// Close stops the targets (producers first) and closes the connections.
func (p *Pipeline) Close() error {
	err := p.stack.Stop()
	p.conns.Close()
	return err
}

// Config is the configuration the targets run with.
func (p *Pipeline) Config() *config.Config { return p.cfg }

// Conns are the pipeline's connections.
func (p *Pipeline) Conns() *conns.Conns { return p.conns }

// LastDepths returns the stream depths sampled during the last
// [Pipeline.Throughput] run.
func (p *Pipeline) LastDepths() Depths { return p.lastDepths }

// Runs counts processor calls so far (at least once: a redelivered job
// counts again).
func (p *Pipeline) Runs() int64 { return p.runs.Load() }

func (p *Pipeline) process(ctx context.Context, j *processor.Job) error {
	if l := p.starts.Load(); l != nil {
		l.add(j)
	}
	if g := p.gate.Load(); g != nil {
		select {
		case <-*g:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	p.runs.Add(1)
	return nil
}

// hold makes processors wait until the returned function is called.
func (p *Pipeline) hold() (release func()) {
	ch := make(chan struct{})
	p.gate.Store(&ch)
	var once sync.Once
	return func() {
		once.Do(func() {
			p.gate.Store(nil)
			close(ch)
		})
	}
}

func (p *Pipeline) groupID(kind string) string {
	return fmt.Sprintf("%s-%d-%d", kind, time.Now().UnixNano()%1e9, p.seq.Add(1))
}

func jobID(i int) string { return fmt.Sprintf("job-%06d", i) }

// submitGroup submits n noop jobs to gid in batches, then seals it.
func (p *Pipeline) submitGroup(ctx context.Context, gid string, n int) error {
	payload := json.RawMessage(`{}`)
	jobs := make([]client.Job, 0, p.batch)
	for i := 0; i < n; i++ {
		jobs = append(jobs, client.Job{ID: jobID(i), Type: builtin.TypeNoop, Payload: payload})
		if len(jobs) == cap(jobs) || i == n-1 {
			if err := p.client.Submit(ctx, gid, jobs...); err != nil {
				return fmt.Errorf("bench: submit %s: %w", gid, err)
			}
			jobs = jobs[:0]
		}
	}
	if err := p.client.Seal(ctx, gid, int64(n)); err != nil {
		return fmt.Errorf("bench: seal %s: %w", gid, err)
	}
	return nil
}

// watch waits for gid to end in the background; the result carries the
// time the terminal event was received. Start it before the group's first
// submit so that the time is the event's, not the watcher's start.
type watch struct {
	done chan struct{}
	at   time.Time
	ev   contracts.GroupEvent
	err  error
}

func (p *Pipeline) watch(ctx context.Context, gid string, want int) *watch {
	w := &watch{done: make(chan struct{})}
	events, err := p.client.Watch(ctx, gid)
	if err != nil {
		w.err = err
		close(w.done)
		return w
	}
	go func() {
		defer close(w.done)
		for ev := range events {
			if ev.State.Terminal() {
				w.at, w.ev = time.Now(), ev
				if ev.State != contracts.StateCompleted || ev.Succeeded != int64(want) {
					w.err = fmt.Errorf("bench: group %s ended %s with %d succeeded, %d failed, want %d succeeded",
						gid, ev.State, ev.Succeeded, ev.Failed, want)
				}
				return
			}
		}
		if w.err = ctx.Err(); w.err == nil {
			w.err = fmt.Errorf("bench: group %s: %w", gid, client.ErrWatchEnded)
		}
	}()
	return w
}

func (w *watch) wait(ctx context.Context) error {
	select {
	case <-w.done:
		return w.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Throughput submits jobs noop jobs spread evenly over groups groups (one
// producer goroutine per group) and waits until every group is COMPLETED.
func (p *Pipeline) Throughput(ctx context.Context, jobs, groups int) (ThroughputResult, error) {
	if groups <= 0 || jobs < groups {
		return ThroughputResult{}, fmt.Errorf("bench: throughput: %d jobs over %d groups", jobs, groups)
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	gids := make([]string, groups)
	sizes := make([]int, groups)
	watches := make([]*watch, groups)
	for g := range groups {
		gids[g] = p.groupID("tp")
		sizes[g] = jobs / groups
		if g < jobs%groups {
			sizes[g]++
		}
		watches[g] = p.watch(wctx, gids[g], sizes[g])
	}
	stop := p.sampleDepths(ctx)
	defer func() { p.lastDepths = stop() }()
	start := time.Now()
	errs := make([]error, groups)
	var wg sync.WaitGroup
	for g := range groups {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[g] = p.submitGroup(ctx, gids[g], sizes[g])
		}()
	}
	wg.Wait()
	submitted := time.Since(start)
	if err := errors.Join(errs...); err != nil {
		return ThroughputResult{}, err
	}
	var last time.Time
	for _, w := range watches {
		if err := w.wait(ctx); err != nil {
			return ThroughputResult{}, err
		}
		if w.at.After(last) {
			last = w.at
		}
	}
	return ThroughputResult{Jobs: jobs, Elapsed: last.Sub(start), Submitted: submitted}, nil
}

// HeadOfLine holds the processors, submits a group of backlog jobs and
// waits until the fetcher has queued all of them, then releases the
// processors, submits a group of small jobs and measures until that group
// is COMPLETED. It returns after the backlog group has completed too.
func (p *Pipeline) HeadOfLine(ctx context.Context, backlog, small int) (HoLResult, error) {
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ga, gb := p.groupID("hol-a"), p.groupID("hol-b")
	wa, wb := p.watch(wctx, ga, backlog), p.watch(wctx, gb, small)
	release := p.hold()
	defer release()
	if err := p.submitGroup(ctx, ga, backlog); err != nil {
		return HoLResult{}, err
	}
	err := waitFor(ctx, 5*time.Millisecond, func() (bool, error) {
		info, ok, err := p.conns.Queue.Group(ctx, benchRef(ga))
		return ok && info.Jobs == int64(backlog), err
	})
	if err != nil {
		return HoLResult{}, fmt.Errorf("bench: head-of-line: backlog not queued: %w", err)
	}
	start := time.Now()
	release()
	if err := p.submitGroup(ctx, gb, small); err != nil {
		return HoLResult{}, err
	}
	if err := wb.wait(ctx); err != nil {
		return HoLResult{}, err
	}
	res := HoLResult{Backlog: backlog, Small: small, Delay: wb.at.Sub(start)}
	if info, ok, err := p.conns.Queue.Group(ctx, benchRef(ga)); err == nil && ok {
		res.BacklogDoneFirst = info.Done
	}
	return res, wa.wait(ctx)
}

// latencyPayload is the payload of a latency job: its submit time.
type latencyPayload struct {
	T int64 `json:"t"` // Unix µs
}

// startLog times, for each latency job's first run, submit to processor
// start: where asynq's and BullMQ's latency runs stop their clocks.
type startLog struct {
	fromUs int64 // jobs submitted before are the warm-up's
	mu     sync.Mutex
	d      []time.Duration
}

func (l *startLog) add(j *processor.Job) {
	now := time.Now().UnixMicro()
	if j.Attempt > 1 {
		return
	}
	var lp latencyPayload
	if json.Unmarshal(j.Payload, &lp) != nil || lp.T < l.fromUs {
		return
	}
	l.mu.Lock()
	l.d = append(l.d, time.Duration(now-lp.T)*time.Microsecond)
	l.mu.Unlock()
}

// Latency submits noop jobs at rate jobs per second for d, one Submit call
// per due batch, rotating over groups groups, then seals the groups, waits
// until they complete and reads every job's enqueue and record times from
// its hash. Jobs submitted during warmup are left out.
func (p *Pipeline) Latency(ctx context.Context, rate float64, d, warmup time.Duration, groups int) (LatencyResult, error) {
	if groups <= 0 {
		return LatencyResult{}, fmt.Errorf("bench: latency: %d groups", groups)
	}
	gids := make([]string, groups)
	counts := make([]int, groups)
	for g := range gids {
		gids[g] = p.groupID("lat")
	}
	next := 0
	start := time.Now()
	starts := &startLog{fromUs: start.Add(warmup).UnixMicro()}
	p.starts.Store(starts)
	defer p.starts.Store(nil)
	sent, err := pace(ctx, rate, d, 5*time.Millisecond, func(n int) error {
		g := next % groups
		next++
		payload, _ := json.Marshal(latencyPayload{T: time.Now().UnixMicro()})
		jobs := make([]client.Job, n)
		for i := range jobs {
			jobs[i] = client.Job{ID: jobID(counts[g] + i), Type: builtin.TypeNoop, Payload: payload}
		}
		counts[g] += n
		return p.client.Submit(ctx, gids[g], jobs...)
	})
	if err != nil {
		return LatencyResult{}, fmt.Errorf("bench: latency: %w", err)
	}
	elapsed := time.Since(start)
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for g, gid := range gids {
		w := p.watch(wctx, gid, counts[g])
		if err := p.client.Seal(ctx, gid, int64(counts[g])); err != nil {
			return LatencyResult{}, err
		}
		if err := w.wait(ctx); err != nil {
			return LatencyResult{}, err
		}
	}
	res := LatencyResult{Rate: rate, Sent: sent, Duration: elapsed}
	from := start.Add(warmup).UnixMicro()
	for g, gid := range gids {
		if err := p.readLatencies(ctx, gid, counts[g], from, &res); err != nil {
			return LatencyResult{}, err
		}
	}
	p.starts.Store(nil)
	starts.mu.Lock()
	res.ToStart = starts.d
	starts.mu.Unlock()
	sorted(res.Total)
	sorted(res.ToStart)
	sorted(res.SubmitToEnqueue)
	sorted(res.EnqueueToRecord)
	return res, nil
}

// benchRef is the group gid of the tenant the benchmark's client submits to.
func benchRef(gid string) contracts.GroupRef { return contracts.Group(client.DefaultTenant, gid) }

// readLatencies reads the job hashes of gid (jobs 0..n-1) and appends the
// latencies of those submitted at or after fromUs.
func (p *Pipeline) readLatencies(ctx context.Context, gid string, n int, fromUs int64, res *LatencyResult) error {
	keys := redisq.NewKeys(p.conns.Queue.Config().Prefix)
	rdb := p.conns.Redis
	const chunk = 1000
	for lo := 0; lo < n; lo += chunk {
		hi := min(n, lo+chunk)
		pipe := rdb.Pipeline()
		cmds := make([]*redis.SliceCmd, 0, hi-lo)
		for i := lo; i < hi; i++ {
			cmds = append(cmds, pipe.HMGet(ctx, keys.Job(benchRef(gid), jobID(i)), "createdAt", "finishedAt", "payload"))
		}
		if _, err := pipe.Exec(ctx); err != nil {
			return fmt.Errorf("bench: read jobs of %s: %w", gid, err)
		}
		for i, c := range cmds {
			v := c.Val()
			created, err1 := strconv.ParseInt(fmt.Sprint(v[0]), 10, 64)
			finished, err2 := strconv.ParseInt(fmt.Sprint(v[1]), 10, 64)
			var lp latencyPayload
			err3 := json.Unmarshal([]byte(fmt.Sprint(v[2])), &lp)
			if err := errors.Join(err1, err2, err3); err != nil {
				return fmt.Errorf("bench: job %s/%s: %v: %w", gid, jobID(lo+i), v, err)
			}
			if lp.T < fromUs {
				continue
			}
			us := func(ms int64) time.Duration { return time.Duration(ms*1000-lp.T) * time.Microsecond }
			res.Total = append(res.Total, us(finished))
			res.SubmitToEnqueue = append(res.SubmitToEnqueue, us(created))
			res.EnqueueToRecord = append(res.EnqueueToRecord, time.Duration(finished-created)*time.Millisecond)
		}
	}
	return nil
}
