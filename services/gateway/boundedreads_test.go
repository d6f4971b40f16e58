package gateway_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"

	"github.com/bulkaction/bulkaction/internal/pipelinetest"
	"github.com/bulkaction/bulkaction/internal/testkit"
	"github.com/bulkaction/bulkaction/pkg/contracts"
	"github.com/bulkaction/bulkaction/services/gateway"
)

// bigPayload is a sleep payload of size bytes that fails for good.
func bigPayload(i, size int) string {
	head := fmt.Sprintf(`{"ms":1,"permanentFailRate":1,"i":%d,"pad":"`, i)
	return head + strings.Repeat("x", size-len(head)-2) + `"}`
}

// TestFailuresBoundedReads: a listing of failures with large payloads
// holds each payload's size and first bytes only, and reads no more (all
// 30 on one page, where their payloads are past
// redisq.MaxFailuresPageBytes); GET …/failures/{jobId}
// reads one whole; retry-failed resubmits every failure once, whole, a
// page at a time: its first jobs are published before its last page is
// read (the gateway never holds every failure at once).
func TestFailuresBoundedReads(t *testing.T) {
	t.Parallel()
	s := newServer(t, nil)
	const n, size = 30, 200 << 10 // 6 MB of payloads: two pages
	var body strings.Builder
	payloads := map[string]string{}
	for i := 0; i < n; i++ {
		id := fmt.Sprintf("big%d", i)
		payloads[id] = bigPayload(i, size)
		fmt.Fprintf(&body, `{"jobId":"%s","type":"sleep","payload":%s}`+"\n", id, payloads[id])
	}
	s.submit("acme", "big", "?total="+strconv.Itoa(n), body.String())
	if v := s.waitState("acme", "big", "COMPLETED"); v.Failed != n {
		t.Fatalf("group %+v", v)
	}

	// The listing: sizes and heads, a page bounded in bytes.
	seen := map[string]bool{}
	cursor, pages := "", 0
	for {
		r := s.do("GET", "/v1/groups/big/failures?limit=1000&cursor="+cursor, "acme", nil)
		if r.code != http.StatusOK {
			t.Fatalf("failures: %d %s", r.code, r.body)
		}
		pages++
		if len(r.body) > 1000*(gateway.FailurePayloadHead+2048) {
			t.Errorf("a page of %d bytes", len(r.body))
		}
		var fl gateway.FailureList
		r.json(t, &fl)
		if pages == 1 && (fl.Next != nil || len(fl.Failures) != n) {
			t.Errorf("first page: %d failures of %d bytes, next %v: the listing read more than the payloads' heads", len(fl.Failures), size, fl.Next)
		}
		for _, f := range fl.Failures {
			seen[f.JobID] = true
			if f.Payload != nil || !f.PayloadTruncated || f.PayloadBytes != size || len(f.PayloadHead) > gateway.FailurePayloadHead ||
				!strings.HasPrefix(payloads[f.JobID], f.PayloadHead) || len(f.PayloadHead) < gateway.FailurePayloadHead-3 {
				t.Errorf("listed %s: payload %d bytes, truncated %v, payloadBytes %d, head %d bytes", f.JobID, len(f.Payload),
					f.PayloadTruncated, f.PayloadBytes, len(f.PayloadHead))
			}
		}
		if fl.Next == nil {
			break
		}
		cursor = *fl.Next
	}
	if len(seen) != n {
		t.Errorf("%d failures listed over %d pages, want %d", len(seen), pages, n)
	}

	// One failure whole.
	r := s.do("GET", "/v1/groups/big/failures/big7", "acme", nil)
	if r.code != http.StatusOK {
		t.Fatalf("failure: %d %s", r.code, r.body)
	}
	var one gateway.FailureView
	r.json(t, &one)
	if string(one.Payload) != payloads["big7"] || one.PayloadTruncated || one.PayloadBytes != size || one.Type != "sleep" || one.Error == "" {
		t.Errorf("big7: %d payload bytes, truncated %v, %+v", len(one.Payload), one.PayloadTruncated, one.Error)
	}
	if r := s.do("GET", "/v1/groups/big/failures/nope", "acme", nil); r.code != http.StatusNotFound {
		t.Errorf("a job that did not fail: %d %s", r.code, r.body)
	}
	if r := s.do("GET", "/v1/groups/big/failures/big7", "hooli", nil); r.code != http.StatusNotFound {
		t.Errorf("another tenant's failure: %d %s", r.code, r.body)
	}
	if r := s.do("GET", "/v1/groups/big/failures/a%20b", "acme", nil); r.code != http.StatusBadRequest {
		t.Errorf("a bad job id: %d %s", r.code, r.body)
	} else if p := r.problem(t); len(p.Errors) != 1 || p.Errors[0].Field != "jobId" {
		t.Errorf("a bad job id: %+v", p)
	}

	// retry-failed, watched: when Redis ran each page's read, and when
	// NATS stored each submission of the new group.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rdb, keys := pipelinetest.Raw(s.st)
	failuresKey := strconv.Quote(keys.GroupFailures(contracts.Group("acme", "big")))
	mon := monitor(t, s.cfg.RedisURL)
	r = s.do("POST", "/v1/groups/big/retry-failed", "acme", strings.NewReader(`{"groupId":"big-again"}`))
	if r.code != http.StatusAccepted {
		t.Fatalf("retry-failed: %d %s", r.code, r.body)
	}
	var rr gateway.RetryResponse
	r.json(t, &rr)
	if rr.Jobs != n || rr.Skipped != 0 {
		t.Fatalf("retry %+v", rr)
	}
	var reads []time.Time
	for _, l := range mon.until(rdb) {
		low := strings.ToLower(l)
		if !strings.Contains(l, failuresKey) || !(strings.Contains(low, `"evalsha"`) || strings.Contains(low, `"eval"`)) {
			continue
		}
		sec, err := strconv.ParseFloat(strings.Fields(l)[0], 64)
		if err != nil {
			t.Fatalf("monitor line %q: %v", l, err)
		}
		reads = append(reads, time.UnixMicro(int64(sec*1e6)))
	}
	if len(reads) < 2 {
		t.Fatalf("retry-failed read the failures in %d calls, want 2 or more pages", len(reads))
	}
	names := s.st.Deps.Names
	cons, err := s.st.Deps.JS.OrderedConsumer(ctx, names.StreamSubmit(), jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{names.Submit(contracts.Group("acme", "big-again"))}})
	if err != nil {
		t.Fatal(err)
	}
	var first time.Time
	jobs := 0
	for jobs < n {
		m, err := cons.Next(jetstream.FetchMaxWait(10 * time.Second))
		if err != nil {
			t.Fatalf("the retry group's submissions after %d jobs: %v", jobs, err)
		}
		md, err := m.Metadata()
		if err != nil {
			t.Fatal(err)
		}
		if first.IsZero() {
			first = md.Timestamp
		}
		jobs += strings.Count(string(m.Data()), `"jobId"`)
	}
	if last := reads[len(reads)-1]; !first.Before(last) {
		t.Errorf("the retry group's first jobs were published at %s, after the last page was read at %s: every failure was held at once",
			first.Format(time.StampMicro), last.Format(time.StampMicro))
	}
	v := s.waitState("acme", "big-again", "COMPLETED")
	if v.Jobs != n || v.Failed != n {
		t.Errorf("retry group %+v", v)
	}
	r = s.do("GET", "/v1/groups/big-again/failures/big11", "acme", nil)
	r.json(t, &one)
	if string(one.Payload) != payloads["big11"] {
		t.Errorf("retried big11: %d payload bytes, want %d", len(one.Payload), size)
	}
}

// redisMonitor is a MONITOR connection to Redis: every command the server
// runs, with the time it ran it.
type redisMonitor struct {
	t     *testing.T
	conn  net.Conn
	lines chan string
}

// monitor opens a MONITOR connection to the Redis server at url.
func monitor(t *testing.T, url string) *redisMonitor {
	t.Helper()
	opt, err := redis.ParseURL(url)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := net.Dial("tcp", opt.Addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	if _, err := io.WriteString(conn, "MONITOR\r\n"); err != nil {
		t.Fatal(err)
	}
	rd := bufio.NewReaderSize(conn, 1<<20)
	if l, err := rd.ReadString('\n'); err != nil || !strings.HasPrefix(l, "+OK") {
		t.Fatalf("MONITOR: %q %v", l, err)
	}
	m := &redisMonitor{t: t, conn: conn, lines: make(chan string, 1024)}
	go func() {
		defer close(m.lines)
		for {
			l, err := rd.ReadString('\n')
			if err != nil {
				return
			}
			m.lines <- strings.TrimPrefix(strings.TrimRight(l, "\r\n"), "+")
		}
	}()
	return m
}

// until returns the lines seen until now: it sends a marker with c and
// reads up to it, then closes the connection.
func (m *redisMonitor) until(c redis.UniversalClient) []string {
	m.t.Helper()
	marker := fmt.Sprintf("monitor-marker-%d", time.Now().UnixNano())
	if err := c.Echo(context.Background(), marker).Err(); err != nil {
		m.t.Fatal(err)
	}
	var out []string
	timeout := time.After(time.Minute)
	for {
		select {
		case l, ok := <-m.lines:
			if !ok {
				m.t.Fatal("the MONITOR connection ended before its marker")
			}
			if strings.Contains(l, marker) {
				_ = m.conn.Close()
				return out
			}
			out = append(out, l)
		case <-timeout:
			m.t.Fatal("no MONITOR marker within a minute")
		}
	}
}

// TestListGroupsFullViewBounded: a page of GET /v1/groups?view=full holds
// at most MaxFullViewLimit groups (each one a full status read); a larger
// limit is refused naming the limit, and the summary view keeps its own.
func TestListGroupsFullViewBounded(t *testing.T) {
	t.Parallel()
	s := newServer(t, nil)
	for i := 0; i < 3; i++ {
		s.submit("globex", fmt.Sprintf("fv%d", i), "?total=1", ndjson("x", 1, `{"ms":1}`))
	}
	over := strconv.Itoa(gateway.MaxFullViewLimit + 1)
	r := s.do("GET", "/v1/groups?view=full&limit="+over, "globex", nil)
	if r.code != http.StatusBadRequest {
		t.Fatalf("view=full&limit=%s: %d %s", over, r.code, r.body)
	}
	p := r.problem(t)
	want := fmt.Sprintf("1 to %d with view=full", gateway.MaxFullViewLimit)
	if len(p.Errors) != 1 || p.Errors[0].Field != "limit" || p.Errors[0].Limit != want {
		t.Errorf("view=full&limit=%s: %+v, want field limit, limit %q", over, p.Errors, want)
	}
	testkit.WaitFor(t, "three groups", 30*time.Second, func() bool {
		var l gateway.GroupList
		r := s.do("GET", "/v1/groups?view=full&limit="+strconv.Itoa(gateway.MaxFullViewLimit), "globex", nil)
		if r.code != http.StatusOK {
			t.Fatalf("view=full at the limit: %d %s", r.code, r.body)
		}
		r.json(t, &l)
		for _, g := range l.Groups {
			if g.Status == nil {
				t.Fatalf("a full view without status: %+v", g)
			}
		}
		return len(l.Groups) == 3
	})
	if r := s.do("GET", "/v1/groups?limit=1000", "globex", nil); r.code != http.StatusOK {
		t.Errorf("summary view at 1000: %d %s", r.code, r.body)
	}
}

// TestOverviewSharedAndScoped: a tenant's overview and tenants list show
// its own figures and the worker types of its own jobs, never another
// tenant's name or types; and however many viewers poll the overview and
// the tenants list, of whatever scope, Redis is read about once per
// reading period, as for one viewer.
func TestOverviewSharedAndScoped(t *testing.T) {
	t.Parallel()
	s := newServer(t, nil)
	ctx := context.Background()
	q := s.st.Deps.Queue
	// hooli's jobs are of a type only it uses, which a worker serves
	if err := q.AnnounceTypes(ctx, []string{"hooli-secret"}, time.Hour); err != nil {
		t.Fatal(err)
	}
	s.submit("acme", "mine", "?total=2", ndjson("a", 2, `{"ms":1}`))
	r := s.do("POST", "/v1/groups/theirs/jobs", "hooli", strings.NewReader(`{"jobId":"h1","type":"hooli-secret","payload":{}}`+"\n"),
		"Content-Type: application/x-ndjson")
	if r.code != http.StatusAccepted {
		t.Fatalf("hooli's submit: %d %s", r.code, r.body)
	}
	s.waitState("acme", "mine", "COMPLETED")
	s.group("hooli", "theirs")

	types := func(who, query string) (map[string]bool, reply) {
		t.Helper()
		r := s.do("GET", "/v1/overview"+query, who, nil)
		if r.code != http.StatusOK {
			t.Fatalf("%s's overview: %d %s", who, r.code, r.body)
		}
		var ov gateway.Overview
		r.json(t, &ov)
		out := map[string]bool{}
		for _, w := range ov.Workers {
			out[w.Type] = true
		}
		return out, r
	}
	testkit.WaitFor(t, "the system's overview to list both types", 30*time.Second, func() bool {
		all, _ := types("*", "")
		return all["hooli-secret"] && all["sleep"]
	})
	mine, r := types("acme", "")
	if !mine["sleep"] || mine["hooli-secret"] || strings.Contains(string(r.body), "hooli") {
		t.Errorf("acme's overview shows another tenant's types: %s", r.body)
	}
	theirs, r := types("hooli", "")
	if !theirs["hooli-secret"] || theirs["sleep"] {
		t.Errorf("hooli's overview: %s", r.body)
	}
	if asAdmin, r := types("*", "?tenant=acme"); !asAdmin["sleep"] || asAdmin["hooli-secret"] {
		t.Errorf("acme's overview read by an admin: %s", r.body)
	}
	if r := s.do("GET", "/v1/tenants", "acme", nil); r.code != http.StatusOK || strings.Contains(string(r.body), "hooli") {
		t.Errorf("acme's tenants: %d %s", r.code, r.body)
	}
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if name, data := firstEvent(sctx, t, s, "acme", "/v1/overview/events"); name != "overview" || !strings.Contains(data, `"sleep"`) ||
		strings.Contains(data, "hooli") {
		t.Errorf("acme's overview stream: %s %s", name, data)
	}

	// Many viewers, every scope, polling as fast as they can.
	prefix := s.cfg.RedisPrefix
	workerTypes := strconv.Quote(prefix + "worker-types")
	weights := strconv.Quote(prefix + "tenant-weights")
	mon := monitor(t, s.cfg.RedisURL)
	pollers := []struct{ who, path string }{
		{"*", "/v1/overview"}, {"*", "/v1/overview?tenant=acme"}, {"*", "/v1/tenants"}, {"acme", "/v1/overview"},
		{"hooli", "/v1/overview"}, {"acme", "/v1/tenants"},
	}
	start := time.Now()
	const window = 2 * time.Second
	done := make(chan int)
	for i := 0; i < 3; i++ {
		for _, p := range pollers {
			go func() {
				n := 0
				for time.Since(start) < window {
					req, _ := http.NewRequest("GET", s.base+p.path, nil)
					req.Header.Set("Authorization", "Bearer "+s.keys[p.who])
					if resp, err := s.httpc.Do(req); err == nil {
						_, _ = io.Copy(io.Discard, resp.Body)
						_ = resp.Body.Close()
						if resp.StatusCode == http.StatusOK {
							n++
						}
					}
				}
				done <- n
			}()
		}
	}
	polls := 0
	for i := 0; i < 3*len(pollers); i++ {
		polls += <-done
	}
	elapsed := time.Since(start)
	reads := map[string]int{}
	rdb, _ := pipelinetest.Raw(s.st)
	for _, l := range mon.until(rdb) {
		low := strings.ToLower(l)
		switch {
		case strings.Contains(low, `"zrange" `+strings.ToLower(workerTypes)):
			reads["worker types"]++
		case strings.Contains(low, `"hgetall" `+strings.ToLower(weights)):
			reads["weights"]++
		}
	}
	most := int(elapsed/(900*time.Millisecond)) + 2
	t.Logf("%d polls by %d viewers in %v: Redis read the worker types %d times, the weights %d times",
		polls, 3*len(pollers), elapsed, reads["worker types"], reads["weights"])
	if polls < 3*len(pollers) {
		t.Fatalf("only %d polls answered", polls)
	}
	for what, n := range reads {
		if n > most {
			t.Errorf("%d polls read the %s %d times in %v: want a reading shared by every viewer (at most %d)", polls, what, n, elapsed, most)
		}
	}
}

// firstEvent reads the first Server-Sent Event of a stream: its name and
// data.
func firstEvent(ctx context.Context, t *testing.T, s *server, who, path string) (name, data string) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, "GET", s.base+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+s.keys[who])
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		l := sc.Text()
		switch {
		case strings.HasPrefix(l, "event: "):
			name = l[7:]
		case strings.HasPrefix(l, "data: "):
			data += l[6:]
		case l == "" && data != "":
			return name, data
		}
	}
	return name, data
}
