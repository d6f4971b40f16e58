package telemetry

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// switchableCheck is a readiness check whose result the test changes.
type switchableCheck struct {
	mu  sync.Mutex
	err error
}

func (c *switchableCheck) set(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.err = err
}

func (c *switchableCheck) check(context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

func discardLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }

// startServer runs s on a real listener until the test ends and returns its base URL.
func startServer(t *testing.T, s *Server) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	runErr := make(chan error, 1)
	go func() { runErr <- s.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-runErr:
			if err != nil {
				t.Errorf("Run returned %v after cancel, want nil", err)
			}
		case <-time.After(10 * time.Second):
			t.Error("Run did not return after cancel")
		}
	})
	select {
	case <-s.Ready():
	case err := <-runErr:
		t.Fatalf("Run: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("server not listening")
	}
	return "http://" + s.Addr()
}

func get(t *testing.T, url string) (int, string, http.Header) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("read %s: %v", url, err)
	}
	return resp.StatusCode, string(b), resp.Header
}

func TestServerHealthzAndMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg)
	m.EnqueueTotal.Add(7)
	s := NewServer("127.0.0.1:0", reg, nil, discardLogger())
	base := startServer(t, s)

	if !strings.HasPrefix(s.Addr(), "127.0.0.1:") || strings.HasSuffix(s.Addr(), ":0") {
		t.Errorf("Addr() = %q, want 127.0.0.1 with the chosen port", s.Addr())
	}

	code, body, _ := get(t, base+"/healthz")
	if code != http.StatusOK || body != "ok" {
		t.Errorf("/healthz = %d %q, want 200 \"ok\"", code, body)
	}

	code, body, hdr := get(t, base+"/metrics")
	if code != http.StatusOK {
		t.Fatalf("/metrics = %d", code)
	}
	if ct := hdr.Get("Content-Type"); !strings.HasPrefix(ct, "text/plain") {
		t.Errorf("/metrics Content-Type = %q", ct)
	}
	if !strings.Contains(body, "\nbulk_action_enqueue_total 7\n") {
		t.Errorf("/metrics lacks bulk_action_enqueue_total 7:\n%s", body)
	}
	if !strings.Contains(body, `bulk_action_rate_limit_denied_total{reason="pacing"} 0`) {
		t.Errorf("/metrics lacks the pre-initialised denial series")
	}

	code, _, _ = get(t, base+"/readyz")
	if code != http.StatusOK {
		t.Errorf("/readyz without checks = %d, want 200", code)
	}

	resp, err := http.Post(base+"/healthz", "text/plain", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("POST /healthz = %d, want 405", resp.StatusCode)
	}
}

func TestServerReadyzFlips(t *testing.T) {
	redis := &switchableCheck{err: errors.New("dial tcp 127.0.0.1:6379: connection refused")}
	nats := &switchableCheck{}
	s := NewServer("127.0.0.1:0", prometheus.NewRegistry(), []Check{
		{Name: "redis", Fn: redis.check},
		{Name: "nats", Fn: nats.check},
	}, discardLogger())
	base := startServer(t, s)

	code, body, hdr := get(t, base+"/readyz")
	if code != http.StatusServiceUnavailable {
		t.Fatalf("/readyz with redis down = %d, want 503", code)
	}
	if ct := hdr.Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type = %q", ct)
	}
	var rb readyBody
	if err := json.Unmarshal([]byte(body), &rb); err != nil {
		t.Fatalf("body %q: %v", body, err)
	}
	want := []checkFailure{{Name: "redis", Error: "dial tcp 127.0.0.1:6379: connection refused"}}
	if rb.Status != "not ready" || len(rb.Failed) != 1 || rb.Failed[0] != want[0] {
		t.Errorf("body = %+v, want status \"not ready\" and failed %+v", rb, want)
	}

	redis.set(nil)
	code, body, _ = get(t, base+"/readyz")
	if code != http.StatusOK {
		t.Fatalf("/readyz after redis recovered = %d %s, want 200", code, body)
	}
	rb = readyBody{}
	if err := json.Unmarshal([]byte(body), &rb); err != nil || rb.Status != "ready" || len(rb.Failed) != 0 {
		t.Errorf("body = %q (%v), want status ready", body, err)
	}

	nats.set(errors.New("nats: no servers available"))
	redis.set(errors.New("redis: timeout"))
	code, body, _ = get(t, base+"/readyz")
	rb = readyBody{}
	_ = json.Unmarshal([]byte(body), &rb)
	if code != http.StatusServiceUnavailable || len(rb.Failed) != 2 ||
		rb.Failed[0].Name != "redis" || rb.Failed[1].Name != "nats" {
		t.Errorf("/readyz with both down = %d %s, want 503 naming redis then nats", code, body)
	}
}

func TestServerReadyzBrokenChecks(t *testing.T) {
	release := make(chan struct{})
	var once sync.Once
	t.Cleanup(func() { once.Do(func() { close(release) }) })
	s := NewServer("127.0.0.1:0", nil, []Check{
		{Name: "stuck", Fn: func(context.Context) error { <-release; return nil }}, // ignores ctx
		{Name: "panics", Fn: func(context.Context) error { panic("boom") }},
		{Name: "missing"},
		{Name: "fine", Fn: func(context.Context) error { return nil }},
	}, discardLogger())
	base := startServer(t, s)

	start := time.Now()
	code, body, _ := get(t, base+"/readyz")
	elapsed := time.Since(start)
	once.Do(func() { close(release) })

	if code != http.StatusServiceUnavailable {
		t.Fatalf("/readyz = %d, want 503", code)
	}
	if elapsed < ReadyTimeout {
		t.Errorf("answered after %v, before the %v deadline a stuck check gets", elapsed, ReadyTimeout)
	}
	var rb readyBody
	if err := json.Unmarshal([]byte(body), &rb); err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, f := range rb.Failed {
		got[f.Name] = f.Error
	}
	if len(got) != 3 {
		t.Errorf("failed checks = %v, want stuck, panics, missing", got)
	}
	for name, frag := range map[string]string{"stuck": "no answer within", "panics": "panic: boom", "missing": "no check function"} {
		if !strings.Contains(got[name], frag) {
			t.Errorf("check %s error = %q, want it to contain %q", name, got[name], frag)
		}
	}
}

func TestServerRunStopsAndReleasesPort(t *testing.T) {
	s := NewServer("127.0.0.1:0", prometheus.NewRegistry(), nil, discardLogger())
	ctx, cancel := context.WithCancel(context.Background())
	runErr := make(chan error, 1)
	go func() { runErr <- s.Run(ctx) }()
	<-s.Ready()
	addr := s.Addr()
	if code, _, _ := get(t, "http://"+addr+"/healthz"); code != http.StatusOK {
		t.Fatalf("/healthz = %d", code)
	}
	if err := s.Run(context.Background()); !errors.Is(err, ErrServerStarted) {
		t.Errorf("second Run = %v, want ErrServerStarted", err)
	}

	cancel()
	if err := <-runErr; err != nil {
		t.Fatalf("Run = %v, want nil on clean stop", err)
	}
	http.DefaultClient.CloseIdleConnections()
	if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
		c.Close()
		t.Errorf("%s still accepts connections after Run returned", addr)
	}
}

func TestServerRunListenError(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	s := NewServer(ln.Addr().String(), nil, nil, discardLogger())
	if err := s.Run(context.Background()); err == nil || !strings.Contains(err.Error(), ln.Addr().String()) {
		t.Errorf("Run on a taken port = %v, want an error naming the address", err)
	}
	select {
	case <-s.Ready():
		t.Error("Ready closed although Run never listened")
	default:
	}
	if s.Addr() != "" {
		t.Errorf("Addr() = %q, want empty", s.Addr())
	}
}

func TestServerHandlerWithoutRun(t *testing.T) {
	s := NewServer(":0", prometheus.NewRegistry(), []Check{
		{Name: "redis", Fn: func(context.Context) error { return errors.New("down") }},
	}, nil)
	for path, want := range map[string]int{"/healthz": 200, "/metrics": 200, "/readyz": 503, "/nope": 404} {
		rec := httptest.NewRecorder()
		s.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		if rec.Code != want {
			t.Errorf("GET %s = %d, want %d", path, rec.Code, want)
		}
	}
}
