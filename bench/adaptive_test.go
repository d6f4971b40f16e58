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
	flagADModes = flag.String("ad.modes", "off,adaptive,static", "adaptive run: modes, comma-separated: off (today), adaptive, static (TYPE_RATE_LIMITS at the first phase's capacity)")
)

// adPhases are the downstream's hidden capacities (jobs/s), each for 20 s
// × -ad.scale.
var adPhases = []float64{200, 80, 300}

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
	// every accepted and throttled call, for -ad.trace
	allAcc, allThr int
}

func newPartner(phaseLen time.Duration) *partner {
	p := &partner{start: time.Now(), phaseLen: phaseLen, last: time.Now()}
	for range adPhases {
		p.accepted = append(p.accepted, map[string]int{})
		p.throttle = append(p.throttle, 0)
		p.other = append(p.other, 0)
	}
	return p
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
	if p.tokens < 1 {
		p.allThr++
		if measured {
			p.throttle[i]++
		}
		return processor.RateLimited(time.Second, errors.New("429 Too Many Requests"))
	}
	p.tokens--
	p.allAcc++
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
	if i, measured := p.phase(time.Now()); measured {
		p.other[i]++
	}
	return nil
}

// BenchmarkAdaptive prints, as JSON lines, per mode and phase after the
// convergence time: goodput ÷ capacity, 429s per accepted job, Jain's
// fairness of three equal tenants sending to the throttling destination,
// and the jobs/s of a fourth tenant sending elsewhere; and per mode the
// worst phase (goodput_ratio_min, throttles_per_job_max, tenant_jain_min).
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
	case "adaptive":
		cfg.AdaptiveRateEnabled = true
	case "static":
		cfg.TypeRateLimits = fmt.Sprintf("partner=%d/s", int(adPhases[0]))
	default:
		return fmt.Errorf("mode %q: want off, adaptive or static", mode)
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
	// more work than the run can do: every tenant keeps sending
	total := phaseLen.Seconds() * 300
	for _, t := range []string{"t1", "t2", "t3", "other"} {
		typ, n := "partner", int(total)
		if t == "other" {
			// its jobs go as fast as its share lets them: enough for every phase
			typ, n = "elsewhere", int(total)*20
		}
		c := client.New(st.Conns.JS, client.Options{Names: st.Conns.Names, Tenant: t})
		jobs := make([]client.Job, 0, contracts.MaxBatch)
		for i := 0; i < n; i++ {
			jobs = append(jobs, client.Job{ID: fmt.Sprintf("j%07d", i), Type: typ})
			if len(jobs) == cap(jobs) || i == n-1 {
				if err := c.Submit(ctx, "bulk", jobs...); err != nil {
					return err
				}
				jobs = jobs[:0]
			}
		}
	}
	p.mu.Lock()
	p.start, p.last = time.Now(), time.Now()
	p.mu.Unlock()
	if *flagADTrace {
		go p.trace(ctx, mode, st.Deps.Queue)
	}
	time.Sleep(phaseLen * time.Duration(len(adPhases)))

	p.mu.Lock()
	defer p.mu.Unlock()
	span := (phaseLen - phaseLen/4).Seconds()
	gMin, tMax, jMin := math.Inf(1), 0.0, math.Inf(1)
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
		rep.Add(name+".other_jobs_per_sec", float64(p.other[i])/span)
		gMin, tMax, jMin = math.Min(gMin, g), math.Max(tMax, tp), math.Min(jMin, jain)
	}
	rep.Add(mode+".goodput_ratio_min", gMin)
	rep.Add(mode+".throttles_per_job_max", tMax)
	rep.Add(mode+".tenant_jain_min", jMin)
	return nil
}

// jainIndex is Jain's fairness index of xs: 1 when all are equal.
func jainIndex(xs []float64) float64 {
	var s, sq float64
	for _, x := range xs {
		s += x
		sq += x * x
	}
	if sq == 0 {
		return 0
	}
	return s * s / (float64(len(xs)) * sq)
}
