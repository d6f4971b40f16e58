package bench

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/bulkaction/bulkaction/internal/config"
	"github.com/bulkaction/bulkaction/internal/stack"
	"github.com/bulkaction/bulkaction/pkg/client"
	"github.com/bulkaction/bulkaction/pkg/contracts"
	"github.com/bulkaction/bulkaction/pkg/processor"
	"github.com/bulkaction/bulkaction/pkg/redisq"
)

var (
	flagADScale = flag.Float64("ad.scale", 1, "adaptive run: time scale of the phases (1 = 20 s each)")
	flagADBurst = flag.Int("ad.burst-ms", 0, "adaptive run: PACING_BURST_MS (0 = the default), the pacers' burst tolerance, which bounds what a rate-limited type gets per admission round")
	flagADInc   = flag.Float64("ad.increase", 0, "adaptive run: ADAPTIVE_RATE_INCREASE (0 = the default)")
	flagADTrace = flag.Bool("ad.trace", false, "adaptive run: print each second's capacity, learned rate, accepted and throttled calls to stderr")
	flagADRatio = flag.Float64("ad.ratio", -1, "adaptive run: ADAPTIVE_RATE_INCREASE_RATIO (-1 = the default, 0 = additive only)")
	flagADModes = flag.String("ad.modes", "alone,off,adaptive,static", "adaptive run: modes, comma-separated: alone (the other tenant by itself: the baseline of other_ratio_vs_alone; first), off (today), adaptive, static (TYPE_RATE_LIMITS at the first phase's capacity)")
)

// adPhases are the downstream's hidden capacities (jobs/s), each for 20 s
// × -ad.scale.
var adPhases = []float64{200, 80, 300}

// adSlices is the number of slices per phase in which calls are counted
// for the time to converge (1 s each at -ad.scale 1).
const adSlices = 20

// partner is a downstream with a token-bucket capacity that changes by
// phase; past it a call is throttled with Retry-After 1 s.
type partner struct {
	mu       sync.Mutex
	start    time.Time
	phaseLen time.Duration
	tokens   float64
	last     time.Time
	// per phase: accepted per tenant, throttled, other tenant's jobs
	accepted []map[string]int
	throttle []int
	other    []int
	// per slice of a phase (adSlices each): accepted and throttled calls
	sliceAcc, sliceThr []int
	// every accepted and throttled call, for -ad.trace; every job of the
	// other tenant, for its feeder
	allAcc, allThr, allOther int
}

func newPartner(phaseLen time.Duration) *partner {
	p := &partner{start: time.Now(), phaseLen: phaseLen, last: time.Now()}
	for range adPhases {
		p.accepted = append(p.accepted, map[string]int{})
		p.throttle = append(p.throttle, 0)
		p.other = append(p.other, 0)
	}
	p.sliceAcc = make([]int, len(adPhases)*adSlices)
	p.sliceThr = make([]int, len(adPhases)*adSlices)
	return p
}

// slice is the slice of the run at t, -1 outside it.
func (p *partner) slice(t time.Time) int {
	i := int(t.Sub(p.start) / (p.phaseLen / adSlices))
	if i < 0 || i >= len(p.sliceAcc) {
		return -1
	}
	return i
}

// converge is the time from the start of phase i to the end of its first
// slice that accepted at least 0.9 of the capacity with at most 0.05
// throttles per accepted call (the goals), in seconds; -1 if none did.
func (p *partner) converge(i int) float64 {
	slice := p.phaseLen / adSlices
	want := 0.9 * adPhases[i] * slice.Seconds()
	for k := range adSlices {
		acc, thr := p.sliceAcc[i*adSlices+k], p.sliceThr[i*adSlices+k]
		if float64(acc) >= want && float64(thr) <= 0.05*float64(acc) {
			return (time.Duration(k+1) * slice).Seconds()
		}
	}
	return -1
}

// phase is the phase at t, -1 in the first 5 s × scale of a phase
// (convergence) or after the last.
func (p *partner) phase(t time.Time) (i int, measured bool) {
	el := t.Sub(p.start)
	i = int(el / p.phaseLen)
	if i >= len(adPhases) {
		return len(adPhases) - 1, false
	}
	return i, el-time.Duration(i)*p.phaseLen >= p.phaseLen/4
}

func (p *partner) call(_ context.Context, j *processor.Job) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := time.Now()
	i, measured := p.phase(now)
	capacity := adPhases[i]
	p.tokens = math.Min(capacity/10, p.tokens+now.Sub(p.last).Seconds()*capacity)
	p.last = now
	k := p.slice(now)
	if p.tokens < 1 {
		p.allThr++
		if k >= 0 {
			p.sliceThr[k]++
		}
		if measured {
			p.throttle[i]++
		}
		return processor.RateLimited(time.Second, errors.New("429 Too Many Requests"))
	}
	p.tokens--
	p.allAcc++
	if k >= 0 {
		p.sliceAcc[k]++
	}
	if measured {
		p.accepted[i][j.Tenant]++
	}
	return nil
}

// trace prints, each second until ctx ends, the capacity, the learned
// rate of the partner destination, and the calls it accepted and
// throttled in that second.
func (p *partner) trace(ctx context.Context, mode string, q *redisq.Queue) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	lastAcc, lastThr := 0, 0
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		rate, stop := 0.0, false
		if r, err := q.DestinationRates(ctx); err == nil {
			for _, d := range r.Rates {
				if d.Destination == "partner" {
					rate, stop = d.Rate, r.Stopped(d)
				}
			}
		}
		p.mu.Lock()
		i, _ := p.phase(time.Now())
		p.mu.Unlock()
		acc, thr := p.callsSoFar()
		fmt.Fprintf(os.Stderr, "%s t=%.0fs capacity=%.0f learned=%.1f stopped=%v accepted=%d throttled=%d\n", mode,
			time.Since(p.start).Seconds(), adPhases[i], rate, stop, acc-lastAcc, thr-lastThr)
		lastAcc, lastThr = acc, thr
	}
}

// callsSoFar counts every accepted and throttled call, measured or not.
func (p *partner) callsSoFar() (acc, thr int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.allAcc, p.allThr
}

func (p *partner) elsewhere(_ context.Context, _ *processor.Job) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.allOther++
	if i, measured := p.phase(time.Now()); measured {
		p.other[i]++
	}
	return nil
}

// otherDone counts the jobs of the other tenant done so far.
func (p *partner) otherDone() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.allOther
}

// adOtherBacklog is how many jobs the other tenant keeps waiting: its
// feeder submits more whenever fewer are left, so it never runs dry
// (it does some 3,000 jobs/s on 2 cores).
const adOtherBacklog = 30_000

// feedOther submits jobs of the other tenant until ctx ends, keeping at
// least adOtherBacklog of them not yet done; next is the first job's
// number.
func feedOther(ctx context.Context, c *client.Client, p *partner, next int) error {
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		for next-p.otherDone() < adOtherBacklog {
			if err := submitJobs(ctx, c, "elsewhere", next, contracts.MaxBatch); err != nil {
				if ctx.Err() != nil {
					return nil
				}
				return err
			}
			next += contracts.MaxBatch
		}
	}
}

// submitJobs submits n jobs of type typ to the group bulk, numbered from
// first, in batches of contracts.MaxBatch.
func submitJobs(ctx context.Context, c *client.Client, typ string, first, n int) error {
	jobs := make([]client.Job, 0, contracts.MaxBatch)
	for i := first; i < first+n; i++ {
		jobs = append(jobs, client.Job{ID: fmt.Sprintf("j%08d", i), Type: typ})
		if len(jobs) == cap(jobs) || i == first+n-1 {
			if err := c.Submit(ctx, "bulk", jobs...); err != nil {
				return err
			}
			jobs = jobs[:0]
		}
	}
	return nil
}

// BenchmarkAdaptive prints, as JSON lines, per mode and phase after the
// convergence time: goodput ÷ capacity, 429s per accepted job, Jain's
// fairness of three equal tenants sending to the throttling destination,
// the jobs/s of a fourth tenant sending elsewhere (fed as it goes, so it
// sends in every phase), and the time to converge after the phase's change
// of capacity (converge_s: the end of the first 1 s slice, at -ad.scale 1,
// that met the goals of goodput and 429s; -1 if none); and per mode the
// worst phase (goodput_ratio_min, throttles_per_job_max, tenant_jain_min).
// Mode alone runs the fourth tenant by itself, with the adaptive rate on:
// the modes after it report that tenant's jobs/s as a share of alone's, per
// phase (other_ratio_vs_alone) and at worst (other_ratio_min).
// Goals are reported, not asserted.
func BenchmarkAdaptive(b *testing.B) {
	rep := &Reporter{W: os.Stdout, Bench: "adaptive"}
	for b.Loop() {
		for _, mode := range splitList(*flagADModes) {
			if err := runAdaptive(b, rep, mode); err != nil {
				b.Fatal(err)
			}
		}
	}
}

func splitList(s string) []string {
	var out []string
	start := 0
	for i := 0; i <= len(s); i++ {
		if i == len(s) || s[i] == ',' {
			if i > start {
				out = append(out, s[start:i])
			}
			start = i + 1
		}
	}
	return out
}

// aloneOther is the other tenant's jobs/s per phase in mode alone, the
// baseline of the modes after it (nil until alone ran).
var aloneOther []float64

func runAdaptive(b *testing.B, rep *Reporter, mode string) error {
	env, err := StartEnv()
	if err != nil {
		return err
	}
	defer env.Close()
	cfg, err := config.Load()
	if err != nil {
		return err
	}
	cfg.RedisURL, cfg.NatsURL, cfg.HTTPAddr = env.RedisURL(PipelineDB), env.NatsURL(), ""
	cfg.LogFormat, cfg.LogLevel = "text", "error"
	cfg.WorkerCount = 32
	cfg.BaseBackoffMs, cfg.MaxBackoffMs = 1000, 10_000
	cfg.MaxThrottles = 1000
	if *flagADBurst > 0 {
		cfg.PacingBurstMs = *flagADBurst
	}
	if *flagADInc > 0 {
		cfg.AdaptiveRateIncrease = *flagADInc
	}
	if *flagADRatio >= 0 {
		cfg.AdaptiveRateIncreaseRatio = *flagADRatio
	}
	switch mode {
	case "off":
	case "adaptive", "alone":
		cfg.AdaptiveRateEnabled = true
	case "static":
		cfg.TypeRateLimits = fmt.Sprintf("partner=%d/s", int(adPhases[0]))
	default:
		return fmt.Errorf("mode %q: want alone, off, adaptive or static", mode)
	}
	phaseLen := time.Duration(float64(20*time.Second) * *flagADScale)
	p := newPartner(phaseLen)
	mux := processor.NewMux()
	mux.HandleFunc("partner", p.call)
	mux.HandleFunc("elsewhere", p.elsewhere)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	st, err := stack.Start(ctx, stack.Options{Config: cfg, Targets: stack.PipelineTargets, Mux: mux,
		Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		return err
	}
	defer func() { _ = st.Stop() }()
	// more work than the run can do: every tenant keeps sending (the
	// partner's tenants have more than its largest capacity allows, the
	// other tenant is fed as it goes)
	total := phaseLen.Seconds() * 300
	var other *client.Client
	for _, t := range []string{"t1", "t2", "t3", "other"} {
		typ, n := "partner", int(total)
		c := client.New(st.Conns.JS, client.Options{Names: st.Conns.Names, Tenant: t})
		if t == "other" {
			typ, n, other = "elsewhere", adOtherBacklog, c
		} else if mode == "alone" {
			continue
		}
		if err := submitJobs(ctx, c, typ, 0, n); err != nil {
			return err
		}
	}
	p.mu.Lock()
	p.start, p.last = time.Now(), time.Now()
	p.mu.Unlock()
	fed := make(chan error, 1)
	feedCtx, stopFeed := context.WithCancel(ctx)
	go func() { fed <- feedOther(feedCtx, other, p, adOtherBacklog) }()
	if *flagADTrace {
		go p.trace(ctx, mode, st.Deps.Queue)
	}
	time.Sleep(phaseLen * time.Duration(len(adPhases)))
	stopFeed()
	if err := <-fed; err != nil {
		return fmt.Errorf("feeding the other tenant: %w", err)
	}

	p.mu.Lock()
	defer p.mu.Unlock()
	span := (phaseLen - phaseLen/4).Seconds()
	if mode == "alone" {
		aloneOther = aloneOther[:0]
		for i := range adPhases {
			r := float64(p.other[i]) / span
			aloneOther = append(aloneOther, r)
			rep.Add(fmt.Sprintf("alone.phase%d.other_jobs_per_sec", i+1), r)
		}
		return nil
	}
	gMin, tMax, jMin, oMin := math.Inf(1), 0.0, math.Inf(1), math.Inf(1)
	for i, capacity := range adPhases {
		acc, xs := 0, []float64{}
		for _, t := range []string{"t1", "t2", "t3"} {
			acc += p.accepted[i][t]
			xs = append(xs, float64(p.accepted[i][t]))
		}
		g := float64(acc) / span / capacity
		tp := float64(p.throttle[i]) / math.Max(float64(acc), 1)
		jain := jainIndex(xs)
		name := fmt.Sprintf("%s.phase%d", mode, i+1)
		rep.Add(name+".goodput_ratio", g)
		rep.Add(name+".throttles_per_job", tp)
		rep.Add(name+".tenant_jain", jain)
		o := float64(p.other[i]) / span
		rep.Add(name+".other_jobs_per_sec", o)
		if i < len(aloneOther) && aloneOther[i] > 0 {
			rep.Add(name+".other_ratio_vs_alone", o/aloneOther[i])
			oMin = math.Min(oMin, o/aloneOther[i])
		}
		rep.Add(name+".converge_s", p.converge(i))
		gMin, tMax, jMin = math.Min(gMin, g), math.Max(tMax, tp), math.Min(jMin, jain)
	}
	rep.Add(mode+".goodput_ratio_min", gMin)
	rep.Add(mode+".throttles_per_job_max", tMax)
	rep.Add(mode+".tenant_jain_min", jMin)
	if !math.IsInf(oMin, 1) {
		rep.Add(mode+".other_ratio_min", oMin)
	}
	return nil
}
