package redisq_test

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/bulkaction/bulkaction/pkg/contracts"
	"github.com/bulkaction/bulkaction/pkg/redisq"
)

// The adaptive rate controller (docs/ARCHITECTURE.md §5, dest_report.lua),
// with a fixed clock.

func report(t *testing.T, q *redisq.Queue, outs ...redisq.DestOutcome) []string {
	t.Helper()
	refused, err := q.ReportDestinations(context.Background(), outs)
	if err != nil {
		t.Fatal(err)
	}
	return refused
}

func learned(t *testing.T, q *redisq.Queue, dest string) (redisq.DestRate, *redisq.DestRates) {
	t.Helper()
	r, err := q.DestinationRates(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range r.Rates {
		if d.Destination == dest {
			return d, r
		}
	}
	t.Fatalf("destination %q not tracked: %+v", dest, r.Rates)
	return redisq.DestRate{}, nil
}

func wantRate(t *testing.T, q *redisq.Queue, dest string, want float64) {
	t.Helper()
	d, _ := learned(t, q, dest)
	if math.Abs(d.Rate-want) > 1e-9 {
		t.Fatalf("rate of %s = %g, want %g", dest, d.Rate, want)
	}
}

func ok(dest string, n int) redisq.DestOutcome {
	return redisq.DestOutcome{Destination: dest, Accepted: n}
}

func throttled(dest string, n int, after time.Duration) redisq.DestOutcome {
	return redisq.DestOutcome{Destination: dest, Throttled: n, RetryAfter: after}
}

// TestAdaptiveNotLimitedBeforeThrottle: accepted jobs alone learn no rate.
func TestAdaptiveNotLimitedBeforeThrottle(t *testing.T) {
	t.Parallel()
	q, b := setup(t, redisq.Config{}, true)
	for range 5 {
		report(t, q, ok("mail", 500))
		b.clock.advance(time.Second)
	}
	wantRate(t, q, "mail", 0)
}

// TestAdaptiveCounts: a destination's reading counts every job reported
// accepted and throttled, and when it was last reported.
func TestAdaptiveCounts(t *testing.T) {
	t.Parallel()
	q, b := setup(t, redisq.Config{}, true)
	report(t, q, ok("api", 100), ok("mail", 7))
	b.clock.advance(time.Second)
	report(t, q, throttled("api", 3, 0))
	b.clock.advance(1500 * time.Millisecond)
	report(t, q, redisq.DestOutcome{Destination: "api", Accepted: 5, Throttled: 2})
	d, _ := learned(t, q, "api")
	if d.Accepted != 105 || d.Throttled != 5 || d.LastReportMs != b.clock.now().UnixMilli() {
		t.Errorf("api read as %+v, want 105 accepted, 5 throttled, last reported at %d", d, b.clock.now().UnixMilli())
	}
	if m, _ := learned(t, q, "mail"); m.Accepted != 7 || m.Throttled != 0 || m.Rate != 0 {
		t.Errorf("mail read as %+v", m)
	}
}

// TestAdaptiveDecrease: the first throttle starts the rate at Decrease ×
// what was accepted in the last second; further throttles within the
// hold count once; after it, each multiplies again.
func TestAdaptiveDecrease(t *testing.T) {
	t.Parallel()
	q, b := setup(t, redisq.Config{}, true)
	report(t, q, ok("api", 100))
	b.clock.advance(time.Second)
	report(t, q, throttled("api", 3, 0))
	wantRate(t, q, "api", 80)
	b.clock.advance(500 * time.Millisecond)
	report(t, q, throttled("api", 10, 0))
	wantRate(t, q, "api", 80) // within the hold: the same overshoot
	b.clock.advance(500 * time.Millisecond)
	report(t, q, throttled("api", 1, 0))
	wantRate(t, q, "api", 64)
}

// TestAdaptiveIncrease: while it accepts and is used at half its rate or
// more, the rate grows by Increase per second (at most a second's worth
// per report); an idle destination does not grow.
func TestAdaptiveIncrease(t *testing.T) {
	t.Parallel()
	q, b := setup(t, redisq.Config{Adaptive: redisq.AdaptiveConfig{Increase: 10}}, true)
	report(t, q, ok("api", 100))
	b.clock.advance(time.Second)
	report(t, q, throttled("api", 1, 0)) // 80
	b.clock.advance(500 * time.Millisecond)
	report(t, q, ok("api", 60))
	wantRate(t, q, "api", 85)
	b.clock.advance(10 * time.Second)
	report(t, q, ok("api", 60))
	wantRate(t, q, "api", 95) // capped at one second's increase
	b.clock.advance(time.Second)
	report(t, q, ok("api", 60))
	wantRate(t, q, "api", 105)
	b.clock.advance(5 * time.Second)
	report(t, q, ok("api", 2)) // used far below its rate: no increase
	wantRate(t, q, "api", 105)
}

// TestAdaptiveIncreaseRatio: with IncreaseRatio the rate grows each second
// by that share of its distance from the rate at its last decrease (at
// least Increase): fast back toward it after a decrease, slow near it,
// faster again past it.
func TestAdaptiveIncreaseRatio(t *testing.T) {
	t.Parallel()
	q, b := setup(t, redisq.Config{Adaptive: redisq.AdaptiveConfig{Increase: 5, IncreaseRatio: 0.5}}, true)
	report(t, q, ok("api", 200))
	b.clock.advance(time.Second)
	report(t, q, throttled("api", 1, 0)) // 160, the last decrease from 200
	wantRate(t, q, "api", 160)
	step := func(want float64) {
		t.Helper()
		b.clock.advance(time.Second)
		report(t, q, ok("api", 200))
		wantRate(t, q, "api", want)
	}
	step(180) // + 0.5 × 40
	step(190) // + 0.5 × 20
	step(195) // + 5: the additive increase is the least
	step(200) // + 5
	step(205) // + 5, past the rate of the last decrease
	step(210) // + 5
	step(215) // + 0.5 × 10 = 5 (from 220, 1.1 × 200, a probe: below)
	// a decrease moves the reference: 0.9 × 215 (past the last
	// decrease's rate: half the decrease), then back toward 215
	b.clock.advance(time.Second)
	report(t, q, throttled("api", 1, 0))
	wantRate(t, q, "api", 193.5)
	step(193.5 + 0.5*(215-193.5))
}

// TestAdaptiveFloorAndCeiling: decreases stop at the floor, increases at
// the ceiling.
func TestAdaptiveFloorAndCeiling(t *testing.T) {
	t.Parallel()
	q, b := setup(t, redisq.Config{Adaptive: redisq.AdaptiveConfig{Floor: 20, Ceiling: 90, Increase: 50, Decrease: 0.5}}, true)
	report(t, q, ok("api", 100))
	b.clock.advance(time.Second)
	report(t, q, throttled("api", 1, 0))
	wantRate(t, q, "api", 50)
	for range 5 {
		b.clock.advance(time.Second)
		report(t, q, throttled("api", 1, 0))
	}
	wantRate(t, q, "api", 20)
	for range 5 {
		b.clock.advance(time.Second)
		report(t, q, ok("api", 1000))
	}
	wantRate(t, q, "api", 90)
}

// TestAdaptiveRetryAfterStops: a Retry-After stops the destination until
// then: admission holds its jobs, and takes them again once it passes, at
// the learned rate.
func TestAdaptiveRetryAfterStops(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	q, b := setup(t, redisq.Config{}, true)
	enqueueJobs(t, q, "a/x", "api", 100, 0)
	report(t, q, ok("api", 50))
	b.clock.advance(time.Second)
	report(t, q, throttled("api", 1, 3*time.Second)) // 40/s, stopped 3 s
	d, r := learned(t, q, "api")
	if !r.Stopped(d) || d.StopUntilMs != r.NowMs+3000 {
		t.Fatalf("stop until %d at %d, want 3 s later", d.StopUntilMs, r.NowMs)
	}
	res, err := q.Admit(ctx, 100, redisq.WithLearnedRates(r))
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Jobs) != 0 || res.RateHeld["api"] == 0 {
		t.Fatalf("stopped destination: admitted %d, rate held %v", len(res.Jobs), res.RateHeld)
	}
	b.clock.advance(3 * time.Second)
	_, r = learned(t, q, "api")
	res, err = q.Admit(ctx, 100, redisq.WithLearnedRates(r))
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Jobs) == 0 || len(res.Jobs) > 40 {
		t.Fatalf("after the stop: admitted %d, want 1..40 (the learned 40/s)", len(res.Jobs))
	}
}

// TestLearnedRatesReadAgainWhenAStopEnds: LearnedRates keeps a reading
// for up to LearnedRatesTTL, but not past the end of a stop it shows: a
// reading kept longer would still say stopped (a limit of 0, the jobs held
// until the window's end) after the Retry-After passed.
func TestLearnedRatesReadAgainWhenAStopEnds(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	q, _ := setup(t, redisq.Config{Adaptive: redisq.AdaptiveConfig{Enabled: true}}, false)
	report(t, q, throttled("api", 1, 40*time.Millisecond))
	r, err := q.LearnedRates(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Rates) != 1 || !r.Stopped(r.Rates[0]) {
		t.Skipf("the first reading came after the 40 ms stop: %+v", r)
	}
	time.Sleep(60 * time.Millisecond) // within LearnedRatesTTL, past the stop
	r, err = q.LearnedRates(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Rates) != 1 || r.Stopped(r.Rates[0]) {
		t.Fatalf("60 ms after a 40 ms stop began, the reading still shows it: %+v", r)
	}
}

// TestAdaptiveLearnedRateCarriesNoCredit: a learned limit's pacer gets no
// credit for the gap between calls (a static limit of the same rate gets
// it: TestTypeLimitIdleTypeGetsNoCredit): admission calls 100 ms apart get
// the burst tolerance each, 9 jobs at 200/s, not the 20 a catch-up would
// send to the downstream at once.
func TestAdaptiveLearnedRateCarriesNoCredit(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	q, b := setup(t, redisq.Config{Mode: redisq.ModePaced, GlobalLimit: 10_000, Window: time.Second}, true)
	enqueueJobs(t, q, "a/x", "api", 1000, 0)
	report(t, q, ok("api", 250))
	b.clock.advance(time.Second)
	report(t, q, throttled("api", 1, 0)) // 200/s
	for i := range 3 {
		_, r := learned(t, q, "api")
		res, err := q.Admit(ctx, 1000, redisq.WithLearnedRates(r))
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Jobs) != 9 || res.RateHeld["api"] != 1 {
			t.Fatalf("call %d: admitted %d, rate held %v; want 9, held", i, len(res.Jobs), res.RateHeld)
		}
		b.clock.advance(100 * time.Millisecond)
	}
}

// TestAdaptiveGatesAdmission: the learned rate is the type's limit per
// window; a static per-type limit below it still caps it; without
// WithLearnedRates nothing changes.
func TestAdaptiveGatesAdmission(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		static map[string]int
		want   int
	}{
		{"learned", nil, 40},
		{"static caps", map[string]int{"api": 25}, 25},
		{"static above", map[string]int{"api": 70}, 40},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			q, b := setup(t, redisq.Config{Mode: redisq.ModeSeed, TypeLimits: tc.static}, true)
			enqueueJobs(t, q, "a/x", "api", 300, 0)
			enqueueJobs(t, q, "b/y", "other", 300, 0)
			report(t, q, ok("api", 50))
			b.clock.advance(time.Second)
			report(t, q, throttled("api", 1, 0)) // 40/s
			_, r := learned(t, q, "api")
			res, err := q.Admit(ctx, 400, redisq.WithLearnedRates(r))
			if err != nil {
				t.Fatal(err)
			}
			if got := byType(res.Jobs); got["api"] != tc.want || got["other"] != 300 {
				t.Fatalf("admitted %v, want api=%d other=300", got, tc.want)
			}
		})
	}
}

// TestAdaptiveOffUnchanged: admission without learned rates ignores them.
func TestAdaptiveOffUnchanged(t *testing.T) {
	t.Parallel()
	q, b := setup(t, redisq.Config{Mode: redisq.ModeSeed}, true)
	enqueueJobs(t, q, "a/x", "api", 300, 0)
	report(t, q, ok("api", 50))
	b.clock.advance(time.Second)
	report(t, q, throttled("api", 1, time.Minute))
	res, err := q.Admit(context.Background(), 300)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Jobs) != 300 {
		t.Fatalf("admitted %d, want all 300", len(res.Jobs))
	}
}

// TestAdaptiveCardinality: past MaxDestinations a new destination is
// refused; a known one goes on; a forgotten one frees its place.
func TestAdaptiveCardinality(t *testing.T) {
	t.Parallel()
	q, b := setup(t, redisq.Config{Adaptive: redisq.AdaptiveConfig{MaxDestinations: 2, ForgetAfter: time.Minute}}, true)
	if r := report(t, q, ok("a", 1), ok("b", 1), ok("c", 1)); len(r) != 1 || r[0] != "c" {
		t.Fatalf("refused %v, want [c]", r)
	}
	if r := report(t, q, ok("a", 1)); len(r) != 0 {
		t.Fatalf("refused %v, want none", r)
	}
	b.clock.advance(30 * time.Second)
	report(t, q, ok("a", 1))
	b.clock.advance(45 * time.Second) // b is forgotten
	if r := report(t, q, ok("c", 1)); len(r) != 0 {
		t.Fatalf("refused %v after b was forgotten, want none", r)
	}
}

// TestAdaptiveFirstThrottleEarly: a destination throttled less than a
// second after its first report starts at Decrease × its accepted count
// per second so far (at least 200 ms of it).
func TestAdaptiveFirstThrottleEarly(t *testing.T) {
	t.Parallel()
	q, b := setup(t, redisq.Config{}, true)
	report(t, q, ok("api", 30))
	b.clock.advance(500 * time.Millisecond)
	report(t, q, ok("api", 20), throttled("api", 5, 0))
	wantRate(t, q, "api", 80) // 50 in 0.5 s: 100/s × 0.8
}

// TestAdaptiveHold: with the adaptive rate on, a group whose next job's
// destination used up its learned rate is held as destination_rate, with
// the learned rate; one stopped by a Retry-After until the stop ends.
func TestAdaptiveHold(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	q, b := setup(t, redisq.Config{Mode: redisq.ModeSeed, Adaptive: redisq.AdaptiveConfig{Enabled: true}}, true)
	enqueueJobs(t, q, "a/x", "api", 100, 0)
	report(t, q, ok("api", 50))
	b.clock.advance(time.Second)
	report(t, q, throttled("api", 1, 0)) // 40/s
	r, err := q.LearnedRates(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := q.Admit(ctx, 100, redisq.WithLearnedRates(r)); err != nil {
		t.Fatal(err)
	}
	holdOf := func() redisq.Hold {
		t.Helper()
		hs, err := q.Holds(ctx, []contracts.GroupRef{G("a/x")}, redisq.HoldOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, h := range hs[0] {
			if h.Reason == redisq.HoldDestinationRate {
				return h
			}
		}
		t.Fatalf("holds %+v, want destination_rate", hs[0])
		return redisq.Hold{}
	}
	if h := holdOf(); h.Count != 40 || h.Limit != 40 || h.Rate != 40 || h.Type != "api" {
		t.Fatalf("hold %+v, want 40 of 40 at 40/s of api", h)
	}
	report(t, q, throttled("api", 1, 5*time.Second))
	if h := holdOf(); h.UntilMs != b.clock.t.UnixMilli()+5000 {
		t.Fatalf("hold %+v, want until the Retry-After's end", h)
	}
}

// TestAdaptivePartialOvershootStopsBriefly: a report that throttles some
// jobs while the destination accepted others is a small overshoot, not a
// refusal: its Retry-After stops the destination only as long as the new
// rate takes to send the jobs that were too many; a report of throttles
// alone stops it for the whole Retry-After.
func TestAdaptivePartialOvershootStopsBriefly(t *testing.T) {
	t.Parallel()
	q, b := setup(t, redisq.Config{}, true)
	report(t, q, ok("api", 100))
	b.clock.advance(time.Second)
	report(t, q, redisq.DestOutcome{Destination: "api", Accepted: 10, Throttled: 4, RetryAfter: time.Second})
	d, r := learned(t, q, "api") // 80/s: 4 jobs take 50 ms
	if d.Rate != 80 || d.StopUntilMs != r.NowMs+50 {
		t.Fatalf("rate %g, stop %d ms, want 80/s stopped 50 ms", d.Rate, d.StopUntilMs-r.NowMs)
	}
	// a long Retry-After still bounds it
	report(t, q, redisq.DestOutcome{Destination: "api", Accepted: 1, Throttled: 400, RetryAfter: 2 * time.Second})
	if d, r = learned(t, q, "api"); d.StopUntilMs != r.NowMs+2000 {
		t.Fatalf("stop %d ms, want the Retry-After's 2000", d.StopUntilMs-r.NowMs)
	}
	b.clock.advance(3 * time.Second)
	report(t, q, throttled("api", 1, time.Second)) // nothing accepted: the whole Retry-After
	if d, r = learned(t, q, "api"); d.StopUntilMs != r.NowMs+1000 {
		t.Fatalf("stop %d ms, want the Retry-After's 1000", d.StopUntilMs-r.NowMs)
	}
}

// TestAdaptiveGentleDecreaseAtTheLastRate: a throttle that comes once the
// rate is back at (or past) the rate of its last decrease says the
// capacity is where it was: the rate drops by half the decrease (0.9 for
// 0.8). One that comes below it says the capacity fell: the whole
// decrease.
func TestAdaptiveGentleDecreaseAtTheLastRate(t *testing.T) {
	t.Parallel()
	q, b := setup(t, redisq.Config{Adaptive: redisq.AdaptiveConfig{Increase: 5, IncreaseRatio: 0.5}}, true)
	report(t, q, ok("api", 200))
	b.clock.advance(time.Second)
	report(t, q, throttled("api", 1, 0)) // 160, the last decrease from 200
	for range 4 {                        // 180, 190, 195, 200
		b.clock.advance(time.Second)
		report(t, q, ok("api", 200))
	}
	b.clock.advance(time.Second)
	report(t, q, ok("api", 200)) // 205, past it
	wantRate(t, q, "api", 205)
	b.clock.advance(time.Second)
	report(t, q, throttled("api", 1, 0))
	wantRate(t, q, "api", 184.5) // 0.9 × 205
	b.clock.advance(time.Second)
	report(t, q, throttled("api", 1, 0)) // below 205: the capacity fell
	wantRate(t, q, "api", 147.6)         // 0.8 × 184.5
}

// TestAdaptiveProbesPastTheLastDecrease: once the rate is half a
// decrease's worth past the rate of its last decrease (1.1 × it for 0.8)
// without a
// throttle, the capacity has risen: the rate grows by itself per second
// (doubles), while the destination is used at half its rate or more.
func TestAdaptiveProbesPastTheLastDecrease(t *testing.T) {
	t.Parallel()
	q, b := setup(t, redisq.Config{Adaptive: redisq.AdaptiveConfig{Increase: 6, IncreaseRatio: 0.5}}, true)
	report(t, q, ok("api", 100))
	b.clock.advance(time.Second)
	report(t, q, throttled("api", 1, 0)) // 80, the last decrease from 100
	step := func(accepted int, want float64) {
		t.Helper()
		b.clock.advance(time.Second)
		report(t, q, ok("api", accepted))
		wantRate(t, q, "api", want)
	}
	step(100, 90)  // + 0.5 × 20
	step(100, 96)  // + 6
	step(100, 102) // + 6
	step(100, 108) // + 6
	step(100, 114) // + 6: past 1.1 × 100 from here
	step(100, 228) // doubled
	step(100, 228) // used at less than half of it: no growth
	b.clock.advance(100 * time.Millisecond)
	report(t, q, ok("api", 200))
	wantRate(t, q, "api", 250.8) // a tenth of a second: + a tenth of it
	// a throttle in the probe halves the rate
	b.clock.advance(time.Second)
	report(t, q, throttled("api", 1, 0))
	wantRate(t, q, "api", 125.4)
}

// TestAdaptiveProbeOvershootKeepsTheLastRate: a throttle as soon as a
// probe begins does not halve the rate below the rate of the last
// decrease, which the probe passed without a throttle.
func TestAdaptiveProbeOvershootKeepsTheLastRate(t *testing.T) {
	t.Parallel()
	q, b := setup(t, redisq.Config{Adaptive: redisq.AdaptiveConfig{Increase: 6, IncreaseRatio: 0.5}}, true)
	report(t, q, ok("api", 100))
	b.clock.advance(time.Second)
	report(t, q, throttled("api", 1, 0)) // 80, the last decrease from 100
	for range 5 {                        // 90, 96, 102, 108, 114
		b.clock.advance(time.Second)
		report(t, q, ok("api", 100))
	}
	wantRate(t, q, "api", 114)
	b.clock.advance(time.Second)
	report(t, q, throttled("api", 1, 0))
	wantRate(t, q, "api", 100) // not 57
}

// TestAdaptiveNoProbeWithoutRatio: with IncreaseRatio 0 (additive only)
// the rate never grows faster than Increase.
func TestAdaptiveNoProbeWithoutRatio(t *testing.T) {
	t.Parallel()
	q, b := setup(t, redisq.Config{Adaptive: redisq.AdaptiveConfig{Increase: 50}}, true)
	report(t, q, ok("api", 100))
	b.clock.advance(time.Second)
	report(t, q, throttled("api", 1, 0)) // 80
	for _, want := range []float64{130, 180, 230} {
		b.clock.advance(time.Second)
		report(t, q, ok("api", 1000))
		wantRate(t, q, "api", want)
	}
}
