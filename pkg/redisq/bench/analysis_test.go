package bench

import (
	"math"
	"slices"
	"testing"
)

func near(a, b float64) bool { return math.Abs(a-b) < 1e-9 }

// TestWaterFill checks the max-min fair ideal completion times.
func TestWaterFill(t *testing.T) {
	for _, c := range []struct {
		name  string
		sizes []int
		rate  float64
		want  []float64
	}{
		{"one group", []int{15000}, 1000, []float64{15}},
		// 200/s each until the 100 finish at 0.5s, then 250/s, 333/s, 500/s, 1000/s.
		{"reference S2", []int{5000, 2000, 1000, 500, 100}, 1000, []float64{8.6, 5.6, 3.6, 2.1, 0.5}},
		{"equal groups finish together", []int{300, 300, 300}, 100, []float64{9, 9, 9}},
		{"empty group", []int{0, 100}, 100, []float64{0, 1}},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := waterFill(c.sizes, c.rate)
			if !slices.EqualFunc(got, c.want, near) {
				t.Fatalf("waterFill(%v, %v) = %v, want %v", c.sizes, c.rate, got, c.want)
			}
		})
	}
}

// TestSummarize checks the figures read off an admission timeline.
func TestSummarize(t *testing.T) {
	const start = 10_000 // a window boundary, ms
	t.Run("even pace", func(t *testing.T) {
		// 100 jobs per 100ms for 2s: 1000 per window, never more in any span.
		var ev []event
		for ms := int64(0); ms < 2000; ms += 100 {
			ev = append(ev, event{atMs: start + ms, gid: groupID(0), n: 100})
		}
		s := summarize(start, 1000, 1000, ev, []int{2000}, false, 0)
		if !near(s.makespanS, 1.9) || !near(s.idealS, 2) || !near(s.maxWindowRatio, 1) || !near(s.maxSlidingRatio, 1) ||
			!near(s.utilization, 1) || !near(s.utilizationWhole, 1) || s.worstFairRatio != 0 || !slices.Equal(s.perWindow, []int{1000, 1000}) {
			t.Fatalf("%+v", s)
		}
	})
	t.Run("burst across a window edge", func(t *testing.T) {
		// No aligned window holds more than 1000, but the span from 100ms
		// to 1099ms holds 1900; the run needs three windows for 2000 jobs.
		ev := []event{
			{atMs: start + 100, gid: groupID(0), n: 100},
			{atMs: start + 999, gid: groupID(0), n: 900},
			{atMs: start + 1000, gid: groupID(1), n: 900},
			{atMs: start + 2500, gid: groupID(1), n: 100},
		}
		s := summarize(start, 1000, 1000, ev, []int{1000, 1000}, false, 0)
		if !near(s.maxWindowRatio, 1) || !near(s.maxSlidingRatio, 1.9) || !near(s.makespanS, 2.5) ||
			!near(s.utilizationWhole, 2000.0/3000) || !near(s.utilization, 2000.0/2100) {
			t.Fatalf("%+v", s)
		}
		if !slices.Equal(s.perWindow, []int{1000, 900, 100}) || !near(s.busiestSpanS, 0.1) {
			t.Fatalf("per window %v", s.perWindow)
		}
		// Equal groups: each ideally done at 2s; group 1 took 2.5s.
		if !near(s.groupDoneS[groupID(0)], 0.999) || !near(s.worstFairRatio, 1.25) {
			t.Fatalf("fairness %+v", s)
		}
	})
	t.Run("capped", func(t *testing.T) {
		ev := []event{{atMs: start, gid: groupID(0), n: 500}, {atMs: start, gid: groupID(1), n: 10}}
		s := summarize(start, 1000, 1000, ev, []int{500, 1000}, true, start+4000)
		// Four windows with backlog: 1000 could be used in the first, 990 (the
		// jobs left) in each other. Group 1 never finished: it counts as done
		// at the cap (4s, ideal 1.5s).
		if !near(s.makespanS, 4) || !near(s.utilizationWhole, 510.0/4000) || !near(s.utilization, 510.0/3970) || !near(s.worstFairRatio, 4/1.5) {
			t.Fatalf("%+v", s)
		}
	})
}

// TestTenantWindows checks the per-tenant window counts and Jain's index of
// the tenant scenario.
func TestTenantWindows(t *testing.T) {
	const start = 10_000
	ev := []event{
		{atMs: start - 5, tenant: tenantA, n: 7}, // before the start: not counted
		{atMs: start, tenant: tenantA, n: 10},
		{atMs: start + 1999, tenant: tenantB, n: 10},
		{atMs: start + 2000, tenant: tenantA, n: 20},
		{atMs: start + 3000, tenant: tenantB, n: 5},
		{atMs: start + 4000, tenant: tenantA, n: 9}, // in a window cut short by the end
	}
	got := tenantWindows(ev, start, 2000, start+5000)
	if len(got) != 2 || got[0] != [2]int{10, 10} || got[1] != [2]int{20, 5} {
		t.Fatalf("windows %v", got)
	}
	if !near(jain(10, 10), 1) || !near(jain(1, 0), 0.5) || !near(jain(20, 5), 625.0/850) {
		t.Fatalf("jain %v %v %v", jain(10, 10), jain(1, 0), jain(20, 5))
	}
}

// TestParseCommandStats checks the reading of INFO commandstats and the
// sums the figures use.
func TestParseCommandStats(t *testing.T) {
	info := "# Commandstats\r\n" +
		"cmdstat_evalsha:calls=10,usec=99,usec_per_call=9.90,rejected_calls=0,failed_calls=0\r\n" +
		"cmdstat_script|load:calls=3,usec=1,usec_per_call=0.33,rejected_calls=0,failed_calls=0\r\n" +
		"cmdstat_lpop:calls=70,usec=20,usec_per_call=0.29,rejected_calls=0,failed_calls=0\r\n"
	st, err := parseCommandStats(info)
	if err != nil {
		t.Fatal(err)
	}
	if st["evalsha"] != 10 || st["script|load"] != 3 || st["lpop"] != 70 || len(st) != 3 {
		t.Fatalf("%v", st)
	}
	before := map[string]int64{"evalsha": 4, "lpop": 30}
	if n := callsBetween(before, st, scriptSkips...); n != 40 {
		t.Fatalf("calls without scripts %d, want 40", n)
	}
	if n := callsBetween(before, st, "info"); n != 49 {
		t.Fatalf("all calls %d, want 49", n)
	}
}

// TestPayloadShape checks the job shapes the benchmarks use.
func TestPayloadShape(t *testing.T) {
	for _, i := range []int{0, 123, 999_999} {
		if p := payload(i); len(p) != payloadLen || p[0] != '{' || p[len(p)-1] != '}' {
			t.Fatalf("payload(%d) = %q (%d bytes)", i, p, len(p))
		}
	}
	if jobID(123) != "job-000123" {
		t.Fatalf("jobID(123) = %s", jobID(123))
	}
}
