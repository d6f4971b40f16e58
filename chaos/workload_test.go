package chaos

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/bulkaction/bulkaction/pkg/client"
	"github.com/bulkaction/bulkaction/pkg/contracts"
	"github.com/bulkaction/bulkaction/pkg/redisq"
)

// workload describes the jobs of a scenario: tenants × groups × jobs, each
// job made by Job (its type, payload and whether it is meant to fail).
type workload struct {
	Tenants, Groups, Jobs int
	// Job returns job i of group g of tenant t; nil means noop jobs with a
	// payload naming them.
	Job func(t, g, i int) (typ string, payload string, mustFail bool)
	// Rate paces submission (jobs per second over the whole workload); zero
	// submits as fast as JetStream acknowledges.
	Rate int
}

func (w workload) total() int { return w.Tenants * w.Groups * w.Jobs }

// groupPlan is one group as submitted.
type groupPlan struct {
	ref      contracts.GroupRef
	jobs     []client.Job
	mustFail map[string]bool
}

func (w workload) plans(tag string) []*groupPlan {
	var out []*groupPlan
	for t := 0; t < w.Tenants; t++ {
		for g := 0; g < w.Groups; g++ {
			p := &groupPlan{ref: contracts.Group(fmt.Sprintf("tenant-%d", t), fmt.Sprintf("%s-g%03d", tag, g)), mustFail: map[string]bool{}}
			for i := 0; i < w.Jobs; i++ {
				id := fmt.Sprintf("j%06d", i)
				typ, payload, fail := "noop", fmt.Sprintf(`{"t":%d,"g":%d,"i":%d}`, t, g, i), false
				if w.Job != nil {
					typ, payload, fail = w.Job(t, g, i)
				}
				p.jobs = append(p.jobs, client.Job{ID: id, Type: typ, Payload: []byte(payload)})
				if fail {
					p.mustFail[id] = true
				}
			}
			out = append(out, p)
		}
	}
	return out
}

// retry runs fn until it succeeds or ctx ends (every call is idempotent:
// the client's messages carry ids derived from the jobs).
func retry(ctx context.Context, fn func(ctx context.Context) error) error {
	for n := 0; ; n++ {
		cctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		err := fn(cctx)
		cancel()
		if err == nil {
			return nil
		}
		if n%50 == 10 { // a fault lasts seconds; this long is worth saying
			fmt.Fprintf(os.Stderr, "chaos: still retrying after %d attempts: %v\n", n+1, err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last error: %v)", ctx.Err(), err)
		case <-time.After(300 * time.Millisecond):
		}
	}
}

// submit publishes every group's jobs (in messages of up to 500 jobs,
// chunks of 1000 per call) and seals each group, retrying through faults.
func (e *env) submit(ctx context.Context, w workload, plans []*groupPlan) error {
	err := e.submitJobs(ctx, w, plans)
	if err != nil && ctx.Err() != nil {
		return err // nothing can be sealed any more
	}
	return errors.Join(err, e.seal(ctx, plans))
}

// submitJobs publishes every group's jobs, paced by w.Rate, without sealing.
func (e *env) submitJobs(ctx context.Context, w workload, plans []*groupPlan) error {
	var pace <-chan time.Time
	chunk := 1000
	if w.Rate > 0 {
		chunk = max(1, w.Rate/20)
		tk := time.NewTicker(time.Second * time.Duration(chunk) / time.Duration(w.Rate))
		defer tk.Stop()
		pace = tk.C
	}
	sem := make(chan struct{}, 8)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var errs []error
	// Jobs go out round-robin over the groups, a chunk at a time, so every
	// group is in flight while the faults run.
	for start := 0; start < w.Jobs; start += chunk {
		for _, p := range plans {
			if pace != nil {
				select {
				case <-pace:
				case <-ctx.Done():
					return ctx.Err()
				}
			}
			end := min(start+chunk, len(p.jobs))
			jobs := p.jobs[start:end]
			sem <- struct{}{}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer func() { <-sem }()
				cl := e.client.ForTenant(p.ref.Tenant)
				err := retry(ctx, func(ctx context.Context) error { return cl.Submit(ctx, p.ref.ID, jobs...) })
				if err != nil {
					mu.Lock()
					errs = append(errs, fmt.Errorf("submit %s: %w", p.ref, err))
					mu.Unlock()
				}
			}()
		}
	}
	wg.Wait()
	return errors.Join(errs...)
}

// seal seals each group with the number of its planned jobs.
func (e *env) seal(ctx context.Context, plans []*groupPlan) error {
	var errs []error
	for _, p := range plans {
		cl := e.client.ForTenant(p.ref.Tenant)
		if err := retry(ctx, func(ctx context.Context) error { return cl.Seal(ctx, p.ref.ID, int64(len(p.jobs))) }); err != nil {
			errs = append(errs, fmt.Errorf("seal %s: %w", p.ref, err))
		}
	}
	return errors.Join(errs...)
}

// tally is what the accounting found over a scenario's groups.
type tally struct {
	jobs        int
	lost        int
	double      int
	failedUnexp int
	notes       []string
	// latencies of the healthy jobs (finishedAt − createdAt), ms.
	latencies []int64
}

func (t *tally) notef(format string, args ...any) {
	t.notes = append(t.notes, fmt.Sprintf(format, args...))
}

// waitAll waits until every group has its final event (or ctx ends) and
// returns the final events found, by group.
func (e *env) waitAll(ctx context.Context, plans []*groupPlan) map[contracts.GroupRef]contracts.GroupEvent {
	out := make(map[contracts.GroupRef]contracts.GroupEvent)
	var mu sync.Mutex
	sem := make(chan struct{}, 16)
	var wg sync.WaitGroup
	for _, p := range plans {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			cl := e.client.ForTenant(p.ref.Tenant)
			for ctx.Err() == nil {
				ev, err := cl.Wait(ctx, p.ref.ID)
				if err == nil {
					mu.Lock()
					out[p.ref] = ev
					mu.Unlock()
					return
				}
				select {
				case <-ctx.Done():
				case <-time.After(500 * time.Millisecond):
				}
			}
		}()
	}
	wg.Wait()
	return out
}

// account waits for every group (up to timeout) and compares what Redis
// and the final events say with what was submitted:
//
//   - lost: submitted jobs not counted (submitted − succeeded − failed −
//     cancelled of the group's meta, when positive; a group that never
//     ended counts its uncounted jobs here);
//   - double: counts beyond the distinct jobs submitted (counted −
//     submitted, when positive, or more jobs received than submitted);
//   - failed unexpectedly: jobs whose hash says FAILED that were not meant
//     to fail.
//
// It also checks that every job's hash is terminal with the status its
// meta counts, that the final event agrees with the meta, and that every
// job meant to fail did.
func (e *env) account(plans []*groupPlan, timeout time.Duration) *tally {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	events := e.waitAll(ctx, plans)
	// A final event says a group ended; its meta must say so too. After a
	// Redis restore (T10) a group that had ended may run again first.
	for ctx.Err() == nil && !e.allEnded(plans) {
		time.Sleep(200 * time.Millisecond)
	}
	tl := &tally{}
	rctx := context.Background()
	notEnded := 0
	for _, p := range plans {
		submitted := len(p.jobs)
		tl.jobs += submitted
		meta, err := e.rdb.HGetAll(rctx, e.tenantKeys(p.ref.Tenant).GroupMeta(p.ref)).Result()
		if err != nil {
			tl.notef("%s: meta: %v", p.ref, err)
			tl.lost += submitted
			continue
		}
		n := func(k string) int { var x int; fmt.Sscan(meta[k], &x); return x }
		succ, failed, canc, received := n("successCount"), n("failedCount"), n("cancelledCount"), n("totalJobs")
		counted := succ + failed + canc
		if counted < submitted {
			tl.lost += submitted - counted
		}
		if counted > submitted {
			tl.double += counted - submitted
		}
		if received > submitted && counted <= submitted {
			tl.double += received - submitted
			tl.notef("%s: %d jobs received for %d submitted", p.ref, received, submitted)
		}
		ev, ok := events[p.ref]
		if !ok {
			notEnded++
			if notEnded <= 3 {
				tl.notef("%s: no final event (meta %s, %d/%d counted, done=%s jobs=%s)", p.ref, meta["status"], counted, submitted, meta["doneJobs"], meta["totalJobs"])
			}
		} else if int(ev.Succeeded) != succ || int(ev.Failed) != failed || int(ev.Cancelled) != canc {
			tl.notef("%s: final event %s %d/%d/%d differs from meta %d/%d/%d", p.ref, ev.State,
				ev.Succeeded, ev.Failed, ev.Cancelled, succ, failed, canc)
		}
		// Every job's own hash.
		statuses := map[string]int{}
		var shouldFailOK, shouldFailNot int
		for start := 0; start < submitted; start += 2000 {
			end := min(start+2000, submitted)
			cmds := make([]*redis.SliceCmd, end-start)
			_, err := e.rdb.Pipelined(rctx, func(pl redis.Pipeliner) error {
				for i := start; i < end; i++ {
					cmds[i-start] = pl.HMGet(rctx, e.tenantKeys(p.ref.Tenant).Job(p.ref, p.jobs[i].ID), "status", "createdAt", "finishedAt")
				}
				return nil
			})
			if err != nil {
				tl.notef("%s: job hashes: %v", p.ref, err)
				break
			}
			for i, c := range cmds {
				v := c.Val()
				st, _ := v[0].(string)
				if st == "" {
					st = "missing"
				}
				statuses[st]++
				id := p.jobs[start+i].ID
				switch {
				case p.mustFail[id] && st == "FAILED":
					shouldFailOK++
				case p.mustFail[id]:
					shouldFailNot++
				case st == "FAILED":
					tl.failedUnexp++
				case st == "SUCCESS":
					var c, f int64
					if s, ok := v[1].(string); ok {
						fmt.Sscan(s, &c)
					}
					if s, ok := v[2].(string); ok {
						fmt.Sscan(s, &f)
					}
					if c > 0 && f >= c {
						tl.latencies = append(tl.latencies, f-c)
					}
				}
			}
		}
		if statuses["SUCCESS"] != succ || statuses["FAILED"] != failed || statuses["CANCELLED"] != canc {
			tl.notef("%s: job hashes %v vs meta %d/%d/%d", p.ref, statuses, succ, failed, canc)
		}
		if shouldFailNot > 0 {
			tl.notef("%s: %d jobs meant to fail did not (FAILED %d)", p.ref, shouldFailNot, shouldFailOK)
		}
	}
	if notEnded > 0 {
		tl.notef("%d of %d groups without a final event after %s", notEnded, len(plans), timeout)
	}
	return tl
}

// ---------------------------------------------------------------- T9

// t9 checks, after a run whose groups have all ended, that every key of an
// ended group has a TTL (but a completion callback still due, which lives
// until it is delivered or fails), and that SUBMIT, READY and RESULT are empty (it
// waits for the acknowledgements still due after a kill: a killed
// process's messages come back after the consumers' AckWait, 30 s).
func (e *env) t9(plans []*groupPlan, wait time.Duration) []string {
	ctx := context.Background()
	var problems []string
	ended := map[string]bool{}
	for _, p := range plans {
		st, _ := e.rdb.HGet(ctx, e.tenantKeys(p.ref.Tenant).GroupMeta(p.ref), "status").Result()
		if st == string(contracts.StateCompleted) || st == string(contracts.StateCancelled) {
			ended[p.ref.Tenant+":"+p.ref.ID] = true
		}
	}
	noTTL := 0
	var sample []string
	err := e.scanKeys(ctx, e.prefix+"*", 2000, func(keys []string) {
		var cands []string
		for _, k := range keys {
			_, rest := e.keyPrefix(k)
			if g := groupOfKey(rest); g != "" && ended[g] {
				cands = append(cands, k)
			}
		}
		if len(cands) > 0 {
			cmds := make([]*redis.DurationCmd, len(cands))
			_, _ = e.rdb.Pipelined(ctx, func(pl redis.Pipeliner) error {
				for i, k := range cands {
					cmds[i] = pl.PTTL(ctx, k)
				}
				return nil
			})
			for i, c := range cmds {
				if c.Val() == -1 && !e.callbackDue(ctx, cands[i]) { // exists without a TTL (-2 = gone meanwhile)
					noTTL++
					if len(sample) < 3 {
						sample = append(sample, cands[i])
					}
				}
			}
		}
	})
	if err != nil {
		problems = append(problems, "T9 scan: "+err.Error())
	}
	if noTTL > 0 {
		problems = append(problems, fmt.Sprintf("T9: %d keys of ended groups without a TTL (%s)", noTTL, strings.Join(sample, ", ")))
	}
	// Work streams empty.
	deadline := time.Now().Add(wait)
	for {
		left := e.workStreamsLeft(ctx)
		if left == "" {
			break
		}
		if time.Now().After(deadline) {
			problems = append(problems, "T9: work streams not empty after "+wait.String()+": "+left)
			break
		}
		time.Sleep(time.Second)
	}
	return problems
}

// scanKeys calls fn with each page of the keys matching pattern, on the
// one server or, in a Redis Cluster, on every primary (one at a time).
func (e *env) scanKeys(ctx context.Context, pattern string, count int64, fn func(keys []string)) error {
	scan := func(ctx context.Context, c *redis.Client) error {
		var cursor uint64
		for {
			keys, next, err := c.Scan(ctx, cursor, pattern, count).Result()
			if err != nil {
				return err
			}
			fn(keys)
			if cursor = next; cursor == 0 {
				return nil
			}
		}
	}
	switch c := e.rdb.(type) {
	case *redis.ClusterClient:
		var mu sync.Mutex
		return c.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
			mu.Lock()
			defer mu.Unlock()
			return scan(ctx, c)
		})
	case *redis.Client:
		return scan(ctx, c)
	default:
		return fmt.Errorf("scan: unexpected client %T", e.rdb)
	}
}

// workStreamsLeft describes what SUBMIT, READY and RESULT still hold ("" =
// nothing, and no consumer has messages pending or unacknowledged).
func (e *env) workStreamsLeft(ctx context.Context) string {
	var left []string
	for _, name := range []string{e.names.StreamSubmit(), e.names.StreamReady(), e.names.StreamResult()} {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		s, err := e.js.Stream(cctx, name)
		if err != nil {
			cancel()
			left = append(left, name+": "+err.Error())
			continue
		}
		info, err := s.Info(cctx)
		if err != nil {
			cancel()
			left = append(left, name+": "+err.Error())
			continue
		}
		// SUBMIT keeps applied messages for the replay window: what is
		// left of it is what its consumer has pending.
		if info.State.Msgs > 0 && name != e.names.StreamSubmit() {
			left = append(left, fmt.Sprintf("%s holds %d", name, info.State.Msgs))
		}
		cl := s.ListConsumers(cctx)
		for ci := range cl.Info() {
			if ci.Config.Durable == "" {
				continue // a fetcher's replay of SUBMIT reads up to a point only
			}
			if ci.NumAckPending > 0 || ci.NumPending > 0 {
				left = append(left, fmt.Sprintf("%s/%s pending %d unacked %d", name, ci.Name, ci.NumPending, ci.NumAckPending))
			}
		}
		cancel()
	}
	sort.Strings(left)
	return strings.Join(left, "; ")
}

// groupOfKey returns "<tenant>:<groupId>" for a key (without the prefix)
// that belongs to one group: group:<t>:<g>:…, job:<t>:<g>:<jid>,
// congestion:<t>:<g>:…; "" for any other key.
func groupOfKey(k string) string {
	for _, seg := range []string{"group:", "job:", "congestion:"} {
		if rest, ok := strings.CutPrefix(k, seg); ok {
			parts := strings.SplitN(rest, ":", 3)
			if len(parts) == 3 {
				return parts[0] + ":" + parts[1]
			}
		}
	}
	return ""
}

// dlqCount is the number of messages in the DLQ stream.
func (e *env) dlqCount() (uint64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s, err := e.js.Stream(ctx, e.names.StreamDLQ())
	if err != nil {
		return 0, err
	}
	info, err := s.Info(ctx)
	if err != nil {
		return 0, err
	}
	return info.State.Msgs, nil
}

// callbackDue reports whether key is a group's completion callback whose
// delivery is still due (in callbacks:due): it keeps no TTL until it ends.
func (e *env) callbackDue(ctx context.Context, key string) bool {
	prefix, rest := e.keyPrefix(key)
	gk, ok := strings.CutSuffix(strings.TrimPrefix(rest, "group:"), ":callback")
	if !ok {
		return false
	}
	_, err := e.rdb.ZScore(ctx, redisq.NewKeys(prefix).CallbacksDue(), gk).Result()
	return err == nil
}
