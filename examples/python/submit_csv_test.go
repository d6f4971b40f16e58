package python_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/bulkaction/bulkaction/internal/config"
	"github.com/bulkaction/bulkaction/internal/pipelinetest"
	"github.com/bulkaction/bulkaction/internal/stack"
	"github.com/bulkaction/bulkaction/internal/testenv"
	"github.com/bulkaction/bulkaction/pkg/api"
	"github.com/bulkaction/bulkaction/pkg/contracts"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// python3 returns the interpreter the example runs with: Debian's python3
// on PATH. Without one the test fails under CI (CI=true), where `make
// test` installs it (scripts/ensure-python.sh), and is skipped elsewhere.
func python3(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("python3")
	if err == nil {
		return p
	}
	const how = "python3 is missing: install it with `scripts/ensure-python.sh` (or `sudo apt-get install -y python3`)"
	if os.Getenv("CI") == "true" {
		t.Fatal(how + "; CI must run the Python example")
	}
	t.Skip(how + "; skipping the Python example")
	return ""
}

// gatewayServer starts every target and the gateway on a free port; it
// returns the gateway's address, a key of tenant acme, and the stack.
func gatewayServer(t *testing.T) (base, key string, st *stack.Stack) {
	t.Helper()
	// 200 jobs take about 2 s, so the group has progress events (the
	// aggregator sends one a second).
	g := pipelinetest.StartGateway(t, []string{"acme"}, func(c *config.Config) { c.GlobalRps = 100 })
	return g.URL, g.Keys["acme"], g.Stack
}

// runExample runs submit_csv.py with args, stdin and the key in the
// environment; it returns the exit code and the output.
func runExample(t *testing.T, py, base, key, stdin string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, py, append([]string{"submit_csv.py", "--api", base}, args...)...)
	cmd.Env = append(os.Environ(), "BULKACTION_API_KEY="+key, "BULKACTION_TENANT=", "PYTHONDONTWRITEBYTECODE=1")
	cmd.Stdin = strings.NewReader(stdin)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
	case ctx.Err() != nil:
		t.Fatalf("submit_csv.py did not end in time\nstdout:\n%s\nstderr:\n%s", &out, &errb)
	case !errors.As(err, &ee):
		t.Fatalf("submit_csv.py: %v", err)
	}
	if ee != nil {
		code = ee.ExitCode()
	}
	return code, out.String(), errb.String()
}

// TestSubmitCSV: the Python example streams a CSV of 200 sleep jobs (the
// columns besides id and type become the payload), follows the group's
// events and exits 0 once it COMPLETED; the group has 200 succeeded jobs.
// Rows from standard input with a payload column are sealed after they
// are sent. A bad row is answered with the API's problem, exit 1.
func TestSubmitCSV(t *testing.T) {
	py := python3(t)
	base, key, st := gatewayServer(t)

	var csv strings.Builder
	csv.WriteString("id,type,ms\n")
	for i := 0; i < 200; i++ {
		fmt.Fprintf(&csv, "job-%d,sleep,1\n", i)
	}
	file := filepath.Join(t.TempDir(), "jobs.csv")
	if err := os.WriteFile(file, []byte(csv.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	// A proxy breaks the first event stream after its first event: the
	// script reconnects with Last-Event-ID.
	front, lastIDs := breakingProxy(t, base)
	code, out, errOut := runExample(t, py, front, key, "", "--group", "csv200", "--priority", "high", file)
	if code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	t.Logf("submit_csv.py printed:\n%s\nstderr:\n%s", out, errOut)
	ids := lastIDs()
	if len(ids) < 2 || ids[0] != "" || !strings.Contains(errOut, "reconnecting") {
		t.Errorf("event streams opened with Last-Event-IDs %q; stderr:\n%s", ids, errOut)
	} else if ids[1] == "" {
		// Only when the group's first event was built from Redis (no id):
		// its first stream event was not published yet.
		t.Logf("the first event had no id: reconnected without Last-Event-ID")
	}
	for _, want := range []string{`"accepted": 200`, `"total": 200`, "progress", "COMPLETED", "200 succeeded"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s\nstderr:\n%s", want, out, errOut)
		}
	}
	info, ok, err := st.Conns.Queue.Group(context.Background(), contracts.Group("acme", "csv200"))
	if err != nil || !ok {
		t.Fatalf("group: %v %v", ok, err)
	}
	if info.State != "COMPLETED" || info.Succeeded != 200 || info.Failed != 0 || info.Declared != 200 || info.Priority != "high" {
		t.Errorf("group %+v", info)
	}

	stdin := "id,type,payload\na,sleep,\"{\"\"ms\"\": 1}\"\nb,sleep,\"{\"\"ms\"\": 2}\"\nc,sleep,\n"
	code, out, errOut = runExample(t, py, base, key, stdin, "--group", "stdin3", "-")
	if code != 0 || !strings.Contains(out, `"kind": "seal"`) || !strings.Contains(out, "3 succeeded") {
		t.Fatalf("from stdin: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}

	code, out, errOut = runExample(t, py, base, key, "id,type,ms\nx,no such type,1\n", "--group", "bad", "-")
	if code != 1 || !strings.Contains(errOut, "400 Invalid job") || !strings.Contains(errOut, "line 1: field type") {
		t.Fatalf("bad row: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
}

// breakingProxy is a proxy to the gateway at base that aborts the first
// event stream once it has passed an event; lastIDs returns the
// Last-Event-ID of each event stream request.
func breakingProxy(t *testing.T, base string) (front string, lastIDs func() []string) {
	t.Helper()
	target, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	proxy := httputil.NewSingleHostReverseProxy(target)
	var mu sync.Mutex
	var ids []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/events") {
			mu.Lock()
			ids = append(ids, r.Header.Get("Last-Event-ID"))
			first := len(ids) == 1
			mu.Unlock()
			if first {
				proxy.ServeHTTP(&breakAfterEvent{ResponseWriter: w}, r)
				return
			}
		}
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv.URL, func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), ids...)
	}
}

// breakAfterEvent aborts a response once it has passed an event.
type breakAfterEvent struct{ http.ResponseWriter }

func (b *breakAfterEvent) Write(p []byte) (int, error) {
	n, err := b.ResponseWriter.Write(p)
	if strings.Contains(string(p[:n]), "data: ") {
		if f, ok := b.ResponseWriter.(http.Flusher); ok {
			f.Flush()
		}
		panic(http.ErrAbortHandler)
	}
	return n, err
}

func (b *breakAfterEvent) Flush() {
	if f, ok := b.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// TestSubmitCSVScheduledWithCallback: the Python example submits a group
// with --not-before 2 s ahead, a sending window and --callback-url; the
// group starts no sooner than its notBefore, and once it COMPLETED the
// script waits for the callback and prints its delivery; the receiver got
// the final event once, signed with the tenant's secret as the reference
// Standard Webhooks library verifies.
func TestSubmitCSVScheduledWithCallback(t *testing.T) {
	py := python3(t)
	g := pipelinetest.StartGateway(t, []string{"acme"}, func(c *config.Config) { c.HTTPAllowedHosts = []string{"127.0.0.1"} })
	base, key := g.URL, g.Keys["acme"]

	req, err := http.NewRequest(http.MethodPost, base+"/v1/callback-secret", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var sec api.CallbackSecret
	err = json.NewDecoder(resp.Body).Decode(&sec)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusCreated || sec.Secret == "" {
		t.Fatalf("callback secret: %d %v %+v", resp.StatusCode, err, sec)
	}
	var mu sync.Mutex
	var bodies [][]byte
	var headers []http.Header
	rcv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		bodies, headers = append(bodies, b), append(headers, r.Header.Clone())
		mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(rcv.Close)

	file := filepath.Join(t.TempDir(), "jobs.csv")
	if err := os.WriteFile(file, []byte("id,type,ms\na,sleep,1\nb,sleep,1\nc,sleep,1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	notBefore := time.Now().Add(2 * time.Second).Truncate(time.Millisecond)
	code, out, errOut := runExample(t, py, base, key, "", "--group", "later", "--not-before", notBefore.Format(time.RFC3339Nano),
		"--window", "mon-sun 00:00-24:00 UTC", "--callback-url", rcv.URL+"/done", file)
	t.Logf("submit_csv.py printed:\n%s\nstderr:\n%s", out, errOut)
	if code != 0 || !strings.Contains(out, "COMPLETED: 3 succeeded") || !strings.Contains(out, "callback delivered after 1 attempt to "+rcv.URL+"/done") {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	info, ok, err := g.Stack.Conns.Queue.Group(context.Background(), contracts.Group("acme", "later"))
	if err != nil || !ok {
		t.Fatalf("group: %v %v", ok, err)
	}
	if started := time.UnixMilli(info.StartedAtMs); started.Before(notBefore) {
		t.Errorf("started at %v, before its notBefore %v", started, notBefore)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(bodies) != 1 {
		t.Fatalf("the receiver got %d requests, want 1", len(bodies))
	}
	wh, err := standardwebhooks.NewWebhook(sec.Secret)
	if err != nil {
		t.Fatal(err)
	}
	if err := wh.Verify(bodies[0], headers[0]); err != nil {
		t.Errorf("the reference library does not verify the delivery: %v", err)
	}
	if !strings.Contains(string(bodies[0]), `"state":"COMPLETED"`) || !strings.Contains(string(bodies[0]), `"succeeded":3`) {
		t.Errorf("delivered %s", bodies[0])
	}
}
