package chaos

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/bulkaction/bulkaction/internal/tenantset"
	"github.com/bulkaction/bulkaction/pkg/contracts"
	"github.com/bulkaction/bulkaction/pkg/redisq"
)

// ---------------------------------------------------------------- T17

// T17's groups, by their index in each tenant (workload.plans): what their
// schedule is and when they may first be admitted.
const (
	t17Plain     = iota // no schedule of its own
	t17NotBefore        // notBefore a few seconds ahead
	t17Later            // notBefore moved later after the snapshot
	t17Earlier          // notBefore moved earlier after the snapshot
	t17Window           // a sending window that opens at the next minute
	t17AfterSnap        // created after the snapshot, with a notBefore
	t17Gap              // long only: a window that closes mid-run and opens a minute later
	t17Roles
)

// schedPlan is what T17 expects of one group.
type schedPlan struct {
	p        *groupPlan
	settings contracts.GroupSettings
	// earliest is the first time it may be admitted (its final notBefore,
	// or its window's opening, whichever is later); zero: at once.
	earliest time.Time
	// nb is its notBefore as Redis must keep it in the end (zero: none).
	nb time.Time
	// move is the notBefore a schedule message moves it to after the
	// snapshot (zero: none).
	move time.Time
	// closed: a span within its run during which its windows are closed
	// (zero: none).
	closedFrom, closedTo time.Time
	windowed             bool // has sending windows (its own or its tenant's)
	afterSnap            bool // submitted once the snapshot is taken
}

// admitSample is what the sampler saw of one group at one time (Redis's
// clock): its queued jobs and its startedAt.
type admitSample struct {
	at      int64 // ms, Redis TIME
	epoch   int64 // the rollback epoch it was taken in
	queued  int64
	started int64 // ms; 0 = not started
}

// t17 runs groups with start times and sending windows through kills of
// the services and a Redis rollback. Several tenants each have a plain
// group, a group with notBefore a few seconds ahead, one whose notBefore a
// schedule message moves later and one it moves earlier (both after the
// snapshot), a group with a sending window that opens at the next minute
// boundary, a group created after the snapshot with a notBefore and, in
// the long profile, a group whose window closes mid-run and opens again a
// minute later. The last tenant has default sending windows that open at
// the same minute boundary, which its groups without windows of their own
// take. Redis is snapshotted once every group exists with its schedule,
// then the moves are published and the last groups created, both
// fetchers are killed -9 when the first notBefore comes, Redis is rolled
// back to the snapshot between the old and the new notBefore of the moved
// groups, and services are killed -9 at random until every group ended.
//
// A sampler reads every group's queued jobs and startedAt with Redis's
// TIME every 50 ms (one MULTI): a group whose queue shrank between two
// samples before its earliest start, or between two samples within its
// closed span, had a job admitted while it should have waited. Then: no
// startedAt seen before its earliest start; no job claimed before it; the
// moved notBefores kept; exact counts; T9.
func t17(p profile) run {
	// lead puts the schedules later in the long profile, whose larger
	// groups take longer to be stored before the snapshot.
	tenants, roles, lead := 2, t17Gap, time.Duration(0)
	if p.name == "long" {
		tenants, roles, lead = 3, t17Roles, 10*time.Second
	}
	w := workload{Tenants: tenants, Groups: roles, Jobs: p.t17Jobs / (tenants * roles), Job: mixed}
	var (
		sps      []*schedPlan
		start    time.Time
		boundary time.Time // the next minute boundary the windows open (or close) at
		epoch    atomic.Int64
		snapped  = make(chan time.Time, 1)
		ready    = make(chan struct{})
		readyOne sync.Once
		stopSamp func()
		sampDone sync.WaitGroup
		sampMu   sync.Mutex
		samples  = map[contracts.GroupRef][]admitSample{}
	)
	lastTenant := fmt.Sprintf("tenant-%d", tenants-1)
	window := func(zone string, from, to time.Time) contracts.Window {
		loc, err := contracts.LoadZone(zone)
		if err != nil {
			panic(err)
		}
		return contracts.Window{Zone: zone, Days: contracts.Weekdays[:], From: from.In(loc).Format("15:04"), To: to.In(loc).Format("15:04")}
	}
	sample := func(ctx context.Context, e *env) {
		defer sampDone.Done()
		for ctx.Err() == nil {
			ep := epoch.Load()
			pl := e.rdb.TxPipeline()
			tm := pl.Time(ctx)
			lens := make([]*redis.IntCmd, len(sps))
			starts := make([]*redis.StringCmd, len(sps))
			for i, sp := range sps {
				lens[i] = pl.LLen(ctx, e.keys.GroupJobs(sp.p.ref))
				starts[i] = pl.HGet(ctx, e.keys.GroupMeta(sp.p.ref), "startedAt")
			}
			_, err := pl.Exec(ctx)
			if (err == nil || errors.Is(err, redis.Nil)) && tm.Err() == nil && ep%2 == 0 && epoch.Load() == ep {
				at := tm.Val().UnixMilli()
				sampMu.Lock()
				for i, sp := range sps {
					st, _ := strconv.ParseInt(starts[i].Val(), 10, 64)
					samples[sp.p.ref] = append(samples[sp.p.ref], admitSample{at: at, epoch: ep, queued: lens[i].Val(), started: st})
				}
				sampMu.Unlock()
			}
			select {
			case <-ctx.Done():
			case <-time.After(50 * time.Millisecond):
			}
		}
	}
	opts := envOptions{}
	if p.name == "short" {
		// A job whose run the rollback lost is handed on again once
		// READY's duplicate window has passed since its first publish
		// (T10): 5 s rather than 2 min keeps the short row short.
		opts.Settings = map[string]string{"DUPLICATE_WINDOW": "5s"}
	}
	return run{
		id:           "T17",
		opts:         opts,
		w:            w,
		timeout:      p.settle + time.Minute,
		maxFaultTime: 6 * time.Minute,
		submit: func(ctx context.Context, e *env, plans []*groupPlan) error {
			defer readyOne.Do(func() { close(ready) })
			start = time.Now()
			boundary = start.Truncate(time.Minute).Add(time.Minute)
			if boundary.Sub(start) < lead+10*time.Second {
				boundary = boundary.Add(time.Minute)
			}
			opens := window("America/New_York", boundary, boundary.Add(time.Hour))
			q, err := redisq.New(ctx, e.rdb, redisq.Config{Prefix: e.prefix})
			if err != nil {
				return err
			}
			ts, err := tenantset.Open(ctx, e.js, e.names, q)
			if err != nil {
				return err
			}
			if err := ts.SetWindows(ctx, lastTenant, []contracts.Window{window("Europe/Berlin", boundary, boundary.Add(time.Hour))}); err != nil {
				return err
			}
			for i, gp := range plans {
				sp := &schedPlan{p: gp, windowed: gp.ref.Tenant == lastTenant}
				if sp.windowed {
					sp.earliest = boundary
				}
				nb := func(d time.Duration) {
					sp.nb = start.Add(d)
					sp.settings.NotBefore = sp.nb.Format(time.RFC3339Nano)
					if sp.nb.After(sp.earliest) {
						sp.earliest = sp.nb
					}
				}
				switch i % roles {
				case t17Plain:
					// none of its own (the last tenant's default windows)
				case t17NotBefore:
					nb(lead + 5*time.Second)
				case t17Later:
					nb(lead + 6*time.Second)
					sp.move = start.Add(lead + 16*time.Second)
				case t17Earlier:
					nb(lead + 40*time.Second)
					sp.move = start.Add(lead + 12*time.Second)
				case t17Window:
					sp.settings.Windows = []contracts.Window{opens}
					sp.windowed, sp.earliest = true, boundary
				case t17AfterSnap:
					// its notBefore is set when it is submitted, after the snapshot
					sp.afterSnap = true
				case t17Gap:
					// open now until the boundary, closed for a minute, open again
					sp.settings.Windows = []contracts.Window{
						window("Asia/Kolkata", boundary.Add(-10*time.Minute), boundary),
						window("Asia/Kolkata", boundary.Add(time.Minute), boundary.Add(time.Hour)),
					}
					sp.windowed, sp.earliest = true, time.Time{}
					sp.closedFrom, sp.closedTo = boundary, boundary.Add(time.Minute)
					// slow enough to be running when its window closes and
					// for 20 s after: 2 jobs in flight at most, each
					// sleeping long enough
					sp.settings.MaxInFlight = 2
					ms := int(2000 * (boundary.Sub(start).Seconds() + 20) / float64(len(gp.jobs)))
					for k := range gp.jobs {
						gp.jobs[k].Type, gp.jobs[k].Payload = "sleep", []byte(fmt.Sprintf(`{"ms":%d}`, ms))
					}
				}
				sps = append(sps, sp)
			}
			wctx, cancel := context.WithCancel(context.Background())
			stopSamp = cancel
			sampDone.Add(1)
			go sample(wctx, e)
			readyOne.Do(func() { close(ready) })
			submitGroup := func(sp *schedPlan) error {
				cl := e.client.ForTenant(sp.p.ref.Tenant)
				for i := 0; i < len(sp.p.jobs); i += 100 {
					jobs := sp.p.jobs[i:min(i+100, len(sp.p.jobs))]
					if err := retry(ctx, func(ctx context.Context) error { return cl.SubmitGroup(ctx, sp.p.ref.ID, sp.settings, jobs...) }); err != nil {
						return err
					}
				}
				return retry(ctx, func(ctx context.Context) error { return cl.Seal(ctx, sp.p.ref.ID, int64(len(sp.p.jobs))) })
			}
			var after []*schedPlan
			for _, sp := range sps {
				if sp.afterSnap {
					after = append(after, sp)
					continue
				}
				if err := submitGroup(sp); err != nil {
					return err
				}
			}
			var at time.Time
			select {
			case at = <-snapped:
			case <-ctx.Done():
				return ctx.Err()
			}
			for _, sp := range after {
				sp.nb = at.Add(4 * time.Second)
				sp.settings.NotBefore = sp.nb.Format(time.RFC3339Nano)
				sp.earliest = sp.nb
				if sp.windowed && boundary.After(sp.nb) {
					sp.earliest = boundary
				}
				if err := submitGroup(sp); err != nil {
					return err
				}
			}
			return nil
		},
		faults: func(ctx context.Context, e *env) string {
			<-ready
			if len(sps) == 0 {
				return "none: nothing submitted"
			}
			var done []string
			// The snapshot holds every group submitted so far with its
			// schedule (a tenant's default windows' intervals included).
			deadline := time.Now().Add(time.Minute)
			for !e.t17Stored(sps) && time.Now().Before(deadline) {
				time.Sleep(50 * time.Millisecond)
			}
			snap := filepath.Join(e.dir, "snapshot.rdb")
			if err := e.bgsave(snap); err != nil {
				snapped <- time.Now()
				return "snapshot failed: " + err.Error()
			}
			snapAt := time.Now()
			snapped <- snapAt
			done = append(done, fmt.Sprintf("BGSAVE %.1fs after the start", snapAt.Sub(start).Seconds()))
			moves := 0
			for _, sp := range sps {
				if sp.move.IsZero() {
					continue
				}
				if sp.nb.Before(time.Now().Add(500 * time.Millisecond)) {
					// too late to move: the group may have started
					done = append(done, sp.p.ref.String()+" not moved (the snapshot came too late)")
					sp.move = time.Time{}
					continue
				}
				cl := e.client.ForTenant(sp.p.ref.Tenant)
				if err := retry(ctx, func(ctx context.Context) error { return cl.Reschedule(ctx, sp.p.ref.ID, sp.move) }); err != nil {
					return strings.Join(append(done, "reschedule: "+err.Error()), "; ")
				}
				sp.nb = sp.move
				sp.earliest = sp.move
				if sp.windowed && boundary.After(sp.move) {
					sp.earliest = boundary
				}
				moves++
			}
			done = append(done, fmt.Sprintf("%d notBefore moves published", moves))
			// Both fetchers (admission, the windows' intervals, the replay)
			// die when the first notBefore comes.
			time.Sleep(time.Until(start.Add(lead + 5*time.Second)))
			n := 0
			for _, s := range e.services("fetcher") {
				if s.kill9() {
					n++
				}
			}
			done = append(done, fmt.Sprintf("%d fetchers killed -9 at the first notBefore", n))
			// Redis comes back older between the old and the new notBefore
			// of the groups moved later.
			time.Sleep(time.Until(start.Add(lead + 9*time.Second)))
			epoch.Add(1)
			err := e.rollback(snap)
			epoch.Add(1)
			if err != nil {
				return strings.Join(append(done, err.Error()), "; ")
			}
			done = append(done, fmt.Sprintf("Redis rolled back to the snapshot %.1fs after the start", time.Since(start).Seconds()))
			// Then random kills until every group ended; the short profile
			// kills only the fetchers and dispatchers (admission, the
			// windows, the replay, the leases), until the windows opened:
			// a killed worker's or aggregator's messages come back only
			// after their AckWait (17 s, 30 s).
			victims := e.svcs
			until := time.Now().Add(time.Hour)
			if p.name == "short" {
				victims = append(e.services("fetcher"), e.services("dispatcher")...)
				until = boundary.Add(2 * time.Second)
			}
			per := map[string]int{}
			kills := 0
			for time.Now().Before(until) && sleepRand(ctx, 1500*time.Millisecond, 4*time.Second) {
				s := victims[rand.IntN(len(victims))]
				if s.kill9() {
					kills++
					per[strings.SplitN(s.name, "-", 2)[0]]++
				}
			}
			done = append(done, fmt.Sprintf("then %d× kill -9 service (%s)", kills, fmtCounts(per)))
			return strings.Join(done, "; ")
		},
		check: func(e *env, _ *tally) []string {
			if stopSamp != nil {
				stopSamp()
				sampDone.Wait()
			}
			sampMu.Lock()
			defer sampMu.Unlock()
			return e.t17Check(sps, samples, boundary)
		},
		note: func() string {
			return fmt.Sprintf("windows opened at %s UTC (%.0fs after the start)", boundary.UTC().Format("15:04:05"), boundary.Sub(start).Seconds())
		},
	}
}

// t17Stored reports whether every group submitted so far exists in Redis
// with its schedule: notBefore, and the open intervals of its windows.
func (e *env) t17Stored(sps []*schedPlan) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	for _, sp := range sps {
		if sp.afterSnap {
			continue
		}
		m, err := e.rdb.HMGet(ctx, e.keys.GroupMeta(sp.p.ref), "totalJobs", "notBefore", "winAt").Result()
		if err != nil {
			return false
		}
		if n, _ := strconv.Atoi(fmt.Sprint(m[0])); n < len(sp.p.jobs) {
			return false
		}
		if !sp.nb.IsZero() && m[1] == nil || sp.windowed && m[2] == nil {
			return false
		}
	}
	return true
}

// t17Check compares what the sampler saw and what Redis holds in the end
// with each group's schedule.
func (e *env) t17Check(sps []*schedPlan, samples map[contracts.GroupRef][]admitSample, boundary time.Time) []string {
	ctx := context.Background()
	var problems []string
	var lateness []float64
	var gapNotes []string
	for _, sp := range sps {
		ref := sp.p.ref
		ss := samples[ref]
		earliest := sp.earliest.UnixMilli()
		early, inGap := 0, 0
		for i := 1; i < len(ss); i++ {
			a, b := ss[i-1], ss[i]
			if a.epoch != b.epoch || b.queued >= a.queued {
				continue
			}
			// jobs left the group's queue at some time in (a.at, b.at]
			if !sp.earliest.IsZero() && b.at < earliest {
				early += int(a.queued - b.queued)
			}
			if !sp.closedFrom.IsZero() && a.at >= sp.closedFrom.UnixMilli() && b.at < sp.closedTo.UnixMilli() {
				inGap += int(a.queued - b.queued)
			}
		}
		if !sp.closedFrom.IsZero() {
			// The check means something only if jobs were queued while
			// the windows were closed.
			held := int64(-1)
			for _, x := range ss {
				if x.at >= sp.closedFrom.UnixMilli() && x.at < sp.closedTo.UnixMilli() {
					held = x.queued
					break
				}
			}
			if held <= 0 {
				problems = append(problems, fmt.Sprintf("%s: no job queued when its windows closed (%d): the closing was not exercised", ref, held))
			} else {
				gapNotes = append(gapNotes, fmt.Sprintf("%s held %d queued jobs for the closed minute", ref, held))
			}
		}
		if early > 0 {
			problems = append(problems, fmt.Sprintf("%s: %d jobs admitted before %s", ref, early, sp.earliest.UTC().Format(time.RFC3339Nano)))
		}
		if inGap > 0 {
			problems = append(problems, fmt.Sprintf("%s: %d jobs admitted while its windows were closed", ref, inGap))
		}
		var firstStart int64
		for _, s := range ss {
			if s.started > 0 && s.started < earliest {
				problems = append(problems, fmt.Sprintf("%s: startedAt %d before its earliest start %d", ref, s.started, earliest))
				break
			}
			if s.started > 0 && firstStart == 0 {
				firstStart = s.started
			}
		}
		if !sp.earliest.IsZero() && firstStart > 0 {
			lateness = append(lateness, float64(firstStart-earliest)/1000)
		}
		// In the end: the notBefore kept, and no job claimed before the
		// group could start.
		m, err := e.rdb.HMGet(ctx, e.keys.GroupMeta(ref), "notBefore", "windows").Result()
		if err != nil {
			problems = append(problems, fmt.Sprintf("%s: meta: %v", ref, err))
			continue
		}
		if !sp.nb.IsZero() && fmt.Sprint(m[0]) != strconv.FormatInt(sp.nb.UnixMilli(), 10) {
			problems = append(problems, fmt.Sprintf("%s: notBefore %v in Redis, want %d", ref, m[0], sp.nb.UnixMilli()))
		}
		if sp.windowed && m[1] == nil {
			problems = append(problems, fmt.Sprintf("%s: no sending windows in Redis", ref))
		}
		if sp.earliest.IsZero() {
			continue
		}
		claimedEarly := 0
		cmds := make([]*redis.StringCmd, len(sp.p.jobs))
		_, _ = e.rdb.Pipelined(ctx, func(pl redis.Pipeliner) error {
			for i, j := range sp.p.jobs {
				cmds[i] = pl.HGet(ctx, e.keys.Job(ref, j.ID), "claimedAt")
			}
			return nil
		})
		for _, c := range cmds {
			if at, err := strconv.ParseInt(c.Val(), 10, 64); err == nil && at < earliest {
				claimedEarly++
			}
		}
		if claimedEarly > 0 {
			problems = append(problems, fmt.Sprintf("%s: %d jobs claimed before its earliest start", ref, claimedEarly))
		}
	}
	sort.Float64s(lateness)
	var notes []string
	if len(lateness) > 0 {
		notes = append(notes, fmt.Sprintf("%d scheduled groups started %.2f–%.2fs after their earliest start (median %.2fs)",
			len(lateness), lateness[0], lateness[len(lateness)-1], lateness[len(lateness)/2]))
	}
	t17Notes.Store(strings.Join(append(notes, gapNotes...), "; "))
	return problems
}

var t17Notes atomic.Value
