package demo

import (
	"fmt"
	"slices"
	"time"

	"github.com/bulkaction/bulkaction/pkg/redisq"
)

// Limits are the admission rates a run was held to, in jobs per second.
// The zero value limits nothing.
type Limits struct {
	// GlobalRps is the global limit; 0 = none.
	GlobalRps float64
	// TypeRps are the per-type limits (BULKACTION_TYPE_RATE_LIMITS).
	TypeRps map[string]float64
	// Capacity is, by job type, the capacity of the downstream the type's
	// jobs call (the demo's partner API for "http"): whatever the limits,
	// it accepts no more, so its callers can end no sooner.
	Capacity map[string]Capacity
}

// LimitsOf returns the limits of a queue's configuration in the paced mode
// (the default). Other modes give none: the ungated mode has no rate, and
// the fixed-window mode counts the jobs it parks for the rate as retries,
// which would overstate the admissions a run made.
func LimitsOf(c redisq.Config) Limits {
	if c.Mode != redisq.ModePaced || c.Window <= 0 {
		return Limits{}
	}
	w := c.Window.Seconds()
	l := Limits{GlobalRps: float64(c.GlobalLimit) / w}
	for t, n := range c.TypeLimits {
		if l.TypeRps == nil {
			l.TypeRps = map[string]float64{}
		}
		l.TypeRps[t] = float64(n) / w
	}
	return l
}

// Bound is the shortest makespan a run's limits allow for the admissions it
// made. Every admission passes the rate gate, a retry's too (after an error
// or a 429, a job goes back to the non-ready queue and is released through
// the same gate), so the bound counts first attempts and retries: counting
// first attempts alone would ask for a makespan no scheduler can reach.
//
// It is a lower bound even for a scheduler that knew in advance which
// attempts would fail: a group's admissions cannot start before it is
// submitted, and those under one limit take at least their number divided
// by it. It leaves out what no limit imposes: how long the jobs run, and the
// Retry-After an attempt answered near the end makes its job wait (the
// pipeline cannot know which attempt that will be, so a run ends about one
// Retry-After, or a short chain of them, after its last first attempt).
//
// A downstream's capacity (Limits.Capacity) bounds the groups calling it in
// the same way, counting the calls it accepted (their jobs that
// succeeded): the throttled ones it did not accept cost it nothing.
//
// The zero value is no bound (nothing limits the rate, or nothing was
// admitted).
type Bound struct {
	// Makespan is the bound, from the start of the demo.
	Makespan time.Duration
	// FirstAttempts is the bound counting first attempts alone.
	FirstAttempts time.Duration
	// Jobs and Retries count the first attempts and the retries under the
	// binding limit; Jobs + Retries are its admissions. Under a
	// downstream's capacity, Jobs counts the calls it accepted and Retries
	// is 0.
	Jobs, Retries int64
	// Limit names the binding limit: "the global limit of 400/s", "the
	// sms limit of 20/s" or "the capacity of hooli's partner API (60/s,
	// 20/s from 12s, 100/s from 24s)".
	Limit string
	// Downstream says the binding limit is a downstream's capacity.
	Downstream bool
	// From is when the binding admissions could start (the first of their
	// groups' submissions); 0 for the whole workload.
	From time.Duration
}

// Ratio is makespan divided by the bound; 0 without a bound.
func (b Bound) Ratio(makespan time.Duration) float64 {
	if b.Makespan <= 0 {
		return 0
	}
	return makespan.Seconds() / b.Makespan.Seconds()
}

// admissions is one group's share of a bound: when it was submitted and
// how many first attempts and retries it made.
type admissions struct {
	at            time.Duration
	jobs, retries int64
}

// boundOf is the bound of one limit of rps over the admissions of the
// groups under it: the largest, over the submission times τ, of τ plus the
// admissions of the groups submitted at τ or later divided by rps.
func boundOf(rps float64, groups []admissions) (b Bound) {
	if rps <= 0 || len(groups) == 0 {
		return Bound{}
	}
	groups = slices.Clone(groups)
	slices.SortFunc(groups, func(a, b admissions) int { return int(a.at - b.at) })
	var jobs, retries int64
	first := time.Duration(0)
	for i := len(groups) - 1; i >= 0; i-- {
		jobs += groups[i].jobs
		retries += groups[i].retries
		if i > 0 && groups[i-1].at == groups[i].at {
			continue
		}
		at := groups[i].at
		span := at + seconds(float64(jobs+retries)/rps)
		if span > b.Makespan {
			b = Bound{Makespan: span, Jobs: jobs, Retries: retries, From: at}
		}
		first = max(first, at+seconds(float64(jobs)/rps))
	}
	b.FirstAttempts = first
	return b
}

func seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

// capacityBound is the bound of a downstream's capacity c over the calls
// it accepted from the groups calling it: the largest, over the submission
// times τ, of τ plus the time c takes from τ to accept the calls of the
// groups submitted at τ or later.
func capacityBound(c Capacity, groups []admissions) (b Bound) {
	groups = slices.Clone(groups)
	slices.SortFunc(groups, func(a, b admissions) int { return int(a.at - b.at) })
	var calls int64
	for i := len(groups) - 1; i >= 0; i-- {
		calls += groups[i].jobs
		if i > 0 && groups[i-1].at == groups[i].at {
			continue
		}
		at := groups[i].at
		if calls <= 0 {
			continue
		}
		if span := at + c.timeFor(at, float64(calls)); span > b.Makespan {
			b = Bound{Makespan: span, Jobs: calls, From: at, Downstream: true}
		}
	}
	b.FirstAttempts = b.Makespan
	return b
}

// Bound returns the shortest makespan the limits allow for the admissions
// of the run: the largest of the global limit's bound over every group,
// each type limit's bound over the groups of that type, and each
// downstream capacity's bound over the calls it accepted from the groups
// of its type.
func (s *Summary) Bound() Bound {
	var all []admissions
	byType := map[string][]admissions{}
	for _, g := range s.Groups {
		a := admissions{at: g.SubmittedAt, jobs: max(int64(g.Jobs)-g.Cancelled, 0), retries: g.Retries}
		all = append(all, a)
		byType[g.Type] = append(byType[g.Type], a)
	}
	best := boundOf(s.Limits.GlobalRps, all)
	if best.Makespan > 0 {
		best.Limit = fmt.Sprintf("the global limit of %s/s", rate(s.Limits.GlobalRps))
	}
	first := best.FirstAttempts
	types := make([]string, 0, len(s.Limits.TypeRps))
	for t := range s.Limits.TypeRps {
		types = append(types, t)
	}
	slices.Sort(types)
	for _, t := range types {
		rps := s.Limits.TypeRps[t]
		if s.Limits.GlobalRps > 0 {
			rps = min(rps, s.Limits.GlobalRps)
		}
		b := boundOf(rps, byType[t])
		first = max(first, b.FirstAttempts)
		if b.Makespan > best.Makespan {
			b.Limit = fmt.Sprintf("the %s limit of %s/s", t, rate(rps))
			best = b
		}
	}
	types = types[:0]
	for t := range s.Limits.Capacity {
		types = append(types, t)
	}
	slices.Sort(types)
	for _, t := range types {
		var calls []admissions
		for _, g := range s.Groups {
			if g.Type == t {
				calls = append(calls, admissions{at: g.SubmittedAt, jobs: g.Succeeded})
			}
		}
		c := s.Limits.Capacity[t]
		b := capacityBound(c, calls)
		first = max(first, b.FirstAttempts)
		if b.Makespan > best.Makespan {
			b.Limit = fmt.Sprintf("the capacity of %s (%s)", c.Name, c)
			best = b
		}
	}
	best.FirstAttempts = first
	return best
}

func rate(r float64) string {
	if r == float64(int64(r)) {
		return fmt.Sprintf("%d", int64(r))
	}
	return fmt.Sprintf("%.1f", r)
}
