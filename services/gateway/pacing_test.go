package gateway_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/bulkaction/bulkaction/internal/config"
	"github.com/bulkaction/bulkaction/internal/testkit"
	"github.com/bulkaction/bulkaction/pkg/redisq"
	"github.com/bulkaction/bulkaction/services/gateway"
)

// TestJobRatePacesReading: a tenant's jobs are charged to its job rate as
// the gateway reads them, accepted or not, and reading waits once the
// tenant's burst is spent. An upload refused for its size (413) has still
// spent the rate, so a tenant cannot make the gateway parse jobs faster
// than its job rate by sending requests that are refused.
func TestJobRatePacesReading(t *testing.T) {
	t.Parallel()
	s := newServer(t, func(c *config.Config) {
		c.GatewayTenantJobRate = 1000 // 10,000 at once
		c.GatewayMaxJobsPerRequest = 12_000
	})
	start := time.Now()
	r := s.do("POST", "/v1/groups/paced/jobs", "acme", strings.NewReader(ndjson("p-", 12_001, "{}")), "Content-Type: application/x-ndjson")
	took := time.Since(start)
	if r.code != http.StatusRequestEntityTooLarge {
		t.Fatalf("%d %s", r.code, r.body)
	}
	// 12,000 jobs read at 1,000/s past a burst of 10,000: at least 2 s of
	// waiting, less what reading itself took.
	if took < 1500*time.Millisecond {
		t.Errorf("12,001 jobs read in %s: reading did not wait for the job rate", took)
	}
	// The refused upload spent the rate: the tenant's next request of
	// more than what is left is read at the rate too.
	start = time.Now()
	s.submit("acme", "paced", "", ndjson("q-", 4000, "{}"))
	if took := time.Since(start); took < time.Second {
		t.Errorf("4,000 more jobs right after read in %s: the refused upload's jobs were not charged", took)
	}
	// Another tenant is not held back.
	s.submit("hooli", "paced", "", ndjson("h-", 100, "{}"))
}

// doorCalls is how many times the gateway ran the door script.
func doorCalls(t *testing.T, s *server) uint64 {
	t.Helper()
	h, err := s.st.Metrics.LuaDuration.GetMetricWithLabelValues("door")
	if err != nil {
		t.Fatal(err)
	}
	var m dto.Metric
	if err := h.(prometheus.Metric).Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetHistogram().GetSampleCount()
}

// TestRefusedTenantCostsRedisLittle: once a rate refused a tenant, the
// gateway refuses its next requests by itself until the refusal's time is
// up (Redis is not asked once per request of a flood), with the same 429
// and headers; then the tenant passes again.
func TestRefusedTenantCostsRedisLittle(t *testing.T) {
	t.Parallel()
	s := newServer(t, func(c *config.Config) { c.GatewayTenantRequestRate = 1 }) // 10 per 10 s
	for i := 0; ; i++ {
		if r := s.do("GET", "/v1/groups", "acme", nil); r.code == http.StatusTooManyRequests {
			break
		}
		if i > 20 {
			t.Fatal("never refused")
		}
	}
	before := doorCalls(t, s)
	start := time.Now()
	var (
		last   reply
		passed int
		mu     sync.Mutex
		wg     sync.WaitGroup
	)
	for range 20 { // as a client looping on refusals over 20 connections
		wg.Go(func() {
			for range 4 {
				r := s.do("GET", "/v1/groups", "acme", nil)
				mu.Lock()
				switch r.code {
				case http.StatusTooManyRequests:
					last = r
				case http.StatusOK: // the rate's one request a second
					passed++
				default:
					t.Errorf("%d %s", r.code, r.body)
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	took := time.Since(start)
	if most := int(took/time.Second) + 1; passed > most {
		t.Errorf("%d of 80 requests passed in %s at 1 a second", passed, took)
	}
	// Redis is asked once per refusal period (250 ms); after a request
	// passes, the requests already under way ask too (20 connections).
	if calls, most := doorCalls(t, s)-before, uint64(took/(250*time.Millisecond))+1+20*uint64(passed+1); calls > most {
		t.Errorf("80 requests in %s ran the door script %d times (at most %d)", took.Round(time.Millisecond), calls, most)
	}
	// Refusals given by the gateway itself are held a second: the looping
	// client's 4 requests a connection took at least 3 holds' time.
	if took < 3*time.Second {
		t.Errorf("80 requests over 20 connections answered in %s: refusals were not held", took)
	}
	if p := last.problem(t); len(p.Errors) != 1 || p.Errors[0].Field != string(redisq.DoorRequestRate) {
		t.Errorf("errors %+v", p.Errors)
	}
	ra, err := strconv.Atoi(last.header.Get("Retry-After"))
	if err != nil || ra < 1 || ra > 2 {
		t.Fatalf("Retry-After %q", last.header.Get("Retry-After"))
	}
	if got := last.header.Get("RateLimit"); !strings.HasPrefix(got, `"requests";r=0;t=`) {
		t.Errorf("RateLimit %q", got)
	}
	if got := last.header.Get("RateLimit-Policy"); got != `"requests";q=10;w=10` {
		t.Errorf("RateLimit-Policy %q", got)
	}
	if r := s.do("GET", "/v1/groups", "hooli", nil); r.code != http.StatusOK {
		t.Errorf("another tenant: %d", r.code)
	}
	time.Sleep(time.Duration(ra) * time.Second)
	if r := s.do("GET", "/v1/groups", "acme", nil); r.code != http.StatusOK {
		t.Errorf("after Retry-After: %d %s", r.code, r.body)
	}
}

// TestFloodOfStreamsCostsRedisLittle: a tenant that keeps asking for event
// streams past its cap, over many connections at once, is refused by the
// gateway itself after Redis refused it once (about one door call per
// refusal period, not one per request); a stream it closes frees its slot
// for its next one at once.
func TestFloodOfStreamsCostsRedisLittle(t *testing.T) {
	t.Parallel()
	s := newServer(t, func(c *config.Config) { c.GatewayTenantSSEStreams = 2 })
	s.submit("acme", "watched", "", ndjson("w-", 2, "{}"))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ctx1, close1 := context.WithCancel(ctx)
	for i, c := range []context.Context{ctx1, ctx} {
		ch, resp := s.sse(c, "acme", "watched", "")
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("stream %d: %d", i+1, resp.StatusCode)
		}
		<-ch
	}
	before := doorCalls(t, s)
	start := time.Now()
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		refused int
	)
	for range 16 {
		wg.Go(func() {
			for range 4 {
				r := s.do("GET", "/v1/groups/watched/events", "acme", nil)
				mu.Lock()
				if r.code == http.StatusTooManyRequests && r.problem(t).Errors[0].Field == string(redisq.DoorSSEStreams) {
					refused++
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	took := time.Since(start)
	if refused != 64 {
		t.Fatalf("%d of 64 stream requests refused for the stream cap", refused)
	}
	// One call per refusal period (250 ms) and a few more for the requests
	// that were already asking when the first refusal came back.
	if calls, most := doorCalls(t, s)-before, uint64(took/(250*time.Millisecond))+1+16; calls > most {
		t.Errorf("64 refused stream requests in %s ran the door script %d times (at most %d)", took.Round(time.Millisecond), calls, most)
	}
	close1()
	testkit.WaitFor(t, "a new stream once one closed", 5*time.Second, func() bool {
		c, stop := context.WithCancel(ctx)
		defer stop()
		_, resp := s.sse(c, "acme", "watched", "")
		return resp.StatusCode == http.StatusOK
	})
}

// TestRefusalHeldForASecond: a tenant that sends again right after a 429,
// before its Retry-After, gets its next 429 from the gateway itself, held
// for a second (the least Retry-After: the Server-Timing stage hold) and
// released then; the refusal that came from the shared limits, another
// tenant's requests meanwhile and the tenant's request sent after waiting
// its Retry-After are answered without a hold.
func TestRefusalHeldForASecond(t *testing.T) {
	t.Parallel()
	s := newServer(t, func(c *config.Config) { c.GatewayTenantRequestRate = 1 }) // 10 per 10 s
	hasHold := func(r reply) (float64, bool) {
		ms, ok := serverTiming(t, r.header.Get("Server-Timing"))["hold"]
		return ms, ok
	}
	var r reply
	for i := 0; ; i++ {
		if r = s.do("GET", "/v1/groups", "acme", nil); r.code == http.StatusTooManyRequests {
			break
		}
		if i > 20 {
			t.Fatal("never refused")
		}
	}
	if _, held := hasHold(r); held {
		t.Errorf("the refusal of the shared limits was held: Server-Timing %q", r.header.Get("Server-Timing"))
	}
	other := make(chan reply, 1)
	var took time.Duration
	for i := 0; ; i++ { // right after a refusal: within the replica's refusal memory
		if i == 0 {
			go func() { time.Sleep(100 * time.Millisecond); other <- s.do("GET", "/v1/groups", "hooli", nil) }()
		}
		start := time.Now()
		r = s.do("GET", "/v1/groups", "acme", nil)
		took = time.Since(start)
		if r.code != http.StatusTooManyRequests {
			t.Fatalf("%d %s", r.code, r.body)
		}
		if _, held := hasHold(r); held || i > 5 {
			break
		}
	}
	ms, held := hasHold(r)
	if !held || ms < 1000 {
		t.Fatalf("a refusal right after another: Server-Timing %q, want a hold of 1 s", r.header.Get("Server-Timing"))
	}
	if took > 5*time.Second {
		t.Errorf("a held refusal answered after %s", took)
	}
	if r.header.Get("Connection") == "close" {
		t.Error("a held refusal closes its connection")
	}
	ra, err := strconv.Atoi(r.header.Get("Retry-After"))
	if err != nil || ra < 1 {
		t.Fatalf("Retry-After %q", r.header.Get("Retry-After"))
	}
	if o := <-other; o.code != http.StatusOK {
		t.Errorf("another tenant during the hold: %d %s", o.code, o.body)
	} else if _, held := hasHold(o); held {
		t.Errorf("another tenant's request was held: %q", o.header.Get("Server-Timing"))
	}
	time.Sleep(time.Duration(ra) * time.Second)
	r = s.do("GET", "/v1/groups", "acme", nil)
	if _, held := hasHold(r); r.code != http.StatusOK || held {
		t.Errorf("after Retry-After: %d, Server-Timing %q", r.code, r.header.Get("Server-Timing"))
	}
}

// TestStalledUploadHoldsNoTurn: a tenant's jobs requests take turns to be
// parsed on a replica, but a request whose body stalls gives its turn back
// while it waits for the network: as many stalled uploads of a tenant as it
// has turns do not keep its next request from being read and accepted.
func TestStalledUploadHoldsNoTurn(t *testing.T) {
	t.Parallel()
	s := newServer(t, func(c *config.Config) { c.GatewayBodyIdleTimeout = 5 * time.Minute })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for i := range gateway.ReadersPerTenant() {
		pr, pw := io.Pipe()
		defer pw.Close()
		req, err := http.NewRequestWithContext(ctx, "POST", s.base+"/v1/groups/stalled/jobs", pr)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+s.keys["acme"])
		req.Header.Set("Content-Type", "application/x-ndjson")
		go func() {
			if resp, err := http.DefaultClient.Do(req); err == nil {
				resp.Body.Close()
			}
		}()
		if _, err := io.WriteString(pw, ndjson(fmt.Sprintf("s%d-", i), 10, "{}")); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(300 * time.Millisecond) // the gateway reads the 10 jobs of each, then waits for more
	rctx, rcancel := context.WithTimeout(ctx, 20*time.Second)
	defer rcancel()
	req, _ := http.NewRequestWithContext(rctx, "POST", s.base+"/v1/groups/next/jobs", strings.NewReader(ndjson("n-", 100, "{}")))
	req.Header.Set("Authorization", "Bearer "+s.keys["acme"])
	req.Header.Set("Content-Type", "application/x-ndjson")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("the tenant's next request while its uploads stall: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("the tenant's next request while its uploads stall: %d", resp.StatusCode)
	}
}
