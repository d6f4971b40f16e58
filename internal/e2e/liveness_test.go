package e2e_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/bulkaction/bulkaction/internal/config"
	"github.com/bulkaction/bulkaction/internal/stack"
	"github.com/bulkaction/bulkaction/internal/testkit"
	"github.com/bulkaction/bulkaction/pkg/client"
	"github.com/bulkaction/bulkaction/pkg/contracts"
)

// downstream is a real HTTP endpoint for the http processor that counts the
// calls of every job (its path names the job) and answers after delay.
type downstream struct {
	srv   *httptest.Server
	mu    sync.Mutex
	calls map[string]int
	delay map[string]time.Duration // by group; none = at once
}

func newDownstream(t *testing.T) *downstream {
	d := &downstream{calls: map[string]int{}, delay: map[string]time.Duration{}}
	d.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		d.mu.Lock()
		d.calls[r.URL.Path]++
		delay := d.delay[r.URL.Query().Get("group")]
		d.mu.Unlock()
		time.Sleep(delay)
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(d.srv.Close)
	return d
}

// payload is the http processor's payload calling the endpoint for job id
// of group gid.
func (d *downstream) payload(gid, id string) []byte {
	b, _ := json.Marshal(map[string]any{"url": d.srv.URL + "/" + gid + "/" + id + "?group=" + url.QueryEscape(gid), "method": "POST"})
	return b
}

// count returns the calls of every job of gid, n jobs named job-000000…
func (d *downstream) count(gid string, n int) (calls map[string]int, total int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	calls = map[string]int{}
	for i := 0; i < n; i++ {
		id := fmt.Sprintf("job-%06d", i)
		c := d.calls["/"+gid+"/"+id]
		calls[id] = c
		total += c
	}
	return calls, total
}

// submitHTTP submits n http jobs calling d to group gid, then seals it.
func (e *env) submitHTTP(d *downstream, gid string, n int) {
	e.t.Helper()
	e.submitHTTPAs(e.client, d, gid, n)
}

// submitHTTPAs is submitHTTP to a group of cl's tenant (d counts calls by
// gid alone: give each tenant gids of its own).
func (e *env) submitHTTPAs(cl *client.Client, d *downstream, gid string, n int) {
	e.t.Helper()
	ctx := context.Background()
	for from := 0; from < n; from += 1000 {
		jobs := make([]client.Job, 0, 1000)
		for i := from; i < min(from+1000, n); i++ {
			id := fmt.Sprintf("job-%06d", i)
			jobs = append(jobs, client.Job{ID: id, Type: "http", Payload: d.payload(gid, id)})
		}
		if err := cl.SubmitGroup(ctx, gid, contracts.GroupSettings{}, jobs...); err != nil {
			e.t.Fatal(err)
		}
	}
	if err := cl.Seal(ctx, gid, int64(n)); err != nil {
		e.t.Fatal(err)
	}
}

// livenessConfig is a configuration in which the repair runs often and a
// job it re-publishes is delivered again: a stuck threshold of 2 s, the
// READY duplicate window as short as the lease allows.
func (e *env) livenessConfig(d *downstream) *config.Config {
	return e.config(func(c *config.Config) {
		c.StuckAfter = 2 * time.Second
		c.ClaimTTL = time.Second
		c.DuplicateWindow = 2 * time.Second
		c.JobTimeoutMs = 20_000
		c.WorkerCount = 20
		c.HTTPAllowedHosts = []string{"127.0.0.1"}
	})
}

// A job that runs for three times STUCK_AFTER, its group recording nothing
// all that time, is called once: the repair takes a run as lost only when
// its worker's claim expired (docs/ARCHITECTURE.md §6.5).
func TestLongJobsRunOnce(t *testing.T) {
	e := newEnv(t)
	d := newDownstream(t)
	d.delay["long"] = 6 * time.Second
	cfg := e.livenessConfig(d)
	e.start(cfg, []string{stack.TargetFetcher, stack.TargetDispatcher, stack.TargetWorker, stack.TargetAggregator}, nil)
	const n = 12
	e.submitHTTP(d, "long", n)
	ev := e.wait("long", time.Minute)
	if ev.State != contracts.StateCompleted || ev.Succeeded != n {
		t.Fatalf("final event %+v, want COMPLETED with %d succeeded", ev, n)
	}
	time.Sleep(time.Second) // a second run, had there been one, would have called by now
	calls, total := d.count("long", n)
	for id, c := range calls {
		if c != 1 {
			t.Errorf("%s called %d times, want once", id, c)
		}
	}
	if total != n {
		t.Errorf("%d calls for %d jobs", total, n)
	}
}

// Results backed up on RESULT while the aggregator is down for several
// times STUCK_AFTER are not taken for lost runs: once an aggregator is
// back, with thousands of results to record before those of a small group,
// no job of that group is called twice.
func TestBackedUpResultsAreNotRunAgain(t *testing.T) {
	e := newEnv(t)
	d := newDownstream(t)
	cfg := e.livenessConfig(d)
	cfg.ResultBatchSize = 1 // the backlog takes a while to record
	r := e.start(cfg, []string{stack.TargetFetcher, stack.TargetDispatcher, stack.TargetWorker}, nil)
	q := r.st.Conns.Queue
	const bulk, small = 8000, 50
	e.submitHTTP(d, "bulk", bulk)
	testkit.WaitFor(t, "the bulk group called", 3*time.Minute, func() bool { _, n := d.count("bulk", bulk); return n >= bulk })
	e.submitHTTP(d, "small", small)
	testkit.WaitFor(t, "the small group called", 3*time.Minute, func() bool { _, n := d.count("small", small); return n >= small })
	time.Sleep(2 * cfg.StuckAfter) // the aggregator stays down for twice STUCK_AFTER
	acfg := *cfg
	acfg.HTTPAddr = ""
	e.start(&acfg, []string{stack.TargetAggregator}, nil)
	for _, g := range []struct {
		gid string
		n   int
	}{{"bulk", bulk}, {"small", small}} {
		ev := e.wait(g.gid, 3*time.Minute)
		if ev.State != contracts.StateCompleted || ev.Succeeded != int64(g.n) {
			t.Fatalf("%s: final event %+v, want COMPLETED with %d succeeded", g.gid, ev, g.n)
		}
	}
	time.Sleep(2 * time.Second)
	for _, g := range []struct {
		gid string
		n   int
	}{{"bulk", bulk}, {"small", small}} {
		calls, total := d.count(g.gid, g.n)
		twice := 0
		for _, c := range calls {
			if c != 1 {
				twice++
			}
		}
		if twice > 0 || total != g.n {
			t.Errorf("%s: %d of %d jobs not called exactly once (%d calls)", g.gid, twice, g.n, total)
		}
	}
	if info := group(t, q, "small"); info.Succeeded != small {
		t.Errorf("small: %+v", info.GroupCounts)
	}
}
