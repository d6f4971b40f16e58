package redisq_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/bulkaction/bulkaction/internal/testenv"
	"github.com/bulkaction/bulkaction/pkg/redisq"
	"github.com/redis/go-redis/v9"
)

// The cross-shard limiter (docs/ARCHITECTURE.md §11.1, grant.lua), with a
// fixed clock: every report names the time it is made at.

// grantsBase is the start of an aligned window (and period).
var grantsBase = time.UnixMilli(1_706_000_000_000)

func setupGrants(t testing.TB, cfg redisq.GrantsConfig) (*redisq.Grants, *fakeClock) {
	t.Helper()
	env := testenv.Redis(t)
	clock := &fakeClock{t: grantsBase}
	cfg.Clock = clock.now
	g, err := redisq.NewGrants(context.Background(), env.Client, env.Prefix+"{g}:", cfg)
	if err != nil {
		t.Fatal(err)
	}
	return g, clock
}

func grantAt(t testing.TB, g *redisq.Grants, c *fakeClock, at time.Duration, shard int, d redisq.Demand, u redisq.Used) redisq.Grant {
	t.Helper()
	c.t = grantsBase.Add(at)
	gr, err := g.Report(context.Background(), shard, d, u)
	if err != nil {
		t.Fatal(err)
	}
	return gr
}

const period = 100 * time.Millisecond

// TestGrantsConfigIsChecked: limits, period and window that cannot work
// are refused.
func TestGrantsConfigIsChecked(t *testing.T) {
	t.Parallel()
	env := testenv.Redis(t)
	for _, cfg := range []redisq.GrantsConfig{
		{},
		{Limit: 10, Window: time.Second, Period: 300 * time.Millisecond},
		{Limit: 10, Period: 1500 * time.Microsecond},
		{Limit: 10, TypeLimits: map[string]int{"sms": 0}},
		{Limit: 10, Burst: 2 * time.Second},
	} {
		if _, err := redisq.NewGrants(context.Background(), env.Client, env.Prefix+"{g}:", cfg); err == nil {
			t.Errorf("config %+v accepted", cfg)
		}
	}
	g, _ := setupGrants(t, redisq.GrantsConfig{Limit: 10})
	if _, err := g.Report(context.Background(), 0, redisq.Demand{Normal: -1}, redisq.Used{}); !errors.Is(err, redisq.ErrBadReport) {
		t.Errorf("negative demand: %v, want ErrBadReport", err)
	}
}

// TestGrantsLevelsServedStrictly: the high level's demand takes the whole
// period, split by weight across shards; the normal level gets it once no
// shard reports high demand, a period later.
func TestGrantsLevelsServedStrictly(t *testing.T) {
	t.Parallel()
	g, c := setupGrants(t, redisq.GrantsConfig{Limit: 1000})
	d := map[int]redisq.Demand{0: {High: 1, Normal: 1}, 1: {Normal: 5}, 2: {High: 3}}
	report := func(p int) map[int]int64 {
		out := map[int]int64{}
		for s := 0; s < 3; s++ {
			gr := grantAt(t, g, c, time.Duration(p)*period, s, d[s], redisq.Used{Jobs: math.MaxInt32})
			out[s] = gr.Jobs
		}
		return out
	}
	if got := report(-1); got[0]+got[1]+got[2] != 0 { // first reports: demand counts from the next period
		t.Fatalf("first reports granted %v", got)
	}
	if got := report(0); got[0] != 25 || got[1] != 0 || got[2] != 75 {
		t.Fatalf("high 1:3, normal waiting: grants %v, want 25, 0, 75", got)
	}
	d[0], d[2] = redisq.Demand{Normal: 1}, redisq.Demand{}
	// this period was split by the demand of the last: shard 2, with none
	// left, takes nothing
	if got := report(1); got[0] != 25 || got[1] != 0 || got[2] != 0 {
		t.Fatalf("the period after high demand ended: grants %v, want 25, 0, 0", got)
	}
	got := report(2)
	if got[2] != 0 || got[0]+got[1] < 100 || math.Abs(float64(got[1])/float64(got[0])-5) > 0.5 {
		t.Fatalf("normal 1:5: grants %v", got)
	}
}

// TestGrantsTypesSplitByTheirDemand: a type limit of 200/s is split by the
// shards' demand for the type, never beyond their overall grants, and no
// window grants more of it than its limit.
func TestGrantsTypesSplitByTheirDemand(t *testing.T) {
	t.Parallel()
	g, c := setupGrants(t, redisq.GrantsConfig{Limit: 1000, TypeLimits: map[string]int{"sms": 200}})
	d := []redisq.Demand{
		{Normal: 1, Types: map[string]int64{"sms": 1}},
		{Normal: 1, Types: map[string]int64{"sms": 3}},
		{Normal: 2},
		{Low: 1, Types: map[string]int64{"sms": 4}}, // below the normal level: no overall grant
	}
	sms := make([]int64, len(d))
	var jobs int64
	for p := -1; p < 20; p++ {
		var window int64
		for s := range d {
			gr := grantAt(t, g, c, time.Duration(p)*period, s, d[s], redisq.Used{Jobs: math.MaxInt32})
			if gr.Types["sms"] > gr.Jobs {
				t.Fatalf("period %d shard %d: %d sms beyond its grant of %d", p, s, gr.Types["sms"], gr.Jobs)
			}
			if p >= 0 {
				sms[s] += gr.Types["sms"]
				jobs += gr.Jobs
				window += gr.Types["sms"]
			}
		}
		if p == 9 || p == 19 {
			// each window's sms
			var w int64
			for _, n := range sms {
				w += n
			}
			if w != int64(200*(p+1)/10) {
				t.Fatalf("sms granted by period %d: %d (%v), want %d", p, w, sms, 200*(p+1)/10)
			}
		}
	}
	if sms[3] != 0 || sms[2] != 0 {
		t.Errorf("sms to shards without an overall grant or sms demand: %v", sms)
	}
	if sms[1] != 3*sms[0] {
		t.Errorf("sms split %v, want 1:3 between shards 0 and 1", sms)
	}
	if jobs != 2000 {
		t.Errorf("jobs granted in two windows: %d, want 2000", jobs)
	}
}

// TestGrantsNoDemandGoesToOthers: a shard that reports no demand gets
// nothing; the others get the whole period.
func TestGrantsNoDemandGoesToOthers(t *testing.T) {
	t.Parallel()
	g, c := setupGrants(t, redisq.GrantsConfig{Limit: 1000})
	for p := -1; p < 3; p++ {
		idle := grantAt(t, g, c, time.Duration(p)*period, 0, redisq.Demand{}, redisq.Used{})
		busy := grantAt(t, g, c, time.Duration(p)*period, 1, redisq.Demand{Normal: 1}, redisq.Used{Jobs: 100})
		if p >= 0 && (idle.Jobs != 0 || busy.Jobs != 100) {
			t.Fatalf("period %d: idle shard %d, busy shard %d, want 0 and 100", p, idle.Jobs, busy.Jobs)
		}
	}
}

// TestGrantsIdleShardPassesItsAllotmentOn: a shard that reports no demand
// in a period it was allotted gives its allotment to the shards that have
// not reported in the period yet.
func TestGrantsIdleShardPassesItsAllotmentOn(t *testing.T) {
	t.Parallel()
	// the idle shard reports first in the period (and allocates it), or
	// second
	for _, order := range [][]int{{1, 0, 2}, {0, 1, 2}} {
		g, c := setupGrants(t, redisq.GrantsConfig{Limit: 1000, TypeLimits: map[string]int{"sms": 300}})
		d := redisq.Demand{Normal: 1, Types: map[string]int64{"sms": 1}}
		for p := -1; p < 2; p++ {
			for s := range 3 {
				grantAt(t, g, c, time.Duration(p)*period, s, d, redisq.UsedAll)
			}
		}
		got := map[int]redisq.Grant{}
		for _, s := range order {
			ds := d
			if s == 1 {
				ds = redisq.Demand{}
			}
			got[s] = grantAt(t, g, c, 2*period, s, ds, redisq.UsedAll)
		}
		jobs, sms := got[0].Jobs+got[2].Jobs, got[0].Types["sms"]+got[2].Types["sms"]
		if got[1].Jobs != 0 || jobs != 100 || sms != 30 {
			t.Fatalf("order %v: grants %+v: want the idle shard's third of 100 jobs and 30 sms to the others", order, got)
		}
		if order[0] == 0 && (got[0].Jobs < 33 || got[0].Jobs > 34) {
			t.Fatalf("order %v: grants %+v: want the shard before the idle one at its third", order, got)
		}
	}
}

// TestGrantsDeadShardLosesItsGrant: a shard that stops reporting is left
// out within two periods of its last report; what it was allotted and did
// not take goes back to the window's pool, which the live shard gets in
// later periods (up to the burst tolerance), never beyond the limit.
func TestGrantsDeadShardLosesItsGrant(t *testing.T) {
	t.Parallel()
	g, c := setupGrants(t, redisq.GrantsConfig{Limit: 1000})
	d := redisq.Demand{Normal: 1}
	var total int64
	for p := -1; p < 10; p++ {
		at := time.Duration(p) * period
		if p < 3 { // shard 1 reports last in period 2
			gr := grantAt(t, g, c, at, 1, d, redisq.Used{Jobs: 50})
			if p >= 0 {
				total += gr.Jobs
			}
		}
		gr := grantAt(t, g, c, at, 0, d, redisq.Used{Jobs: math.MaxInt32})
		switch {
		case p >= 0 && p <= 3 && gr.Jobs != 50:
			t.Fatalf("period %d: the live shard got %d, want half (50)", p, gr.Jobs)
		case p == 4 && gr.Jobs != 109:
			// the dead shard's 50 of period 3 were not taken: the window
			// has 650 left for its 6 periods
			t.Fatalf("period 4: the live shard got %d, want all the period and what was left (109)", gr.Jobs)
		}
		if p >= 0 {
			total += gr.Jobs
		}
	}
	if total > 1000 || total < 950 {
		t.Fatalf("granted %d in the window, want at most 1000 and at least 950", total)
	}
}

// TestGrantsUnusedGrantFlowsBack: what a shard reports it did not admit
// goes back to the window's pool at once and is granted again, the
// window's jobs granted minus returned staying within the limit; a report
// repeated in the same period gets the same grant and counts nothing twice.
func TestGrantsUnusedGrantFlowsBack(t *testing.T) {
	t.Parallel()
	g, c := setupGrants(t, redisq.GrantsConfig{Limit: 1000})
	d := redisq.Demand{Normal: 1}
	grantAt(t, g, c, -period, 0, d, redisq.Used{})
	var last redisq.Grant
	var granted, returned int64
	for p := 0; p < 10; p++ {
		used := last.Jobs / 2
		gr := grantAt(t, g, c, time.Duration(p)*period, 0, d, redisq.Used{Jobs: used})
		again := grantAt(t, g, c, time.Duration(p)*period+50*time.Millisecond, 0, d, redisq.Used{Jobs: used})
		if again.Jobs != gr.Jobs || again.Period != gr.Period {
			t.Fatalf("period %d: a repeated report got %+v, the first %+v", p, again, gr)
		}
		if gr.Remaining != period || again.Remaining != 50*time.Millisecond {
			t.Fatalf("period %d: remaining %s and %s, want 100ms and 50ms", p, gr.Remaining, again.Remaining)
		}
		returned += last.Jobs - used
		granted += gr.Jobs
		if granted-returned > 1000 {
			t.Fatalf("period %d: %d granted, %d returned", p, granted, returned)
		}
		// an even share of what is left over the periods left, within the
		// sliding cap (1001) over the last ten periods
		left := 1000 - (granted - gr.Jobs - returned)
		want := min((left+int64(9-p))/int64(10-p), left, 1001-(granted-gr.Jobs-returned))
		if gr.Jobs != want {
			t.Fatalf("period %d: granted %d, want %d: half of each grant came back", p, gr.Jobs, want)
		}
		last = gr
	}
	if granted < 1000 {
		t.Fatalf("granted %d in the window, want more than the limit, as half came back", granted)
	}
}

// TestGrantsUsedAllReturnsNothing: an owner that cannot tell what it
// admitted of its last grant ([redisq.UsedAll]) returns nothing of it; one
// that admitted none returns it all.
func TestGrantsUsedAllReturnsNothing(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		used redisq.Used
		want int64 // the second period's grant: an even share of what is left
	}{{redisq.UsedAll, 100}, {redisq.Used{}, 112}} {
		g, c := setupGrants(t, redisq.GrantsConfig{Limit: 1000})
		d := redisq.Demand{Normal: 1}
		grantAt(t, g, c, -period, 0, d, redisq.Used{})
		if gr := grantAt(t, g, c, 0, 0, d, redisq.Used{}); gr.Jobs != 100 {
			t.Fatalf("first period: %d, want 100", gr.Jobs)
		}
		if gr := grantAt(t, g, c, period, 0, d, tc.used); gr.Jobs != tc.want {
			t.Errorf("used %+v: the next period granted %d, want %d", tc.used, gr.Jobs, tc.want)
		}
	}
}

// TestGrantsPeriodsNeverGoBack: a report whose clock is behind the period
// allocated last counts in that period, without a second grant.
func TestGrantsPeriodsNeverGoBack(t *testing.T) {
	t.Parallel()
	g, c := setupGrants(t, redisq.GrantsConfig{Limit: 1000})
	d := redisq.Demand{Normal: 1}
	grantAt(t, g, c, -period, 0, d, redisq.Used{})
	first := grantAt(t, g, c, 5*period, 0, d, redisq.UsedAll)
	back := grantAt(t, g, c, 2*period, 0, d, redisq.UsedAll)
	if back.Jobs != first.Jobs || back.Period != first.Period || back.Remaining != 400*time.Millisecond {
		t.Fatalf("a report 300ms back got %+v, the period's grant was %+v", back, first)
	}
}

// simShard is a shard owner in the simulation: its tenants (equal weight),
// the next tenant its fair queue serves, its last grant.
type simShard struct {
	tenants  []int
	next     int
	last     redisq.Grant
	admitted int64
}

// simResult holds the simulation's admissions and per-window accounting.
type simResult struct {
	times   []float64 // ms since grantsBase, per admitted job
	tenants []int
	net     map[int64]int64 // window -> granted minus returned
}

// simulate runs periods [from, to) of shard owners reporting at the start
// of each period (shard i i ms late), each admitting its whole grant evenly
// until the period ends, split among its tenants in turn. busy says
// whether a shard has work in a period; in the period before one without,
// its owner admits only half of its grant.
func simulate(t *testing.T, g *redisq.Grants, c *fakeClock, shards []*simShard, from, to int, busy func(s, p int) bool, r *simResult) {
	t.Helper()
	per := int64(time.Second / period)
	for p := from; p < to; p++ {
		for i, s := range shards {
			now := busy(i, p)
			used := s.admitted
			cur := grantsBase.UnixMilli()/int64(period/time.Millisecond) + int64(p)
			if s.last.Period/per == cur/per {
				r.net[s.last.Period/per] -= s.last.Jobs - used
			}
			var d redisq.Demand
			if now {
				d.Normal = int64(len(s.tenants))
			}
			gr := grantAt(t, g, c, time.Duration(p)*period+time.Duration(i)*time.Millisecond, i, d, redisq.Used{Jobs: used})
			r.net[gr.Period/per] += gr.Jobs
			// an owner whose work runs out in the period admits half of its
			// grant
			n := gr.Jobs
			if !busy(i, p+1) {
				n /= 2
			}
			s.last, s.admitted = gr, n
			start := float64(int64(p)*int64(period/time.Millisecond) + int64(i))
			span := float64(gr.Remaining / time.Millisecond)
			for j := int64(0); j < n; j++ {
				r.times = append(r.times, start+span*float64(j)/float64(gr.Jobs))
				r.tenants = append(r.tenants, s.tenants[s.next])
				s.next = (s.next + 1) % len(s.tenants)
			}
		}
	}
}

// windowStats returns the most jobs in an aligned window of [fromMs,
// toMs), in any sliding window within it, and the jobs admitted within it.
func windowStats(times []float64, fromMs, toMs float64) (aligned, sliding, total int) {
	var in []float64
	for _, x := range times {
		if x >= fromMs && x < toMs {
			in = append(in, x)
		}
	}
	sort.Float64s(in)
	counts := map[int64]int{}
	for _, x := range in {
		counts[int64(math.Floor(x/1000))]++
	}
	for _, n := range counts {
		aligned = max(aligned, n)
	}
	j := 0
	for i := range in { // windows starting at each admission
		for j < len(in) && in[j] < in[i]+1000 {
			j++
		}
		sliding = max(sliding, j-i)
	}
	return aligned, sliding, len(in)
}

// TestGrantsSimulation: 16 shards holding 60 tenants of equal weight
// unevenly (1 to 8 each), every tenant always with work, a limit of 1000/s
// over 20 s: no aligned window beyond the limit, no sliding one beyond
// 1.02 of it, at least 0.97 of it used, and every 2 s the tenants' jobs
// equal (Jain ≥ 0.99). Then 20 s of shards going idle and coming back:
// the same bounds, the limit still used at 0.97 or more, and the tenants'
// jobs per period their shard had work still close (Jain ≥ 0.98).
func TestGrantsSimulation(t *testing.T) {
	t.Parallel()
	const limit = 1000
	g, c := setupGrants(t, redisq.GrantsConfig{Limit: limit})
	sizes := []int{1, 1, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 8, 8}
	var shards []*simShard
	tenant := 0
	for _, n := range sizes {
		s := &simShard{}
		for range n {
			s.tenants = append(s.tenants, tenant)
			tenant++
		}
		shards = append(shards, s)
	}
	if tenant != 60 {
		t.Fatalf("%d tenants", tenant)
	}
	r := &simResult{net: map[int64]int64{}}
	simulate(t, g, c, shards, 0, 200, func(int, int) bool { return true }, r)
	aligned, sliding, total := windowStats(r.times, 0, 20_000)
	util := float64(total) / (limit * 20)
	t.Logf("all busy: most in an aligned window %d, in a sliding one %d, utilisation %.4f", aligned, sliding, util)
	if aligned > limit || float64(sliding) > limit*1.02 || util < 0.97 {
		t.Errorf("all busy: aligned %d, sliding %d (limit %d), utilisation %.4f", aligned, sliding, limit, util)
	}
	worst := 1.0
	for w := 0; w < 10; w++ {
		per := make([]float64, 60)
		for i, x := range r.times {
			if x >= float64(w*2000) && x < float64((w+1)*2000) {
				per[r.tenants[i]]++
			}
		}
		worst = math.Min(worst, jain(per...))
	}
	t.Logf("all busy: worst Jain index of the tenants over 2 s windows %.5f", worst)
	if worst < 0.99 {
		t.Errorf("Jain index %.5f over a 2 s window, want ≥ 0.99", worst)
	}

	// shards going idle and back: shard i idles for 3 to 9 periods out of
	// every 11 to 30, out of phase with the others
	busy := func(s, p int) bool {
		cycle := 11 + (s*7)%20
		return (p+s*5)%cycle >= 3+s%7
	}
	changes := 0
	for p := 200; p < 400; p++ {
		for s := range shards {
			if busy(s, p) != busy(s, p-1) {
				changes++
			}
		}
	}
	simulate(t, g, c, shards, 200, 400, busy, r)
	aligned, sliding, total = windowStats(r.times, 20_000, 40_000)
	util = float64(total) / (limit * 20)
	t.Logf("changing demand (%d changes): most in an aligned window %d, in a sliding one %d, utilisation %.4f",
		changes, aligned, sliding, util)
	if aligned > limit || float64(sliding) > limit*1.02 || util < 0.97 {
		t.Errorf("changing demand: aligned %d, sliding %d (limit %d), utilisation %.4f", aligned, sliding, limit, util)
	}
	// tenants' jobs per period their shard had work, over the phase
	rate := make([]float64, 60)
	for i, x := range r.times {
		if x >= 20_000 {
			rate[r.tenants[i]]++
		}
	}
	for si, s := range shards {
		n := 0
		for p := 200; p < 400; p++ {
			if busy(si, p) {
				n++
			}
		}
		for _, tn := range s.tenants {
			rate[tn] /= float64(n)
		}
	}
	t.Logf("changing demand: Jain index of the tenants' jobs per period of work %.4f", jain(rate...))
	if j := jain(rate...); j < 0.98 {
		t.Errorf("changing demand: Jain index of the tenants' jobs per period of work %.4f, want ≥ 0.98", j)
	}
	for w, n := range r.net {
		if n > limit {
			t.Errorf("window %d: %d granted minus returned", w, n)
		}
	}
}

// TestGrantsOnRedisCluster: with the cross-shard prefix "<prefix>{g}:" the
// script's keys are one slot of a Redis Cluster, and reports through the
// cluster client get their grants.
func TestGrantsOnRedisCluster(t *testing.T) {
	t.Parallel()
	cluster := testenv.NewRedisCluster(t, 3)
	rdb := cluster.Client(t)
	ctx := context.Background()
	clock := &fakeClock{t: grantsBase}
	g, err := redisq.NewGrants(ctx, rdb, "bulk-action:{g}:", redisq.GrantsConfig{Limit: 1000, Clock: clock.now})
	if err != nil {
		t.Fatal(err)
	}
	keys := redisq.NewKeys("bulk-action:{g}:")
	pool, err := cluster.KeySlot(ctx, keys.GrantPool())
	if err != nil {
		t.Fatal(err)
	}
	if shards, err := cluster.KeySlot(ctx, keys.GrantShards()); err != nil || shards != pool {
		t.Fatalf("the grants' keys are in slots %d and %d (%v)", pool, shards, err)
	}
	var total int64
	for p := -1; p < 10; p++ {
		for s := range 4 {
			gr := grantAt(t, g, clock, time.Duration(p)*period, s, redisq.Demand{Normal: int64(s + 1)}, redisq.Used{Jobs: math.MaxInt32})
			if p >= 0 {
				total += gr.Jobs
			}
		}
	}
	if total != 1000 {
		t.Fatalf("granted %d in the window, want 1000", total)
	}
}

// BenchmarkGrantsPeriod: one period's reports of every shard (the first
// allocating the period), per shard count; script_µs/report is the
// server's own time per call (INFO commandstats).
func BenchmarkGrantsPeriod(b *testing.B) {
	for _, n := range []int{16, 256} {
		b.Run(fmt.Sprintf("shards=%d", n), func(b *testing.B) {
			srv := testenv.NewRedisServer(b)
			rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
			b.Cleanup(func() { rdb.Close() })
			ctx := context.Background()
			c := &fakeClock{t: grantsBase}
			g, err := redisq.NewGrants(ctx, rdb, "bench{g}:", redisq.GrantsConfig{Limit: 100_000,
				TypeLimits: map[string]int{"sms": 2000}, Clock: c.now})
			if err != nil {
				b.Fatal(err)
			}
			d := redisq.Demand{Normal: 3, Types: map[string]int64{"sms": 1}}
			if err := rdb.ConfigResetStat(ctx).Err(); err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				for s := range n {
					grantAt(b, g, c, time.Duration(i)*period, s, d, redisq.Used{Jobs: 10})
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N*n), "µs/report")
			info := rdb.Info(ctx, "commandstats").Val()
			for _, line := range strings.Split(info, "\n") {
				if strings.HasPrefix(line, "cmdstat_evalsha:") {
					for _, f := range strings.Split(strings.TrimSpace(line[len("cmdstat_evalsha:"):]), ",") {
						if v, ok := strings.CutPrefix(f, "usec_per_call="); ok {
							us, _ := strconv.ParseFloat(v, 64)
							b.ReportMetric(us, "script_µs/report")
						}
					}
				}
			}
		})
	}
}

// TestGrantsReturnAfterTheAllocationIsGrantedInThePeriod: what a shard
// returns of its last grant after the current period was allocated goes,
// in that period, to the shards that have not reported yet (the last to
// report keeps its own), so that it is not lost when the window ends
// first; a shard given more than its share pays it back from the next
// allocation; the window's jobs granted minus returned stay within the
// limit.
func TestGrantsReturnAfterTheAllocationIsGrantedInThePeriod(t *testing.T) {
	t.Parallel()
	g, c := setupGrants(t, redisq.GrantsConfig{Limit: 900})
	d := redisq.Demand{Normal: 1}
	for s := 0; s < 3; s++ {
		grantAt(t, g, c, -period, s, d, redisq.Used{})
	}
	var first [3]int64
	for s := 0; s < 3; s++ {
		first[s] = grantAt(t, g, c, 0, s, d, redisq.Used{}).Jobs
	}
	if first != [3]int64{30, 30, 30} {
		t.Fatalf("first period: %v, want 30 each", first)
	}
	// period 1: shard 0 allocates it (using all of its last grant), shard 1
	// returns 20 of its 30, then shard 2 and shard 1's return go to it
	g0 := grantAt(t, g, c, period, 0, d, redisq.Used{Jobs: 30}).Jobs
	g1 := grantAt(t, g, c, period, 1, d, redisq.Used{Jobs: 10}).Jobs
	g2 := grantAt(t, g, c, period, 2, d, redisq.Used{Jobs: 30}).Jobs
	if g0 != 30 || g1 != 30 || g2 != 50 {
		t.Fatalf("period 1: grants %d %d %d, want 30 30 50 (shard 1's 20 returned go to shard 2, yet to report)", g0, g1, g2)
	}
	// period 2: shard 2 pays back the 20 it was given beyond its share, and
	// as the last to report keeps the 10 it returns
	g0 = grantAt(t, g, c, 2*period, 0, d, redisq.Used{Jobs: 30}).Jobs
	g1 = grantAt(t, g, c, 2*period, 1, d, redisq.Used{Jobs: 30}).Jobs
	g2 = grantAt(t, g, c, 2*period, 2, d, redisq.Used{Jobs: 40}).Jobs
	if d := g2 - (g1 - 20 + 10); d < -1 || d > 1 {
		t.Fatalf("period 2: grants %d %d %d, want shard 2's %d less 20 paid back and 10 kept", g0, g1, g2, g1)
	}
	// the rest of the window, every grant used: the returns were granted
	// again, and never beyond the limit, net
	// period 0: 90 less shard 1's 20; period 1: 110 less shard 2's 10
	net := int64(70+100) + g0 + g1 + g2
	for p := 3; p < 10; p++ {
		for s := 0; s < 3; s++ {
			net += grantAt(t, g, c, time.Duration(p)*period, s, d, redisq.Used{Jobs: 1 << 20}).Jobs
		}
	}
	if net > 900 || net < 890 {
		t.Fatalf("the window granted %d net, want at most the limit of 900 and at least 890", net)
	}
}

// TestGrantsSplitReportedLimitsAndShares: a limit named in the reports
// alone (a destination's learned rate) is split as a static type's, by the
// shards' demand for it, within it in the window; a report that does not
// name it keeps its window's count; and each grant carries the shard's
// part of the demand its period was allocated by.
func TestGrantsSplitReportedLimitsAndShares(t *testing.T) {
	t.Parallel()
	g, c := setupGrants(t, redisq.GrantsConfig{Limit: 1000})
	limits := map[string]int{"api.example.com": 100}
	d := []redisq.Demand{
		{Normal: 1, Types: map[string]int64{"api.example.com": 1}, Limits: limits},
		{Normal: 3, Types: map[string]int64{"api.example.com": 3}, Limits: limits},
	}
	var dest [2]int64
	for p := -1; p < 5; p++ {
		for s := range d {
			gr := grantAt(t, g, c, time.Duration(p)*period, s, d[s], redisq.Used{Jobs: math.MaxInt32,
				Types: map[string]int64{"api.example.com": math.MaxInt32}})
			dest[s] += gr.Types["api.example.com"]
			if p >= 0 {
				if want := []float64{0.25, 0.75}[s]; math.Abs(gr.Share-want) > 1e-6 {
					t.Fatalf("period %d, shard %d: share %v, want %v", p, s, gr.Share, want)
				}
			}
		}
	}
	// five periods of an even share of 100 a second: 10 each, 1:3
	if dest[0]+dest[1] != 50 || math.Abs(float64(dest[1])/float64(dest[0])-3) > 0.2 {
		t.Fatalf("the learned limit's grants %v over five periods: want 50 in all, 1:3", dest)
	}
	// a report that does not name it (another owner's older reading) keeps
	// its count: the window's rest is still within 100
	grantAt(t, g, c, 5*period, 0, redisq.Demand{Normal: 1}, redisq.Used{Jobs: math.MaxInt32})
	for p := 5; p < 10; p++ {
		for s := range d {
			if p == 5 && s == 0 {
				continue
			}
			gr := grantAt(t, g, c, time.Duration(p)*period, s, d[s], redisq.Used{Jobs: math.MaxInt32,
				Types: map[string]int64{"api.example.com": math.MaxInt32}})
			dest[s] += gr.Types["api.example.com"]
		}
	}
	if dest[0]+dest[1] > 100 {
		t.Fatalf("the learned limit's grants in one window: %v, over 100", dest)
	}
	// a stopped destination (limit 0) gets nothing
	d[0].Limits, d[1].Limits = map[string]int{"api.example.com": 0}, map[string]int{"api.example.com": 0}
	for s := range d {
		if gr := grantAt(t, g, c, 10*period, s, d[s], redisq.Used{Jobs: math.MaxInt32}); gr.Types["api.example.com"] != 0 {
			t.Fatalf("a stopped destination granted %d", gr.Types["api.example.com"])
		}
	}
	if _, err := g.Report(context.Background(), 0, redisq.Demand{Normal: 1, Limits: map[string]int{"a=b": 1}}, redisq.Used{}); !errors.Is(err, redisq.ErrBadReport) {
		t.Fatalf("a limit with a bad name: %v, want ErrBadReport", err)
	}
}
