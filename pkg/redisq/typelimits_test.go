package redisq_test

import (
	"context"
	"fmt"
	"math"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/bulkaction/bulkaction/internal/testenv"
	"github.com/bulkaction/bulkaction/pkg/redisq"
)

// Per-type rate limits (docs/ARCHITECTURE.md §5, Config.TypeLimits).

// byType counts jobs per type.
func byType(jobs []redisq.LeasedJob) map[string]int {
	out := map[string]int{}
	for _, j := range jobs {
		out[j.Type]++
	}
	return out
}

// stamp is n jobs of one type handed on at ms.
type stamp struct {
	ms  int64
	typ string
	n   int
}

// maxInSpan is the most jobs of typ ("" = all) in any span [t, t+span)
// of stamps.
func maxInSpan(stamps []stamp, typ string, span int64) int {
	var s []stamp
	for _, x := range stamps {
		if typ == "" || x.typ == typ {
			s = append(s, x)
		}
	}
	sort.Slice(s, func(i, j int) bool { return s[i].ms < s[j].ms })
	best, in, j := 0, 0, 0
	for i := range s {
		for j < len(s) && s[j].ms < s[i].ms+span {
			in += s[j].n
			j++
		}
		best = max(best, in)
		in -= s[i].n
	}
	return best
}

// TestTypeLimitNeverExceeded: eight admitters on their own connections,
// with the real clock, admit a backlog of a limited type (two tenants) and
// of an unlimited one. No aligned window admits more than the type's limit
// or the global limit; in paced mode no sliding window of the window's
// length admits more than limit × (1 + burst/window), rounded up, of all
// jobs, nor more than limit × (1 + (burst + credit)/window) of the limited
// type, whose pacer carries the credit of the gaps between calls that held
// it (at most window/TypeCreditDivisor); and the unlimited type keeps
// getting the rest of the global limit.
func TestTypeLimitNeverExceeded(t *testing.T) {
	for _, mode := range []string{redisq.ModePaced, redisq.ModeSeed} {
		t.Run(mode, func(t *testing.T) {
			const limit, smsLimit = 100, 20
			window := 100 * time.Millisecond
			q, _ := setup(t, redisq.Config{Mode: mode, GlobalLimit: limit, Window: window, MaxBackoff: time.Hour,
				TypeLimits: map[string]int{"sms": smsLimit}}, false)
			enqueueJobs(t, q, "a/sms", "sms", 2000, 0)
			enqueueJobs(t, q, "b/sms", "sms", 2000, 0)
			enqueueJobs(t, q, "c/mail", "email", 5000, 0)
			cfg := q.Config()
			var mu sync.Mutex
			var stamps []stamp
			var wg sync.WaitGroup
			deadline := time.Now().Add(1500 * time.Millisecond)
			for a := 0; a < 8; a++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					env := testenv.Redis(t)
					c := redis.NewClient(&redis.Options{Addr: env.Client.Options().Addr, PoolSize: 1})
					defer c.Close()
					aq, err := redisq.New(context.Background(), c, cfg)
					if err != nil {
						t.Error(err)
						return
					}
					for time.Now().Before(deadline) {
						r, err := aq.Admit(context.Background(), 7)
						if err != nil {
							t.Error(err)
							return
						}
						mu.Lock()
						for typ, n := range byType(r.Jobs) {
							stamps = append(stamps, stamp{r.NowMs, typ, n})
						}
						mu.Unlock()
						if len(r.Jobs) == 0 {
							time.Sleep(2 * time.Millisecond)
						}
					}
				}()
			}
			wg.Wait()
			wms := window.Milliseconds()
			perWindow := map[int64]map[string]int{}
			total := map[string]int{}
			for _, s := range stamps {
				w := s.ms / wms
				if perWindow[w] == nil {
					perWindow[w] = map[string]int{}
				}
				perWindow[w][s.typ] += s.n
				total[s.typ] += s.n
			}
			for w, c := range perWindow {
				if c["sms"] > smsLimit {
					t.Errorf("window %d admitted %d sms > their limit %d", w, c["sms"], smsLimit)
				}
				if c["sms"]+c["email"] > limit {
					t.Errorf("window %d admitted %d jobs > the global limit %d", w, c["sms"]+c["email"], limit)
				}
			}
			if mode == redisq.ModePaced {
				burst := float64(cfg.Burst) / float64(window)
				credit := 1.0 / redisq.TypeCreditDivisor
				if got, most := maxInSpan(stamps, "sms", wms), int(math.Ceil(smsLimit*(1+burst+credit))); got > most {
					t.Errorf("a sliding window of %s admitted %d sms, most %d", window, got, most)
				}
				if got, most := maxInSpan(stamps, "", wms), int(math.Ceil(limit*(1+burst))); got > most {
					t.Errorf("a sliding window of %s admitted %d jobs, most %d", window, got, most)
				}
			}
			// ~15 windows: the limited type keeps its pace, and (paced) the
			// unlimited one is not slowed down to it. Seed mode parks the
			// email beyond its tenant's share, and nothing releases them
			// here, so it is not measured (TestTypeLimitHoldsOnlyItsType).
			t.Logf("%s: admitted %v in %d windows", mode, total, len(perWindow))
			if total["sms"] < smsLimit*5 || total["email"] == 0 || (mode == redisq.ModePaced && total["email"] < 2*total["sms"]) {
				t.Fatalf("admitted %v in 1.5s: sms at %d and the global limit at %d per %s", total, smsLimit, limit, window)
			}
		})
	}
}

// TestTypeLimitHoldsOnlyItsType: the oldest group's type is limited and
// has a large backlog; the limited type gets its limit per window and the
// other type the rest of the window, in both gated modes. Jobs over the
// limit are held (never parked), reported in RateHeld, and their group is
// served first again in the next window. When only they wait, WakeMs is
// the time to the next window.
func TestTypeLimitHoldsOnlyItsType(t *testing.T) {
	for _, mode := range []string{redisq.ModePaced, redisq.ModeSeed} {
		t.Run(mode, func(t *testing.T) {
			ctx := context.Background()
			q, b := setup(t, redisq.Config{Mode: mode, GlobalLimit: 200, Window: time.Second, Burst: time.Second,
				TypeLimits: map[string]int{"sms": 5}}, true)
			enqueueJobs(t, q, "sms", "sms", 10_000, 0)
			enqueueJobs(t, q, "mail", "email", 95, 0)
			r := admit(t, q, 1000)
			if got := byType(r.Jobs); got["sms"] != 5 || got["email"] != 95 || r.Parked != 0 {
				t.Fatalf("admitted %v, parked %d; want sms 5, email 95, none parked", got, r.Parked)
			}
			if r.RateHeld["sms"] < 1 || len(r.Held) != 0 {
				t.Fatalf("rate held %v, held %v", r.RateHeld, r.Held)
			}
			// The clock stands at a window's start: the sms wait a whole window.
			if r.WakeMs != 1000 {
				t.Fatalf("only rate-held jobs wait: wake %d, want 1000", r.WakeMs)
			}
			if info, _, _ := q.Group(ctx, G("sms")); info.Pending != 10_000-5 {
				t.Fatalf("held group pending %d", info.Pending)
			}
			if r := admit(t, q, 1000); len(r.Jobs) != 0 || r.RateHeld["sms"] != 1 || r.WakeMs != 1000 {
				t.Fatalf("same window: %d admitted, rate held %v, wake %d", len(r.Jobs), r.RateHeld, r.WakeMs)
			}
			// A newcomer of another type is not held behind them.
			enqueueJobs(t, q, "late", "push", 3, 0)
			if r := admit(t, q, 1000); groupsOf(r.Jobs) != "late,late,late" {
				t.Fatalf("newcomer: %s", groupsOf(r.Jobs))
			}
			b.clock.advance(time.Second)
			if r := admit(t, q, 1000); groupsOf(r.Jobs) != "sms,sms,sms,sms,sms" {
				t.Fatalf("next window: %s", groupsOf(r.Jobs))
			}
			// The counter lives under its own key.
			w := b.clock.t.UnixMilli() / 1000
			if n, _ := b.rdb.Get(ctx, q.Keys().RateLimitType("sms", w)).Int(); n != 5 {
				t.Fatalf("type counter %d", n)
			}
		})
	}
}

// TestTypeLimitIsPaced: in paced mode a limited type is also spread over
// the window by its own pacer: coming back when told, an admitter gets one
// sms per 100ms at 10 per second, never more than limit × (1 +
// burst/window) in any sliding window, while an unlimited type goes on at
// the global pace.
func TestTypeLimitIsPaced(t *testing.T) {
	q, b := setup(t, redisq.Config{Mode: redisq.ModePaced, GlobalLimit: 1000, Window: time.Second,
		Burst: 40 * time.Millisecond, TypeLimits: map[string]int{"sms": 10}}, true)
	enqueueJobs(t, q, "sms", "sms", 1000, 0)
	var stamps []stamp
	var elapsed time.Duration
	calls := 0
	for elapsed < 10*time.Second {
		r := admit(t, q, 1000)
		calls++
		for typ, n := range byType(r.Jobs) {
			stamps = append(stamps, stamp{r.NowMs, typ, n})
		}
		if r.WakeMs <= 0 {
			t.Fatalf("call %d: wake %d with only a paced type waiting", calls, r.WakeMs)
		}
		d := time.Duration(r.WakeMs) * time.Millisecond
		b.clock.advance(d)
		elapsed += d
	}
	total := 0
	for _, s := range stamps {
		total += s.n
	}
	want := int(elapsed / (100 * time.Millisecond))
	if total < want-1 || total > want+2 {
		t.Fatalf("%d sms in %v (%d calls), want %d (one per 100ms)", total, elapsed, calls, want)
	}
	if got := maxInSpan(stamps, "sms", 1000); got > 11 {
		t.Fatalf("a sliding second admitted %d sms, most ceil(10 × 1.04) = 11", got)
	}
	if got := maxInSpan(stamps, "sms", 200); got > 3 {
		t.Fatalf("200ms admitted %d sms: not paced", got)
	}
}

// TestTypeLimitKeepsItsRateWhenRoundsAreApart: in paced mode, admission
// rounds 100 ms apart (a fetcher busy handing jobs on, or waking late)
// still admit a waiting limited type at its limit, 200 per second, not
// only its pacer's burst tolerance (40 ms, 9 jobs) per round: the pacer
// carries the credit of the gap while the type's jobs wait, within the
// aligned window. No aligned window goes over the limit, and no sliding
// second over limit × (1 + gap/window).
func TestTypeLimitKeepsItsRateWhenRoundsAreApart(t *testing.T) {
	const smsLimit = 200
	q, b := setup(t, redisq.Config{Mode: redisq.ModePaced, GlobalLimit: 10_000, Window: time.Second,
		TypeLimits: map[string]int{"sms": smsLimit}}, true)
	enqueueJobs(t, q, "a/sms", "sms", 1500, 0)
	enqueueJobs(t, q, "b/sms", "sms", 1500, 0)
	var stamps []stamp
	perWindow := map[int64]int{}
	const gap = 100 * time.Millisecond
	for elapsed := time.Duration(0); elapsed < 5*time.Second; elapsed += gap {
		r := admit(t, q, 1000)
		n := len(r.Jobs)
		stamps = append(stamps, stamp{r.NowMs, "sms", n})
		perWindow[r.NowMs/1000] += n
		b.clock.advance(gap)
	}
	first := b.clock.t.UnixMilli()/1000 - 5
	for w, n := range perWindow {
		if n > smsLimit {
			t.Errorf("window %d admitted %d sms > their limit %d", w, n, smsLimit)
		}
		// the first window's first round finds the type idle: no credit
		if w > first && n < smsLimit*95/100 {
			t.Errorf("window %d admitted %d sms, want about their limit %d (rounds %s apart)", w, n, smsLimit, gap)
		}
	}
	if got, most := maxInSpan(stamps, "sms", 1000), int(smsLimit*(1000+gap.Milliseconds())/1000)+1; got > most {
		t.Errorf("a sliding second admitted %d sms, most %d", got, most)
	}
	t.Logf("sms per window: %v", perWindow)
}

// TestTypeLimitIdleTypeGetsNoCredit: a limited type that was not waiting
// (its first jobs arrive late in the window) gets only its pacer's burst
// tolerance at once, not the window's unused rate; once it waits, the next
// round gets the gap's credit; held while over its limit, it gets none.
func TestTypeLimitIdleTypeGetsNoCredit(t *testing.T) {
	q, b := setup(t, redisq.Config{Mode: redisq.ModePaced, GlobalLimit: 10_000, Window: time.Second,
		TypeLimits: map[string]int{"sms": 200}}, true)
	b.clock.advance(800 * time.Millisecond)
	enqueueJobs(t, q, "sms", "sms", 1000, 0)
	// 40 ms of burst tolerance at 5 ms a job: 9 jobs
	if r := admit(t, q, 1000); len(r.Jobs) != 9 || r.RateHeld["sms"] != 1 {
		t.Fatalf("late first round: %d admitted, rate held %v; want 9, held", len(r.Jobs), r.RateHeld)
	}
	// it waited 100 ms: its pacer stood at 845 ms and may go on to 940 ms
	// (now + burst), 20 jobs; without the credit 9 again
	b.clock.advance(100 * time.Millisecond)
	if r := admit(t, q, 1000); len(r.Jobs) != 20 {
		t.Fatalf("after waiting 100 ms: %d admitted, want 20", len(r.Jobs))
	}
	// Its limit lowered below what the window took (a learned rate's
	// decrease): held while over it, and no credit for that time after.
	q2, err := redisq.New(context.Background(), b.rdb, redisq.Config{Prefix: b.prefix, Clock: b.clock.now,
		Mode: redisq.ModePaced, GlobalLimit: 10_000, Window: time.Second, TypeLimits: map[string]int{"sms": 10}})
	if err != nil {
		t.Fatal(err)
	}
	if r := admit(t, q2, 1000); len(r.Jobs) != 0 || r.RateHeld["sms"] != 1 {
		t.Fatalf("over the lowered limit: %d admitted, rate held %v", len(r.Jobs), r.RateHeld)
	}
	// next window, 300 ms in: 100 ms a job, 40 ms of burst: 1 job (2 with
	// the credit of a tenth of the window)
	b.clock.advance(400 * time.Millisecond)
	if r := admit(t, q2, 1000); len(r.Jobs) != 1 {
		t.Fatalf("after being over its limit: %d admitted, want 1", len(r.Jobs))
	}
}

// TestTypeLimitCreditSharedByReleases: admission and releases pace a
// limited type with one pacer: a type admission held 100 ms ago gets the
// gap's credit on release too, and its due jobs beyond it go back into
// their group.
func TestTypeLimitCreditSharedByReleases(t *testing.T) {
	ctx := context.Background()
	// q0 parks every job but one: a seed-mode queue with a limit of 1.
	q0, b := setup(t, redisq.Config{Mode: redisq.ModeSeed, GlobalLimit: 1, Window: 10 * time.Second,
		BaseBackoff: 100 * time.Millisecond, MaxBackoff: 100 * time.Millisecond, DisableCongestion: true}, true)
	enqueueJobs(t, q0, "parked", "sms", 100, 0)
	if r := admit(t, q0, 100); len(r.Jobs) != 1 || r.Parked != 99 {
		t.Fatalf("parking: %d admitted, %d parked", len(r.Jobs), r.Parked)
	}
	q, err := redisq.New(ctx, b.rdb, redisq.Config{Prefix: b.prefix, Clock: b.clock.now, Mode: redisq.ModePaced,
		GlobalLimit: 10_000, Window: time.Second, TypeLimits: map[string]int{"sms": 200}})
	if err != nil {
		t.Fatal(err)
	}
	enqueueJobs(t, q, "queued", "sms", 100, 0)
	if r := admit(t, q, 1000); len(r.Jobs) != 9 || r.RateHeld["sms"] != 1 {
		t.Fatalf("admission: %d admitted, rate held %v; want 9, held", len(r.Jobs), r.RateHeld)
	}
	b.clock.advance(100 * time.Millisecond) // the parked jobs are due
	rel, err := q.Release(ctx, 1000)
	if err != nil {
		t.Fatal(err)
	}
	// the pacer stood at 45 ms: it may go on to 140 ms, 20 jobs (9 without the credit)
	if len(rel.Jobs) != 20 || rel.RateHeld["sms"] != 99-20 {
		t.Fatalf("release after 100 ms: %d released, rate held %v; want 20, 79 held", len(rel.Jobs), rel.RateHeld)
	}
}

// TestTypeLimitSharedByTenants: two tenants whose jobs are all of one
// limited type share its limit equally, whatever the number of groups each
// splits its work into, in both gated modes.
func TestTypeLimitSharedByTenants(t *testing.T) {
	for _, mode := range []string{redisq.ModePaced, redisq.ModeSeed} {
		t.Run(mode, func(t *testing.T) {
			q, b := setup(t, redisq.Config{Mode: mode, GlobalLimit: 100, Window: time.Second, Burst: time.Second,
				TypeLimits: map[string]int{"sms": 10}}, true)
			for _, g := range []string{"a/A1", "a/A2", "a/A3"} {
				enqueueJobs(t, q, g, "sms", 100, 0)
			}
			enqueueJobs(t, q, "b/B", "sms", 300, 0)
			enqueueJobs(t, q, "c/C", "email", 1000, 0)
			// c gets the rest of the global limit (paced), or its share of
			// it, floor(100 / 3 tenants) (seed)
			email := 90
			if mode == redisq.ModeSeed {
				email = 33
			}
			var perWindow []string
			for w := 0; w < 10; w++ {
				per := map[string]int{}
				for {
					r := admit(t, q, 7)
					if len(r.Jobs) == 0 {
						break
					}
					for _, j := range r.Jobs {
						per[j.Group.Tenant+"/"+j.Type]++
					}
				}
				perWindow = append(perWindow, fmt.Sprint(per))
				if per["a/sms"] != 5 || per["b/sms"] != 5 || per["c/email"] != email {
					t.Fatalf("window %d: %v, want a/sms 5, b/sms 5, c/email %d", w, per, email)
				}
				b.clock.advance(time.Second)
			}
			t.Log(strings.Join(perWindow, " "))
		})
	}
}

// TestTypeLimitSharedOverTime: the same with the default burst, an
// admitter calling Admit(256) when told (WakeMs), and sms 100 per second
// for ten seconds. Tenants A and B, passed by while sms has no rate, come
// back in turns: a tie between two tenants that were passed by once went
// to the same one (by name), 53:47.
func TestTypeLimitSharedOverTime(t *testing.T) {
	for _, mode := range []string{redisq.ModePaced, redisq.ModeSeed} {
		t.Run(mode, func(t *testing.T) {
			q, b := setup(t, redisq.Config{Mode: mode, GlobalLimit: 1000, Window: time.Second,
				TypeLimits: map[string]int{"sms": 100}}, true)
			enqueueJobs(t, q, "a/sms", "sms", 2000, 0)
			for k := 0; k < 5; k++ {
				enqueueJobs(t, q, fmt.Sprintf("b/sms%d", k), "sms", 400, 0)
			}
			enqueueJobs(t, q, "c/email", "email", 20_000, 0)
			per := map[string]int{}
			// The window counters expire in Redis's own time (two windows),
			// so the test clock never runs slower than the real one: a
			// window that took longer than two to run would lose its count.
			last := time.Now()
			for elapsed := time.Duration(0); elapsed < 10*time.Second; {
				r := admit(t, q, 256)
				for _, j := range r.Jobs {
					per[j.Group.Tenant+"/"+j.Type]++
				}
				now := time.Now()
				d := max(time.Duration(max(r.WakeMs, 5))*time.Millisecond, now.Sub(last))
				last = now
				b.clock.advance(d)
				elapsed += d
			}
			t.Log(per)
			if a, b := per["a/sms"], per["b/sms"]; a+b < 990 || a+b > 1000 || a-b > 2 || b-a > 2 {
				t.Fatalf("sms per tenant %v: want 1,000 in 10s shared equally", per)
			}
		})
	}
}

// TestReleasesPassTheTypeLimit: due jobs of a limited type are released up
// to the type's limit; the rest go back into their group's queue (not
// holding back the due jobs of other types), where admission takes them,
// within the limit, once the type has rate again.
func TestReleasesPassTheTypeLimit(t *testing.T) {
	for _, mode := range []string{redisq.ModePaced, redisq.ModeSeed} {
		t.Run(mode, func(t *testing.T) {
			ctx := context.Background()
			// q0 parks every job but one: a seed-mode queue with a limit of 1.
			q0, b := setup(t, redisq.Config{Mode: redisq.ModeSeed, GlobalLimit: 1, Window: 10 * time.Second,
				BaseBackoff: time.Millisecond, MaxBackoff: time.Millisecond}, true)
			enqueueJobs(t, q0, "sms", "sms", 10, 0)
			enqueueJobs(t, q0, "mail", "email", 10, 0)
			if r := admit(t, q0, 20); len(r.Jobs) != 1 || r.Parked != 19 {
				t.Fatalf("parking: %d admitted, %d parked", len(r.Jobs), r.Parked)
			}
			q, err := redisq.New(ctx, b.rdb, redisq.Config{Prefix: b.prefix, Clock: b.clock.now, Mode: mode, GlobalLimit: 1000,
				Window: 10 * time.Second, Burst: 10 * time.Second, TypeLimits: map[string]int{"sms": 3}})
			if err != nil {
				t.Fatal(err)
			}
			b.clock.advance(10 * time.Second) // a new window; every parked job is due
			rel, err := q.Release(ctx, 100)
			if err != nil {
				t.Fatal(err)
			}
			got := byType(rel.Jobs)
			if got["sms"] != 3 || got["email"] != 10 || rel.RateHeld["sms"] != 6 || rel.Requeued != 0 {
				t.Fatalf("released %v, rate held %v, requeued %d; want sms 3, email 10, 6 sms held", got, rel.RateHeld, rel.Requeued)
			}
			if n, _ := b.rdb.ZCard(ctx, q.Keys().NonReadyQueue()).Result(); n != 0 {
				t.Fatalf("non-ready queue holds %d", n)
			}
			if info, _, _ := q.Group(ctx, G("sms")); info.Pending != 6 {
				t.Fatalf("held sms back in their group: %d, want 6", info.Pending)
			}
			// Admission holds them while the window's sms rate is used up...
			if r := admit(t, q, 100); len(r.Jobs) != 0 || r.RateHeld["sms"] != 1 {
				t.Fatalf("same window: %d admitted, rate held %v", len(r.Jobs), r.RateHeld)
			}
			// ... and admits them within the limit in the next one.
			b.clock.advance(10 * time.Second)
			if r := admit(t, q, 100); groupsOf(r.Jobs) != "sms,sms,sms" {
				t.Fatalf("next window: %s", groupsOf(r.Jobs))
			}
		})
	}
}

// TestTypeLimitsConfig: type limits name valid job types and are at least
// 1.
func TestTypeLimitsConfig(t *testing.T) {
	env := testenv.Redis(t)
	for _, tl := range []map[string]int{{"sms": 0}, {"bad type": 5}, {"": 1}, {"a:b": 1}} {
		if _, err := redisq.New(context.Background(), env.Client, redisq.Config{Prefix: env.Prefix, TypeLimits: tl}); err == nil {
			t.Errorf("type limits %v accepted", tl)
		}
	}
}
