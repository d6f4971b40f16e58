package chaos

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bulkaction/bulkaction/internal/gatewayflood"
	"github.com/bulkaction/bulkaction/pkg/contracts"
)

// ---------------------------------------------------------------- T15

// t15: one tenant floods the gateway (endless uploads, hundreds of event
// streams, failures and overview read in loops) while another submits its
// jobs through the same gateway at a steady pace: every job the gateway
// accepted from the well-behaved tenant completes, its endpoint called
// exactly once (docs/api.md#limits).
func t15(t *testing.T, p profile) run {
	se := newSideEffects(t)
	w := workload{Tenants: 1, Groups: 4, Jobs: p.t15Jobs / 4, Job: se.job("t15", 0)}
	var (
		gs      gatewaySubmit
		flooded = make(chan struct{}) // closed once the flood runs (or cannot)
		once    sync.Once
	)
	floodOn := func() { once.Do(func() { close(flooded) }) }
	return run{
		id: "T15",
		opts: envOptions{GatewayTenants: []string{"tenant-0", "flood"},
			Settings: map[string]string{"HTTP_ALLOWED_HOSTS": "127.0.0.1"}},
		w:            w,
		timeout:      p.settle,
		maxFaultTime: p.t15Flood + 5*time.Minute,
		submit: func(ctx context.Context, e *env, plans []*groupPlan) error {
			select { // the well-behaved tenant submits while the flood runs
			case <-flooded:
			case <-ctx.Done():
				return ctx.Err()
			}
			return gs.submit(ctx, e, plans, p.t15Flood)
		},
		faults: func(ctx context.Context, e *env) string {
			defer floodOn()
			if err := e.waitGateway(ctx); err != nil {
				return "gateway: " + err.Error()
			}
			if err := seedFloodFailures(ctx, e, "flood", 40); err != nil {
				return "flood set-up: " + err.Error()
			}
			fctx, stop := context.WithTimeout(ctx, p.t15Flood)
			defer stop()
			start := time.Now()
			fl, wait := gatewayflood.Start(fctx, gatewayflood.Options{Base: e.gatewayURL, Key: e.gatewayKeys["flood"],
				Group: "junk", Uploads: 8, Streams: 500, Pollers: 4})
			time.Sleep(2 * time.Second) // at full strength
			floodOn()
			<-fctx.Done()
			wait()
			desc := fmt.Sprintf("flood for %s: %s", time.Since(start).Round(time.Second), fl)
			<-ctx.Done()
			return desc
		},
		check: func(*env, *tally) []string { return se.check("t15", w)[1:] },
		note: func() string {
			return se.check("t15", w)[0] + "; " + gs.String()
		},
	}
}

// gatewaySubmit submits a workload through the gateway.
type gatewaySubmit struct {
	requests, jobs, refused429, retries atomic.Int64
	latency                             latencies
}

type latencies struct {
	mu sync.Mutex
	d  []time.Duration
}

func (l *latencies) add(d time.Duration) {
	l.mu.Lock()
	l.d = append(l.d, d)
	l.mu.Unlock()
}

func (l *latencies) max() time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	var m time.Duration
	for _, d := range l.d {
		m = max(m, d)
	}
	return m
}

func (g *gatewaySubmit) String() string {
	return fmt.Sprintf("well-behaved tenant: %d jobs accepted in %d requests through the gateway (slowest %s), %d answered 429, %d other retries",
		g.jobs.Load(), g.requests.Load(), g.latency.max().Round(time.Millisecond), g.refused429.Load(), g.retries.Load())
}

// submit posts each group's jobs as NDJSON in requests of 100 spread over
// d, each with an Idempotency-Key so that a retry (after a 429 or an
// error) submits it once, then seals each group.
func (g *gatewaySubmit) submit(ctx context.Context, e *env, plans []*groupPlan, d time.Duration) error {
	if err := e.waitGateway(ctx); err != nil {
		return err
	}
	const per = 100
	type req struct {
		p    *groupPlan
		from int
	}
	var reqs []req
	for from := 0; ; from += per {
		more := false
		for _, p := range plans {
			if from < len(p.jobs) {
				reqs = append(reqs, req{p, from})
				more = true
			}
		}
		if !more {
			break
		}
	}
	tick := time.NewTicker(max(d/time.Duration(len(reqs)), time.Millisecond))
	defer tick.Stop()
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	key := e.gatewayKeys["tenant-0"]
	for _, r := range reqs {
		select {
		case <-tick.C:
		case <-ctx.Done():
			return ctx.Err()
		}
		wg.Go(func() {
			var body bytes.Buffer
			jobs := r.p.jobs[r.from:min(r.from+per, len(r.p.jobs))]
			for _, j := range jobs {
				fmt.Fprintf(&body, `{"jobId":%q,"type":%q,"payload":%s}`+"\n", j.ID, j.Type, j.Payload)
			}
			idem := fmt.Sprintf("%s-%d", r.p.ref.ID, r.from)
			if err := g.post(ctx, e, key, "/v1/groups/"+r.p.ref.ID+"/jobs", "application/x-ndjson", idem, body.Bytes()); err != nil {
				mu.Lock()
				errs = append(errs, fmt.Errorf("jobs %s from %d: %w", r.p.ref, r.from, err))
				mu.Unlock()
				return
			}
			g.jobs.Add(int64(len(jobs)))
		})
	}
	wg.Wait()
	for _, p := range plans {
		total := `{"total":` + strconv.Itoa(len(p.jobs)) + `}`
		if err := g.post(ctx, e, key, "/v1/groups/"+p.ref.ID+"/seal", "application/json", p.ref.ID+"-seal", []byte(total)); err != nil {
			errs = append(errs, fmt.Errorf("seal %s: %w", p.ref, err))
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("%d requests failed, first: %w", len(errs), errs[0])
	}
	return nil
}

// post sends one request until it is answered 202: after a 429 it waits
// the Retry-After it was given, after an error or another answer a moment.
func (g *gatewaySubmit) post(ctx context.Context, e *env, key, path, ctype, idem string, body []byte) error {
	for attempt := 0; ; attempt++ {
		req, _ := http.NewRequestWithContext(ctx, "POST", e.gatewayURL+path, bytes.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+key)
		req.Header.Set("Content-Type", ctype)
		req.Header.Set("Idempotency-Key", idem)
		start := time.Now()
		resp, err := http.DefaultClient.Do(req)
		wait := 200 * time.Millisecond
		if err == nil {
			msg, _ := io.ReadAll(io.LimitReader(resp.Body, 2048))
			resp.Body.Close()
			g.latency.add(time.Since(start))
			switch resp.StatusCode {
			case http.StatusAccepted:
				g.requests.Add(1)
				return nil
			case http.StatusTooManyRequests:
				g.refused429.Add(1)
				if s, _ := strconv.Atoi(resp.Header.Get("Retry-After")); s > 0 {
					wait = time.Duration(s) * time.Second
				}
			case http.StatusConflict, http.StatusServiceUnavailable, http.StatusRequestTimeout:
				g.retries.Add(1)
			default:
				return fmt.Errorf("%d %s", resp.StatusCode, strings.TrimSpace(string(msg)))
			}
			err = fmt.Errorf("%d %s", resp.StatusCode, strings.TrimSpace(string(msg)))
		} else {
			g.retries.Add(1)
		}
		if attempt > 0 && attempt%50 == 0 {
			fmt.Printf("chaos: T15 %s still retrying after %d attempts: %v\n", path, attempt, err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last: %v)", ctx.Err(), err)
		case <-time.After(wait):
		}
	}
}

// waitGateway waits until gateway-1 answers.
func (e *env) waitGateway(ctx context.Context) error {
	deadline := time.Now().Add(60 * time.Second)
	for {
		req, _ := http.NewRequestWithContext(ctx, "GET", e.gatewayURL+"/v1/openapi.json", nil)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s did not answer within 60s", e.gatewayURL)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// seedFloodFailures gives the flooding tenant a group "junk" of n jobs
// with 100 KiB payloads that fail (the sleep processor refuses the unknown
// field), for its failures pollers to read, and waits until they failed.
func seedFloodFailures(ctx context.Context, e *env, tenant string, n int) error {
	pad := strings.Repeat("x", 100<<10)
	var g gatewaySubmit
	for i := 0; i < n; i += 5 {
		var body bytes.Buffer
		for j := i; j < min(i+5, n); j++ {
			fmt.Fprintf(&body, `{"jobId":"junk%03d","type":"sleep","payload":{"pad":%q}}`+"\n", j, pad)
		}
		if err := g.post(ctx, e, e.gatewayKeys[tenant], "/v1/groups/junk/jobs", "application/x-ndjson", "junk-"+strconv.Itoa(i), body.Bytes()); err != nil {
			return err
		}
	}
	deadline := time.Now().Add(2 * time.Minute)
	for time.Now().Before(deadline) {
		failed, err := e.rdb.HGet(ctx, e.keys.GroupMeta(contracts.Group(tenant, "junk")), "failedCount").Int()
		if err == nil && failed == n {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
	return fmt.Errorf("the %d junk jobs did not all fail within 2 minutes", n)
}
