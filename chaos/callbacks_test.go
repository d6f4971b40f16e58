package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bulkaction/bulkaction/internal/tenantset"
	"github.com/bulkaction/bulkaction/pkg/contracts"
	"github.com/bulkaction/bulkaction/pkg/redisq"
	"github.com/bulkaction/bulkaction/pkg/webhook"
)

// ---------------------------------------------------------------- T16

// receiver is T16's callback endpoint: it refuses every delivery (503)
// until it is opened, then verifies each one with an independent check of
// the Standard Webhooks signature and records the final event it carried,
// per group (its path, /cb/<tenant>/<group>).
type receiver struct {
	addr    string
	secrets map[string]string // tenant → secret
	open    atomic.Bool

	mu        sync.Mutex
	refused   int
	bad       []string                          // deliveries that did not verify
	delivered map[string][]contracts.GroupEvent // path → the events delivered
}

func newReceiver(t *testing.T, secrets map[string]string) *receiver {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &receiver{addr: l.Addr().String(), secrets: secrets, delivered: map[string][]contracts.GroupEvent{}}
	srv := &http.Server{Handler: http.HandlerFunc(r.serve), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })
	return r
}

func (r *receiver) serve(w http.ResponseWriter, req *http.Request) {
	body, _ := io.ReadAll(io.LimitReader(req.Body, 1<<20))
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.open.Load() {
		r.refused++
		w.WriteHeader(http.StatusServiceUnavailable)
		return
	}
	parts := strings.Split(strings.TrimPrefix(req.URL.Path, "/cb/"), "/")
	if len(parts) != 2 {
		r.bad = append(r.bad, req.URL.Path+": not a group's path")
		w.WriteHeader(http.StatusNotFound)
		return
	}
	if err := webhook.Verify(r.secrets[parts[0]], req.Header, body, time.Now(), 0); err != nil {
		r.bad = append(r.bad, req.URL.Path+": "+err.Error())
		w.WriteHeader(http.StatusUnauthorized)
		return
	}
	var ev contracts.GroupEvent
	if err := json.Unmarshal(body, &ev); err != nil {
		r.bad = append(r.bad, req.URL.Path+": "+err.Error())
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	r.delivered[req.URL.Path] = append(r.delivered[req.URL.Path], ev)
	w.WriteHeader(http.StatusNoContent)
}

func (r *receiver) url(g contracts.GroupRef) string {
	return fmt.Sprintf("http://%s/cb/%s/%s", r.addr, g.Tenant, g.ID)
}

// t16: groups with completion callbacks to a receiver that refuses every
// delivery at first. While some groups have ended with their callbacks
// pending, Redis is snapshotted; the aggregators (the deliverers) are
// killed -9; Redis is rolled back to the snapshot once most groups ended;
// then the receiver opens. Every group's final event must reach it, signed,
// with the group's exact counts, and every callback end delivered.
func t16(t *testing.T, p profile) run {
	const tenants, groups = 2, 5
	secrets := map[string]string{}
	for i := range tenants {
		secrets[fmt.Sprintf("tenant-%d", i)] = webhook.NewSecret()
	}
	rc := newReceiver(t, secrets)
	w := workload{Tenants: tenants, Groups: groups, Jobs: p.t16Jobs / (tenants * groups), Rate: p.rate}
	var plans []*groupPlan
	return run{
		id: "T16",
		opts: envOptions{Settings: map[string]string{
			"HTTP_ALLOWED_HOSTS": "127.0.0.1", "CALLBACK_FIRST_RETRY": "1s", "CALLBACK_RETRY_FOR": "1h",
		}},
		w:            w,
		timeout:      p.settle + 2*time.Minute,
		maxFaultTime: 8 * time.Minute,
		submit: func(ctx context.Context, e *env, ps []*groupPlan) error {
			plans = ps
			q, err := redisq.New(ctx, e.rdb, redisq.Config{Prefix: e.prefix})
			if err != nil {
				return err
			}
			ts, err := tenantset.Open(ctx, e.js, e.names, q)
			if err != nil {
				return err
			}
			for tenant, s := range secrets {
				if _, err := ts.RotateCallbackSecret(ctx, tenant, s, 0); err != nil {
					return err
				}
			}
			// One group after the other, each sealed once its jobs are in,
			// so that the groups end one by one while the faults run.
			chunk := max(1, w.Rate/20)
			tick := time.NewTicker(time.Second * time.Duration(chunk) / time.Duration(max(w.Rate, 1)))
			defer tick.Stop()
			for _, gp := range ps {
				cl := e.client.ForTenant(gp.ref.Tenant)
				settings := contracts.GroupSettings{CallbackURL: rc.url(gp.ref)}
				for i := 0; i < len(gp.jobs); i += chunk {
					select {
					case <-tick.C:
					case <-ctx.Done():
						return ctx.Err()
					}
					jobs := gp.jobs[i:min(i+chunk, len(gp.jobs))]
					if err := retry(ctx, func(ctx context.Context) error { return cl.SubmitGroup(ctx, gp.ref.ID, settings, jobs...) }); err != nil {
						return err
					}
				}
				if err := retry(ctx, func(ctx context.Context) error { return cl.Seal(ctx, gp.ref.ID, int64(len(gp.jobs))) }); err != nil {
					return err
				}
			}
			return nil
		},
		faults: func(ctx context.Context, e *env) string {
			// Independent of ctx: the sequence needs groups to end.
			deadline := time.Now().Add(6 * time.Minute)
			waitEnded := func(n int) int {
				for time.Now().Before(deadline) {
					if k := e.endedGroups(plans); k >= n {
						return k
					}
					time.Sleep(200 * time.Millisecond)
				}
				return e.endedGroups(plans)
			}
			for plans == nil && time.Now().Before(deadline) {
				time.Sleep(100 * time.Millisecond)
			}
			atSnap := waitEnded(2)
			snap := filepath.Join(e.dir, "snapshot.rdb")
			if err := e.bgsave(snap); err != nil {
				return "snapshot failed: " + err.Error()
			}
			kills := 0
			for _, s := range e.services("aggregator") {
				if s.kill9() {
					kills++
				}
			}
			atRollback := waitEnded(len(plans) * 4 / 5)
			if err := e.rollback(snap); err != nil {
				return err.Error()
			}
			time.Sleep(5 * time.Second) // deliveries keep failing a while after the rollback
			rc.open.Store(true)
			rc.mu.Lock()
			refused := rc.refused
			rc.mu.Unlock()
			return fmt.Sprintf("receiver refused every delivery until the end (%d refused); snapshot with %d of %d groups ended; "+
				"%d aggregators killed -9; Redis rolled back to it with %d ended", refused, atSnap, len(plans), kills, atRollback)
		},
		check: func(e *env, _ *tally) []string { return rc.check(e, plans) },
		note:  func() string { return rc.note() },
	}
}

// endedGroups counts the groups whose meta says they ended.
func (e *env) endedGroups(plans []*groupPlan) int {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	n := 0
	for _, p := range plans {
		st, _ := e.rdb.HGet(ctx, e.tenantKeys(p.ref.Tenant).GroupMeta(p.ref), "status").Result()
		if st == string(contracts.StateCompleted) || st == string(contracts.StateCancelled) {
			n++
		}
	}
	return n
}

// check waits (up to 3 minutes: the retries back off) until every group's
// callback was delivered, then compares each delivered event with what was
// submitted and the callback's state in Redis.
func (r *receiver) check(e *env, plans []*groupPlan) []string {
	q, err := redisq.New(context.Background(), e.rdb, redisq.Config{Prefix: e.prefix})
	if err != nil {
		return []string{err.Error()}
	}
	deadline := time.Now().Add(3 * time.Minute)
	var problems []string
	for time.Now().Before(deadline) {
		problems = problems[:0]
		for _, p := range plans {
			c, ok, err := q.CallbackOf(context.Background(), p.ref)
			switch {
			case err != nil:
				problems = append(problems, fmt.Sprintf("%s: callback: %v", p.ref, err))
			case !ok:
				problems = append(problems, fmt.Sprintf("%s: no callback recorded", p.ref))
			case c.State != redisq.CallbackDelivered:
				problems = append(problems, fmt.Sprintf("%s: callback %s after %d attempts (%s)", p.ref, c.State, c.Attempts, c.LastError))
			}
		}
		if len(problems) == 0 {
			break
		}
		time.Sleep(time.Second)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, p := range plans {
		evs := r.delivered["/cb/"+p.ref.Tenant+"/"+p.ref.ID]
		if len(evs) == 0 {
			problems = append(problems, fmt.Sprintf("%s: no delivery reached the receiver", p.ref))
			continue
		}
		for _, ev := range evs {
			if ev.Tenant != p.ref.Tenant || ev.GroupID != p.ref.ID || ev.State != contracts.StateCompleted ||
				ev.Succeeded != int64(len(p.jobs)) || ev.Total != int64(len(p.jobs)) {
				problems = append(problems, fmt.Sprintf("%s: delivered %s/%s %s, %d of %d succeeded, want COMPLETED with all %d",
					p.ref, ev.Tenant, ev.GroupID, ev.State, ev.Succeeded, ev.Total, len(p.jobs)))
			}
		}
	}
	if len(r.bad) > 0 {
		sort.Strings(r.bad)
		problems = append(problems, fmt.Sprintf("%d deliveries did not verify, e.g. %s", len(r.bad), r.bad[0]))
	}
	return problems
}

// note says how many deliveries reached the receiver for how many groups.
func (r *receiver) note() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	n, groups, again := 0, len(r.delivered), 0
	for _, evs := range r.delivered {
		n += len(evs)
		if len(evs) > 1 {
			again++
		}
	}
	return fmt.Sprintf("receiver: %d signed final events delivered for %d groups (%d groups more than once: at least once), %d attempts refused before it opened",
		n, groups, again, r.refused)
}
