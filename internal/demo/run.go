package demo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/bulkaction/bulkaction/internal/cli"
	"github.com/bulkaction/bulkaction/internal/loop"
	"github.com/bulkaction/bulkaction/pkg/client"
	"github.com/bulkaction/bulkaction/pkg/contracts"
	"github.com/bulkaction/bulkaction/pkg/processor/builtin"
	"github.com/bulkaction/bulkaction/pkg/redisq"
	"github.com/bulkaction/bulkaction/pkg/status"
)

// Defaults of Options.
const (
	// DefaultInterval is how often the plain view prints.
	DefaultInterval = 2 * time.Second
	// DefaultStallTimeout is how long Run waits without any progress
	// before it gives up.
	DefaultStallTimeout = 60 * time.Second
	// pollInterval is how often Run reads the groups.
	pollInterval = 250 * time.Millisecond
	// rateWindow is the interval the live rates are measured over.
	rateWindow = 2 * time.Second
	// submitChunk is how many jobs one publish call carries.
	submitChunk = 1000
)

// ErrStalled is returned by Run when no group made progress for
// Options.StallTimeout.
var ErrStalled = errors.New("demo: no progress")

// Options configure Run. Client, Queue and Out are required.
type Options struct {
	// Client publishes the groups' jobs and seals.
	Client *client.Client
	// Queue reads the groups' progress.
	Queue *redisq.Queue
	// Out receives the live view.
	Out io.Writer
	// Terminal redraws progress bars in place; false prints plain lines
	// every Interval.
	Terminal bool
	// Interval is how often the plain view prints; 0 means DefaultInterval.
	Interval time.Duration
	// Suffix is appended to every group id ("" = none), so the demo can
	// run again against servers that keep the ids of an earlier run.
	Suffix string
	// StallTimeout ends Run with ErrStalled when nothing progresses this
	// long; 0 means DefaultStallTimeout.
	StallTimeout time.Duration
	// Log receives submission notes; nil means slog.Default().
	Log *slog.Logger
	// Partner is the partner API the workload's Partner groups call
	// (StartPartner with Workload.Partner); required when it has such
	// groups. Run starts its phases, and reads the rate the adaptive rate
	// learns of it while they run.
	Partner *Partner
}

// tracked is what Run knows of one group.
type tracked struct {
	Group
	id         string
	submitted  time.Duration // since the start; -1 while not submitted
	last       *status.Group
	hist       []*status.Group // readings of the last rateWindow, oldest first
	retries    int64           // the most retries seen
	throttles  int64           // the most throttles seen
	endedAt    time.Duration   // since the start, when first seen ended
	bigPercent float64         // the biggest group's progress when this one ended
	ended      bool
}

// live returns the reading with its rate measured over rateWindow.
func (t *tracked) live() *status.Group {
	if t.last == nil {
		return nil
	}
	if len(t.hist) > 1 {
		return t.last.Since(t.hist[0])
	}
	return t.last
}

func (t *tracked) observe(s *status.Group) {
	t.last = s
	t.retries, t.throttles = max(t.retries, s.Retries), max(t.throttles, s.Throttles)
	t.hist = append(t.hist, s)
	for len(t.hist) > 2 && s.At.Sub(t.hist[1].At) >= rateWindow {
		t.hist = t.hist[1:]
	}
}

// fraction is the group's share of jobs with an outcome (0..1).
func (t *tracked) fraction() float64 {
	if t.last == nil || t.Jobs == 0 {
		return 0
	}
	return float64(t.last.Done+t.last.Cancelled) / float64(t.Jobs)
}

// Run submits the workload, shows its progress on o.Out until every group
// has ended, and returns the summary. It returns early with the summary so
// far and an error when ctx ends, a submission fails, or nothing
// progresses for o.StallTimeout.
func Run(ctx context.Context, w Workload, o Options) (*Summary, error) {
	if o.Client == nil || o.Queue == nil || o.Out == nil {
		return nil, errors.New("demo: Options.Client, Queue and Out are required")
	}
	if o.Interval <= 0 {
		o.Interval = DefaultInterval
	}
	if o.StallTimeout <= 0 {
		o.StallTimeout = DefaultStallTimeout
	}
	if o.Log == nil {
		o.Log = slog.Default()
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)

	groups := make([]*tracked, len(w.Groups))
	big := 0
	var pt *partnerTrack
	for i, g := range w.Groups {
		if g.Partner {
			if o.Partner == nil {
				return nil, fmt.Errorf("demo: group %s/%s calls the partner API: Options.Partner is required", g.Tenant, g.ID)
			}
			if g.Type == "" {
				g.Type = builtin.TypeHTTP
			}
			g.Payload = partnerPayload(o.Partner.URL())
			if pt == nil {
				// its destination: the URL's host, as ingest derives it for
				// an http job, else its type
				dest, ok := builtin.Destination(g.Payload)
				if !ok || g.Type != builtin.TypeHTTP {
					dest = g.Type
				}
				pt = &partnerTrack{p: o.Partner, dest: dest, typ: g.Type}
			}
		}
		groups[i] = &tracked{Group: g, id: g.ID + o.Suffix, submitted: -1}
		if g.Jobs > w.Groups[big].Jobs {
			big = i
		}
	}
	start := time.Now()
	if pt != nil {
		o.Partner.Begin(start)
	}
	var mu sync.Mutex // guards tracked.submitted
	var wg sync.WaitGroup
	for _, t := range groups {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := submit(ctx, o, w.JobType, t, start, &mu); err != nil {
				cancel(fmt.Errorf("demo: submit %s: %w", t.id, err))
			}
		}()
	}
	defer wg.Wait()

	var v view
	if o.Terminal {
		v = newBarView(o.Out, groups, w)
	} else {
		v = &plainView{out: o.Out, every: o.Interval}
	}
	every := pollInterval
	if !o.Terminal {
		every = 2 * pollInterval // nothing is redrawn between the lines
	}
	var (
		lastProgress = time.Now()
		progressSum  int64
		err          error
	)
	pollOnce := func(ctx context.Context) bool {
		snap, perr := poll(ctx, o, groups, start, &mu, big, pt)
		if perr != nil && ctx.Err() == nil {
			err = perr
			return false
		}
		if perr == nil {
			v.update(snap)
			if sum := snap.progress(); sum != progressSum {
				progressSum, lastProgress = sum, time.Now()
			}
			if snap.allEnded() {
				return false
			}
		}
		if time.Since(lastProgress) > o.StallTimeout {
			err = fmt.Errorf("%w for %s", ErrStalled, o.StallTimeout)
			return false
		}
		return true
	}
	if !loop.Until(ctx, every, pollOnce, loop.Now()) {
		err = context.Cause(ctx)
	}
	v.close()
	cancel(nil)
	wg.Wait()
	limits := LimitsOf(o.Queue.Config())
	if pt != nil && limits.GlobalRps > 0 {
		// What the partner accepts bounds its callers whatever the limits
		// (in a mode without a rate there is no bound at all).
		limits.Capacity = map[string]Capacity{pt.typ: o.Partner.Capacity()}
	}
	s := summarize(groups, big, start, time.Since(start), limits, w.JobType)
	if pt != nil {
		s.Partner = pt.result(groups)
	}
	return s, err
}

// submit publishes one group's jobs (after its delay) and seals it.
func submit(ctx context.Context, o Options, jobType string, t *tracked, start time.Time, mu *sync.Mutex) error {
	if t.After > 0 {
		timer := time.NewTimer(time.Until(start.Add(t.After)))
		defer timer.Stop()
		select {
		case <-ctx.Done():
			return nil
		case <-timer.C:
		}
	}
	mu.Lock()
	t.submitted = time.Since(start)
	mu.Unlock()
	jobs := make([]client.Job, 0, submitChunk)
	for i := 0; i < t.Jobs; i += submitChunk {
		jobs = jobs[:0]
		for n := i; n < min(i+submitChunk, t.Jobs); n++ {
			typ := jobType
			if t.Type != "" {
				typ = t.Type
			}
			jobs = append(jobs, client.Job{ID: "job-" + strconv.Itoa(n+1), Type: typ, Payload: t.Payload})
		}
		set := contracts.GroupSettings{Priority: t.Priority, MaxInFlight: t.MaxInFlight}
		if err := o.Client.ForTenant(t.Tenant).SubmitGroup(ctx, t.id, set, jobs...); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
	}
	if err := o.Client.ForTenant(t.Tenant).Seal(ctx, t.id, int64(t.Jobs)); err != nil && ctx.Err() == nil {
		return err
	}
	o.Log.Debug("demo group submitted", "tenant", t.Tenant, "group", t.id, "jobs", t.Jobs, "priority", t.Priority)
	return nil
}

// poll reads every submitted group once, and the partner's learned rate
// (pt nil: no partner) while a group calling it runs.
func poll(ctx context.Context, o Options, groups []*tracked, start time.Time, mu *sync.Mutex, big int, pt *partnerTrack) (*snapshot, error) {
	snap := &snapshot{elapsed: time.Since(start)}
	rate, err := cli.AdmittedRate(ctx, o.Queue)
	if err != nil {
		return nil, err
	}
	snap.rate = rate
	if pt != nil && pt.running(groups, mu) {
		r, err := o.Queue.DestinationRates(ctx)
		if err != nil {
			return nil, err
		}
		pt.observe(snap.elapsed, r)
		snap.partner = pt.now(snap.elapsed)
	}
	for _, t := range groups {
		mu.Lock()
		submitted := t.submitted >= 0
		mu.Unlock()
		if submitted && !t.ended {
			s, err := status.Read(ctx, o.Queue, contracts.Group(t.Tenant, t.id), status.Options{})
			switch {
			case errors.Is(err, status.ErrNotFound): // not ingested yet
			case err != nil:
				return nil, err
			default:
				t.observe(s)
			}
		}
	}
	for _, t := range groups {
		if !t.ended && t.last != nil && t.last.Ended() {
			t.ended, t.endedAt = true, snap.elapsed
			t.bigPercent = 100 * groups[big].fraction()
		}
		mu.Lock()
		submitted := t.submitted >= 0
		mu.Unlock()
		snap.groups = append(snap.groups, rowOf(t, submitted))
	}
	return snap, nil
}

// snapshot is one reading of every group, for the views.
type snapshot struct {
	elapsed time.Duration
	rate    cli.Rate
	groups  []row
	partner *partnerNow // nil without a partner API
}

// row is one group's line of the live view.
type row struct {
	id        string
	priority  contracts.Priority
	total     int64
	settled   int64 // done + cancelled
	state     string
	rate      float64
	eta       float64
	level     redisq.CongestionLevel
	held      string // why the group waits (its first hold), "" when nothing holds it
	ended     bool
	completed bool
}

func rowOf(t *tracked, submitted bool) row {
	r := row{id: t.Tenant + "/" + t.id, priority: t.Priority.OrDefault(), total: int64(t.Jobs), state: "WAITING", eta: -1, level: redisq.CongestionNone}
	if !submitted {
		r.state = "not submitted yet"
		return r
	}
	s := t.live()
	if s == nil {
		r.state = "SUBMITTING"
		return r
	}
	r.settled = s.Done + s.Cancelled
	r.state = string(s.State)
	r.rate, r.eta, r.level = s.Rate, s.ETASeconds, s.Congestion
	if len(s.Holds) > 0 {
		r.held = string(s.Holds[0].Reason)
	}
	r.ended, r.completed = s.Ended(), s.State == contracts.StateCompleted
	return r
}

func (s *snapshot) allEnded() bool {
	for _, r := range s.groups {
		if !r.ended {
			return false
		}
	}
	return true
}

func (s *snapshot) progress() int64 {
	var n int64
	for _, r := range s.groups {
		n += r.settled
	}
	return n
}

// completedRate sums the groups' live rates.
func (s *snapshot) completedRate() float64 {
	var r float64
	for _, g := range s.groups {
		if !g.ended {
			r += g.rate
		}
	}
	return r
}
