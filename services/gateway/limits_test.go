package gateway_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/bulkaction/bulkaction/internal/config"
	"github.com/bulkaction/bulkaction/internal/pipelinetest"
	"github.com/bulkaction/bulkaction/internal/testkit"
	"github.com/bulkaction/bulkaction/pkg/contracts"
	"github.com/bulkaction/bulkaction/pkg/redisq"
)

// endlessBody streams valid NDJSON jobs until the reader stops taking them
// (or cap bytes, so a gateway without a limit still ends the test); written
// counts the bytes taken and done is closed when the writer stops.
func endlessBody(cap int64) (body io.Reader, written *atomic.Int64, done <-chan struct{}) {
	pr, pw := io.Pipe()
	written = new(atomic.Int64)
	ch := make(chan struct{})
	go func() {
		defer close(ch)
		pad := strings.Repeat("x", 900)
		for i := 0; written.Load() < cap; i++ {
			n, err := fmt.Fprintf(pw, `{"jobId":"e-%d","type":"noop","payload":{"pad":"%s"}}`+"\n", i, pad)
			written.Add(int64(n))
			if err != nil {
				return
			}
		}
		_ = pw.Close()
	}()
	return pr, written, ch
}

// TestEndlessUploadRefusedAtBodyLimit: an endless NDJSON upload is refused
// with 413 naming the limit once it goes past it, the gateway stops
// reading it, and its Idempotency-Key is free again.
func TestEndlessUploadRefusedAtBodyLimit(t *testing.T) {
	t.Parallel()
	const limit = 4 << 20
	s := newServer(t, func(c *config.Config) { c.GatewayMaxBodyBytes = limit })
	body, written, done := endlessBody(256 << 20)
	r := s.do("POST", "/v1/groups/endless/jobs", "acme", body, "Content-Type: application/x-ndjson", "Idempotency-Key: endless-1")
	if r.code != http.StatusRequestEntityTooLarge {
		t.Fatalf("%d %s after %d MB sent", r.code, r.body, written.Load()>>20)
	}
	p := r.problem(t)
	if len(p.Errors) != 1 || !strings.Contains(p.Errors[0].Limit, "BULKACTION_GATEWAY_MAX_BODY_BYTES") ||
		!strings.Contains(p.Errors[0].Limit, strconv.Itoa(limit)) {
		t.Errorf("errors %+v do not name the limit", p.Errors)
	}
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatalf("the gateway still reads the body: %d MB sent", written.Load()>>20)
	}
	if w := written.Load(); w > limit+16<<20 {
		t.Errorf("%d MB sent before the writer was stopped; the limit is %d MB", w>>20, limit>>20)
	}
	s.submitKey("acme", "endless", "endless-1", ndjson("e-", 3, "{}"))
}

// submitKey submits with an Idempotency-Key and wants 202, not a replay.
func (s *server) submitKey(who, gid, key, body string) {
	s.t.Helper()
	r := s.do("POST", "/v1/groups/"+gid+"/jobs", who, strings.NewReader(body), "Content-Type: application/x-ndjson", "Idempotency-Key: "+key)
	if r.code != http.StatusAccepted || r.header.Get("Idempotent-Replayed") != "" {
		s.t.Fatalf("submit %s with key %s: %d %s (replayed %q)", gid, key, r.code, r.body, r.header.Get("Idempotent-Replayed"))
	}
}

// TestContentLengthOverLimitRefusedAtOnce: a body announced longer than
// the limit is refused before a byte of it is read.
func TestContentLengthOverLimitRefusedAtOnce(t *testing.T) {
	t.Parallel()
	s := newServer(t, func(c *config.Config) { c.GatewayMaxBodyBytes = 1 << 20 })
	req, _ := http.NewRequest("POST", s.base+"/v1/groups/cl/jobs", strings.NewReader(strings.Repeat(" ", 2<<20)))
	req.Header.Set("Authorization", "Bearer "+s.keys["acme"])
	req.Header.Set("Content-Type", "application/x-ndjson")
	resp, err := s.httpc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Fatalf("%d, want 413", resp.StatusCode)
	}
}

// TestTooManyJobsRefused: one job more than the per-request limit is
// refused with 413 naming its line and the limit; nothing is submitted.
func TestTooManyJobsRefused(t *testing.T) {
	t.Parallel()
	s := newServer(t, func(c *config.Config) { c.GatewayMaxJobsPerRequest = 100 })
	r := s.do("POST", "/v1/groups/many/jobs", "acme", strings.NewReader(ndjson("m-", 101, "{}")), "Content-Type: application/x-ndjson")
	if r.code != http.StatusRequestEntityTooLarge {
		t.Fatalf("%d %s", r.code, r.body)
	}
	p := r.problem(t)
	if len(p.Errors) != 1 || p.Errors[0].Line != 101 || !strings.Contains(p.Errors[0].Limit, "BULKACTION_GATEWAY_MAX_JOBS_PER_REQUEST") {
		t.Errorf("errors %+v", p.Errors)
	}
	if r := s.do("GET", "/v1/groups/many", "acme", nil); r.code != http.StatusNotFound {
		t.Errorf("the refused request created its group: %d", r.code)
	}
	s.submit("acme", "many", "", ndjson("m-", 100, "{}"))
}

// TestStalledBodyCutOff: a body that stops sending is cut off after the
// idle timeout; its Idempotency-Key can be used again and its temporary
// file is gone.
func TestStalledBodyCutOff(t *testing.T) {
	t.Parallel()
	spool := t.TempDir()
	s := newServer(t, func(c *config.Config) {
		c.GatewayBodyIdleTimeout = 500 * time.Millisecond
		c.GatewaySpoolDir = spool
	})
	s.st.Gateway.SetMemorySpool(1) // every message goes to the temporary file
	pr, pw := io.Pipe()
	defer pw.Close()
	go func() {
		_, _ = io.WriteString(pw, ndjson("s-", 1500, "{}")) // more than one message
		// then nothing: the body stalls
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "POST", s.base+"/v1/groups/stalled/jobs", pr)
	req.Header.Set("Authorization", "Bearer "+s.keys["acme"])
	req.Header.Set("Content-Type", "application/x-ndjson")
	req.Header.Set("Idempotency-Key", "stalled-1")
	start := time.Now()
	resp, err := http.DefaultClient.Do(req)
	if err == nil {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusRequestTimeout {
			t.Fatalf("%d %s, want 408", resp.StatusCode, b)
		}
	} else if ctx.Err() != nil {
		t.Fatalf("the stalled body was not cut off in %s", time.Since(start))
	}
	t.Logf("cut off after %s", time.Since(start).Round(time.Millisecond))
	if files, _ := os.ReadDir(spool); len(files) != 0 {
		t.Errorf("temporary files left: %v", files)
	}
	s.submitKey("acme", "stalled", "stalled-1", ndjson("s-", 3, "{}"))
}

// TestTenantRequestRate: a tenant over its request rate is answered 429
// with Retry-After and the RateLimit headers; another tenant and admin keys
// are not affected; a tenant's own limit replaces the default.
func TestTenantRequestRate(t *testing.T) {
	t.Parallel()
	s := newServer(t, func(c *config.Config) { c.GatewayTenantRequestRate = 1 }) // 10 per 10 s
	var last reply
	ok := 0
	for i := 0; i < 15; i++ {
		last = s.do("GET", "/v1/groups", "acme", nil)
		if last.code != http.StatusOK {
			break
		}
		ok++
		if got := last.header.Get("RateLimit-Policy"); got != `"requests";q=10;w=10` {
			t.Fatalf("RateLimit-Policy %q", got)
		}
		if !strings.HasPrefix(last.header.Get("RateLimit"), `"requests";r=`) {
			t.Fatalf("RateLimit %q", last.header.Get("RateLimit"))
		}
	}
	if last.code != http.StatusTooManyRequests || ok < 9 || ok > 11 {
		t.Fatalf("after %d requests: %d %s", ok, last.code, last.body)
	}
	p := last.problem(t)
	if len(p.Errors) != 1 || p.Errors[0].Field != string(redisq.DoorRequestRate) {
		t.Errorf("errors %+v", p.Errors)
	}
	if ra, err := strconv.Atoi(last.header.Get("Retry-After")); err != nil || ra < 1 || ra > 2 {
		t.Errorf("Retry-After %q", last.header.Get("Retry-After"))
	}
	if got := last.header.Get("RateLimit"); !strings.HasPrefix(got, `"requests";r=0;t=`) {
		t.Errorf("RateLimit %q", got)
	}
	for _, who := range []string{"hooli", "*"} {
		q := ""
		if who == "*" {
			q = "?tenant=acme"
		}
		if r := s.do("GET", "/v1/groups"+q, who, nil); r.code != http.StatusOK {
			t.Errorf("%s: %d %s", who, r.code, r.body)
		}
	}
	if err := s.st.Deps.Queue.SetTenantDoorLimit(context.Background(), "acme", redisq.DoorRequestRate, 1000); err != nil {
		t.Fatal(err)
	}
	// A replica that refused the tenant a moment ago refuses it by itself
	// for at most a quarter second more.
	time.Sleep(300 * time.Millisecond)
	r := s.do("GET", "/v1/groups", "acme", nil)
	if r.code != http.StatusOK || r.header.Get("RateLimit-Policy") != `"requests";q=10000;w=10` {
		t.Errorf("with its own limit: %d %q", r.code, r.header.Get("RateLimit-Policy"))
	}
}

// TestTenantJobRate: a request may take more than the job rate's window;
// the tenant's next jobs request then waits (429) until it is paid off.
func TestTenantJobRate(t *testing.T) {
	t.Parallel()
	s := newServer(t, func(c *config.Config) { c.GatewayTenantJobRate = 10 }) // 100 per 10 s
	s.submit("acme", "jr", "", ndjson("a-", 150, "{}"))
	r := s.do("POST", "/v1/groups/jr/jobs", "acme", strings.NewReader(ndjson("b-", 1, "{}")), "Content-Type: application/x-ndjson")
	if r.code != http.StatusTooManyRequests {
		t.Fatalf("%d %s", r.code, r.body)
	}
	p := r.problem(t)
	if len(p.Errors) != 1 || p.Errors[0].Field != string(redisq.DoorJobRate) {
		t.Errorf("errors %+v", p.Errors)
	}
	if ra, err := strconv.Atoi(r.header.Get("Retry-After")); err != nil || ra < 4 || ra > 7 {
		t.Errorf("Retry-After %q, want about 5 s (50 jobs over at 10/s)", r.header.Get("Retry-After"))
	}
	if !strings.Contains(r.header.Get("RateLimit-Policy"), `"jobs";q=100;qu="jobs";w=10`) {
		t.Errorf("RateLimit-Policy %q", r.header.Get("RateLimit-Policy"))
	}
	s.submit("hooli", "jr", "", ndjson("a-", 50, "{}"))
	// the group appears once ingest has taken its jobs from SUBMIT: until
	// then a read finds it not found, never refused
	testkit.WaitFor(t, "acme's group read", 30*time.Second, func() bool {
		r := s.do("GET", "/v1/groups/jr", "acme", nil)
		if r.code != http.StatusOK && r.code != http.StatusNotFound {
			t.Fatalf("reads are not limited by the job rate: %d %s", r.code, r.body)
		}
		return r.code == http.StatusOK
	})
}

// TestTenantByteRate: the bytes of a tenant's jobs requests are charged to
// its byte rate whatever the number of jobs: a request of few large jobs
// that goes past the window leaves the tenant in debt, and its next jobs
// request is refused (429) until it is paid off; reads and other tenants
// pass.
func TestTenantByteRate(t *testing.T) {
	t.Parallel()
	s := newServer(t, func(c *config.Config) { c.GatewayTenantByteRate = 100 << 10 }) // 1,000 KiB per 10 s
	big := `{"pad":"` + strings.Repeat("x", 10<<10) + `"}`
	s.submit("acme", "br", "", ndjson("a-", 150, big)) // about 1,500 KiB: 500 KiB past the window
	r := s.do("POST", "/v1/groups/br/jobs", "acme", strings.NewReader(ndjson("b-", 1, "{}")), "Content-Type: application/x-ndjson")
	if r.code != http.StatusTooManyRequests {
		t.Fatalf("%d %s", r.code, r.body)
	}
	p := r.problem(t)
	if len(p.Errors) != 1 || p.Errors[0].Field != string(redisq.DoorByteRate) {
		t.Errorf("errors %+v", p.Errors)
	}
	if ra, err := strconv.Atoi(r.header.Get("Retry-After")); err != nil || ra < 4 || ra > 7 {
		t.Errorf("Retry-After %q, want about 5 s (500 KiB over at 100 KiB/s)", r.header.Get("Retry-After"))
	}
	if !strings.Contains(r.header.Get("RateLimit-Policy"), `"bytes";q=1024000;qu="content-bytes";w=10`) {
		t.Errorf("RateLimit-Policy %q", r.header.Get("RateLimit-Policy"))
	}
	s.submit("hooli", "br", "", ndjson("a-", 50, big))
	if r := s.do("GET", "/v1/groups", "acme", nil); r.code != http.StatusOK {
		t.Errorf("reads are not limited by the byte rate: %d", r.code)
	}
}

// TestTenantSSEStreamCap: a tenant's streams past its cap are refused with
// 429; another tenant's are not; a closed stream gives its slot back.
func TestTenantSSEStreamCap(t *testing.T) {
	t.Parallel()
	s := newServer(t, func(c *config.Config) { c.GatewayTenantSSEStreams = 2 })
	s.submit("acme", "watched", "", ndjson("w-", 2, "{}"))
	s.submit("hooli", "watched", "", ndjson("w-", 2, "{}"))
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
	r := s.do("GET", "/v1/groups/watched/events", "acme", nil)
	if r.code != http.StatusTooManyRequests {
		t.Fatalf("third stream: %d %s", r.code, r.body)
	}
	p := r.problem(t)
	if len(p.Errors) != 1 || p.Errors[0].Field != string(redisq.DoorSSEStreams) || r.header.Get("Retry-After") == "" {
		t.Errorf("errors %+v, Retry-After %q", p.Errors, r.header.Get("Retry-After"))
	}
	if !strings.Contains(r.header.Get("RateLimit-Policy"), `"event-streams";q=2;qu="concurrent-requests"`) {
		t.Errorf("RateLimit-Policy %q", r.header.Get("RateLimit-Policy"))
	}
	if _, resp := s.sse(ctx, "hooli", "watched", ""); resp.StatusCode != http.StatusOK {
		t.Errorf("another tenant's stream: %d", resp.StatusCode)
	}
	close1()
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, stop := context.WithCancel(ctx)
		_, resp := s.sse(c, "acme", "watched", "")
		stop()
		if resp.StatusCode == http.StatusOK {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a closed stream's slot did not come back: %d", resp.StatusCode)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestSSEClientThatStopsReadingIsDropped: a stream replayed from the start
// of a group with many events, to a client that reads nothing, ends once a
// write has waited for the write timeout; the stream's slot comes back.
func TestSSEClientThatStopsReadingIsDropped(t *testing.T) {
	t.Parallel()
	s := newServer(t, func(c *config.Config) {
		c.GatewaySSEWriteTimeout = time.Second
		c.GatewayTenantSSEStreams = 1
	})
	s.submit("acme", "loud", "", ndjson("l-", 1, "{}"))
	s.waitState("acme", "loud", "RUNNING")
	// 16 MB of events: more than the sockets' buffers hold.
	ref := contracts.GroupRef{Tenant: "acme", ID: "loud"}
	ctx := context.Background()
	notice := strings.Repeat("n", 8<<10)
	for i := 0; i < 2000; i++ {
		ev := contracts.GroupEvent{V: contracts.Version, Tenant: ref.Tenant, GroupID: ref.ID, State: contracts.StateRunning,
			Jobs: 1, At: time.Now().UTC(), Notice: notice}
		b, _ := json.Marshal(ev)
		if _, err := s.st.Deps.JS.PublishAsync(s.st.Deps.Names.Events(ref), b); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case <-s.st.Deps.JS.PublishAsyncComplete():
	case <-time.After(30 * time.Second):
		t.Fatal("events not published")
	}
	d := net.Dialer{Control: func(_, _ string, c syscall.RawConn) error {
		return c.Control(func(fd uintptr) { _ = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096) })
	}}
	conn, err := d.Dial("tcp", strings.TrimPrefix(s.base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "GET /v1/groups/loud/events HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nLast-Event-ID: 0\r\n\r\n", s.keys["acme"])
	sse := s.st.Deps.Metrics.GatewaySSE
	testkit.WaitFor(t, "the stream to open", 10*time.Second, func() bool { return gauge(sse) == 1 })
	start := time.Now()
	testkit.WaitFor(t, "the stream of a client that reads nothing to end", 30*time.Second, func() bool {
		return gauge(sse) == 0
	})
	t.Logf("dropped after %s", time.Since(start).Round(time.Millisecond))
	c, stop := context.WithCancel(ctx)
	defer stop()
	if _, resp := s.sse(c, "acme", "loud", ""); resp.StatusCode != http.StatusOK {
		t.Errorf("the dropped stream's slot did not come back: %d", resp.StatusCode)
	}
}

// gauge reads a gauge's value.
func gauge(g interface{ Write(*dto.Metric) error }) float64 {
	var m dto.Metric
	_ = g.Write(&m)
	return m.GetGauge().GetValue()
}

// TestTenantConcurrentRequests: while a tenant's one allowed request runs
// (an upload in progress), its next request is refused with 429; another
// tenant's is not; the slot comes back when the upload ends.
func TestTenantConcurrentRequests(t *testing.T) {
	t.Parallel()
	s := newServer(t, func(c *config.Config) { c.GatewayTenantConcurrentReqs = 1 })
	pr, pw := io.Pipe()
	go func() { _, _ = io.WriteString(pw, ndjson("c-", 5, "{}")) }()
	done := make(chan reply, 1)
	go func() {
		done <- s.do("POST", "/v1/groups/conc/jobs", "acme", pr, "Content-Type: application/x-ndjson")
	}()
	rdb, keys := pipelinetest.Raw(s.st)
	held := keys.DoorState("acme", "concurrent")
	testkit.WaitFor(t, "the upload to hold the tenant's slot", 10*time.Second, func() bool {
		n, _ := rdb.ZCard(context.Background(), held).Result()
		return n == 1
	})
	r := s.do("GET", "/v1/groups", "acme", nil)
	if r.code != http.StatusTooManyRequests {
		t.Fatalf("while the upload runs: %d %s", r.code, r.body)
	}
	p := r.problem(t)
	if len(p.Errors) != 1 || p.Errors[0].Field != string(redisq.DoorConcurrentRequests) || r.header.Get("Retry-After") != "1" {
		t.Errorf("errors %+v, Retry-After %q", p.Errors, r.header.Get("Retry-After"))
	}
	if r := s.do("GET", "/v1/groups", "hooli", nil); r.code != http.StatusOK {
		t.Errorf("another tenant: %d %s", r.code, r.body)
	}
	_ = pw.Close()
	if r := <-done; r.code != http.StatusAccepted {
		t.Fatalf("the upload: %d %s", r.code, r.body)
	}
	if r := s.do("GET", "/v1/groups", "acme", nil); r.code != http.StatusOK {
		t.Errorf("after the upload: %d %s", r.code, r.body)
	}
}
