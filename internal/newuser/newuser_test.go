// Package newuser_test walks the README's quick start and worked example
// as a new user would: the real bulkaction binary, `bulkaction dev` in an
// empty directory, the commands of the README as written (run by bash), the
// HTTP API with the key dev printed, and the dashboard in headless
// Chromium. The commands are read from README.md, so the test breaks when
// the README drifts from what the binary does.
package newuser_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/bulkaction/bulkaction/internal/testkit"
)

// root is the module's directory (where go.mod is).
func root(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		up := filepath.Dir(dir)
		if up == dir {
			t.Fatal("go.mod not found above the test's directory")
		}
		dir = up
	}
}

// lockedBuffer is a buffer a process writes while the test reads it.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// section returns the README's text from the heading to the next one of
// the same level.
func section(t *testing.T, readme, heading string) string {
	t.Helper()
	_, rest, ok := strings.Cut(readme, "\n"+heading+"\n")
	if !ok {
		t.Fatalf("the README has no %q section", heading)
	}
	if i := strings.Index(rest, "\n## "); i >= 0 {
		rest = rest[:i]
	}
	return rest
}

// commands returns the "$ " lines of the console blocks of text.
func commands(text string) []string {
	var out []string
	in := false
	for _, l := range strings.Split(text, "\n") {
		switch {
		case strings.HasPrefix(l, "```console"):
			in = true
		case strings.HasPrefix(l, "```"):
			in = false
		case in && strings.HasPrefix(l, "$ "):
			out = append(out, strings.TrimPrefix(l, "$ "))
		}
	}
	return out
}

// TestNewUserSession: the README's first hour, checked end to end.
func TestNewUserSession(t *testing.T) {
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Fatal("redis-server is not on PATH: run scripts/ensure-redis.sh (make test does)")
	}
	chromium := os.Getenv("BULKACTION_CHROMIUM")
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil && chromium == "" {
			chromium = p
		}
	}
	if chromium == "" {
		t.Fatal("chromium is missing: run scripts/ensure-chromium.sh (make test does)")
	}
	mod := root(t)
	b, err := os.ReadFile(filepath.Join(mod, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	readme := string(b)
	work := t.TempDir()
	if out, err := exec.Command("go", "build", "-C", mod, "-o", filepath.Join(work, "bin", "bulkaction"), "./cmd/bulkaction").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}

	// The environment of a new user: nothing of bulkaction's set.
	var userEnv []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "BULKACTION_") {
			userEnv = append(userEnv, kv)
		}
	}

	// bin/bulkaction dev, as the worked example starts it, on free ports so
	// that the test runs beside others; again on other ports when another
	// process took one of them between the pick and the bind.
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var env []string
	var devOut, devErr *lockedBuffer
	var stop func()
	for attempt := 1; ; attempt++ {
		ports := testkit.FreePorts(t, 4)
		env = append(slices.Clip(userEnv), fmt.Sprint("BULKACTION_DEV_NATS_PORT=", ports[0]), fmt.Sprint("BULKACTION_DEV_REDIS_PORT=", ports[1]),
			fmt.Sprint("BULKACTION_GATEWAY_ADDR=127.0.0.1:", ports[2]), fmt.Sprint("BULKACTION_HTTP_ADDR=127.0.0.1:", ports[3]))
		dev := exec.CommandContext(ctx, filepath.Join(work, "bin", "bulkaction"), "dev")
		dev.Dir, dev.Env = work, env
		devOut, devErr = &lockedBuffer{}, &lockedBuffer{}
		dev.Stdout, dev.Stderr = devOut, devErr
		if err := dev.Start(); err != nil {
			t.Fatal(err)
		}
		exited := make(chan struct{})
		go func() { _ = dev.Wait(); close(exited) }()
		stopped := false
		stopDev := func() {
			if !stopped {
				stopped = true
				_ = dev.Process.Signal(syscall.SIGINT)
				<-exited
			}
		}
		stop = stopDev
		t.Cleanup(stopDev)
		deadline := time.After(60 * time.Second)
	wait:
		for !strings.Contains(devOut.String(), "  export ") {
			select {
			case <-exited:
				break wait
			case <-deadline:
				t.Fatalf("dev printed no export line in 60 s:\n%s\n%s", devOut.String(), devErr.String())
			case <-time.After(100 * time.Millisecond):
			}
		}
		if strings.Contains(devOut.String(), "  export ") {
			break
		}
		stopped = true
		if attempt == 3 || !strings.Contains(devErr.String(), "address already in use") {
			t.Fatalf("dev exited before it printed the export line:\n%s\n%s", devOut.String(), devErr.String())
		}
		t.Logf("dev lost a port to another process; again on other ports:\n%s", devErr.String())
	}
	banner := devOut.String()
	t.Logf("banner:\n%s", banner)
	vars := map[string]string{}
	uiURL := ""
	for _, l := range strings.Split(banner, "\n") {
		if rest, ok := strings.CutPrefix(l, "  export "); ok {
			for _, kv := range strings.Fields(rest) {
				k, v, _ := strings.Cut(kv, "=")
				vars[k] = v
				env = append(env, kv)
			}
		}
		if rest, ok := strings.CutPrefix(l, "  UI     "); ok {
			uiURL, _, _ = strings.Cut(rest, " ")
		}
	}
	api, key := vars["BULKACTION_API"], vars["BULKACTION_API_KEY"]
	if !strings.HasPrefix(api, "http://127.0.0.1:") || key == "" || vars["BULKACTION_NATS_URL"] == "" || vars["BULKACTION_REDIS_URL"] == "" {
		t.Fatalf("the export line lacks the API, its key or the servers: %v", vars)
	}
	if !strings.HasSuffix(uiURL, "/ui/#key="+key) {
		t.Errorf("the banner's dashboard URL %q does not sign in with the key", uiURL)
	}

	// sh runs one command of the README with bash in the user's directory.
	sh := func(line string) (string, error) {
		c := exec.CommandContext(ctx, "bash", "-c", line)
		c.Dir, c.Env = work, env
		out, err := c.CombinedOutput()
		return string(out), err
	}

	// The worked example, every command as written.
	worked := commands(section(t, readme, "## A worked example with the CLI"))
	if len(worked) < 8 {
		t.Fatalf("the worked example has %d commands: %q", len(worked), worked)
	}
	if worked[0] != "bin/bulkaction dev" {
		t.Fatalf("the worked example starts with %q, not bin/bulkaction dev", worked[0])
	}
	for _, line := range worked[1:] { // dev runs already
		if rest, ok := strings.CutPrefix(line, "export "); ok {
			env = append(env, strings.Fields(rest)...)
			continue
		}
		out, err := sh(line)
		t.Logf("$ %s\n%s", line, out)
		verb := ""
		if f := strings.Fields(line); len(f) > 1 && f[0] == "bin/bulkaction" {
			verb = f[1]
		}
		switch {
		case (verb == "pause" || verb == "resume") && err != nil && strings.Contains(out, "has already ended (COMPLETED)"):
			// 300 jobs of 20 ms may be done before the pause: said in a sentence
		case err != nil:
			t.Errorf("%s: %v\n%s", line, err, out)
		}
		for v, want := range map[string]string{
			"submit": "submitted 300 jobs to group newsletter-42 of tenant acme",
			"watch":  "newsletter-42 COMPLETED: 300 jobs (300 succeeded, 0 failed, 0 cancelled)",
		} {
			if verb == v && !strings.Contains(out, want) {
				t.Errorf("%s printed no %q:\n%s", line, want, out)
			}
		}
		if verb == "status" && strings.Contains(line, "--json") {
			// with the export line it goes through the API: its view
			var m struct {
				GroupID string         `json:"groupId"`
				Status  map[string]any `json:"status"`
			}
			if err := json.Unmarshal([]byte(out), &m); err != nil || m.GroupID != "newsletter-42" || m.Status["throttles"] != float64(0) {
				t.Errorf("status --json: %v\n%s", err, out)
			}
		}
	}
	out, _ := sh("bin/bulkaction status newsletter-42")
	for _, want := range []string{"group       newsletter-42 (tenant acme)", "300/300 done (300 succeeded, 0 failed, 0 cancelled)", "retries, 0 throttles"} {
		if !strings.Contains(out, want) {
			t.Errorf("status lacks %q:\n%s", want, out)
		}
	}

	// A typo of the group is refused with a sentence, and creates nothing.
	for _, verb := range []string{"pause", "resume", "cancel", "watch"} {
		out, err := sh("bin/bulkaction " + verb + " newsletter-24 --appear-timeout 1s 2>&1 || true")
		if verb != "watch" {
			out, err = sh("bin/bulkaction " + verb + " newsletter-24 2>&1; echo exit=$?")
		}
		if err != nil || !strings.Contains(out, "group newsletter-24 of tenant acme does not exist") {
			t.Errorf("%s of a typo: %v\n%s", verb, err, out)
		}
	}

	// config shows the settings in effect, those of the export line among them.
	if out, err := sh("bin/bulkaction config"); err != nil || !strings.Contains(out, vars["BULKACTION_REDIS_URL"]) {
		t.Errorf("config does not show the Redis URL in effect: %v\n%s", err, out)
	}

	// The HTTP API section: its jobs.ndjson, submitted by the CLI and by
	// the curl calls, made with Go's client and the printed key.
	apiSec := section(t, readme, "## The HTTP API")
	var gen string
	for _, l := range commands(apiSec) {
		if strings.Contains(l, "> jobs.ndjson") {
			gen = l
		}
	}
	if gen == "" {
		t.Fatal("the HTTP API section makes no jobs.ndjson")
	}
	if out, err := sh(gen); err != nil {
		t.Fatalf("%s: %v\n%s", gen, err, out)
	}
	if out, err := sh("bin/bulkaction submit --group promo-cli --file jobs.ndjson"); err != nil ||
		!strings.Contains(out, "read 1000 jobs in the API's job format") || !strings.Contains(out, "submitted 1000 jobs to group promo-cli") {
		t.Errorf("submit of jobs.ndjson: %v\n%s", err, out)
	}
	urls := regexp.MustCompile(`'http://127\.0\.0\.1:8090(/v1/groups/[^']+)'`).FindAllStringSubmatch(apiSec, -1)
	if len(urls) < 3 {
		t.Fatalf("the curl calls of the README: %q", urls)
	}
	call := func(method, path string, body io.Reader) *http.Response {
		t.Helper()
		req, _ := http.NewRequestWithContext(ctx, method, api+path, body)
		req.Header.Set("Authorization", "Bearer "+key)
		if body != nil {
			req.Header.Set("Content-Type", "application/x-ndjson")
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	f, err := os.Open(filepath.Join(work, "jobs.ndjson"))
	if err != nil {
		t.Fatal(err)
	}
	resp := call(http.MethodPost, urls[0][1], f)
	f.Close()
	b, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted || !strings.Contains(string(b), `"accepted":1000`) {
		t.Fatalf("POST %s: %d %s", urls[0][1], resp.StatusCode, b)
	}
	// The events stream ends after the group's final event.
	resp = call(http.MethodGet, urls[2][1], nil)
	var last string
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if d, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
			last = d
		}
	}
	resp.Body.Close()
	if !strings.Contains(last, `"state":"COMPLETED"`) || !strings.Contains(last, `"succeeded":1000`) {
		t.Errorf("the events stream ended with %s", last)
	}
	resp = call(http.MethodGet, urls[1][1], nil)
	b, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	var view struct {
		State  string         `json:"state"`
		Status map[string]any `json:"status"`
	}
	if err := json.Unmarshal(b, &view); err != nil || view.State != "COMPLETED" || view.Status["throttles"] != float64(0) {
		t.Errorf("GET %s: %v %s", urls[1][1], err, b)
	}

	// The dashboard URL of the banner signs in by itself and shows the group.
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(chromium), chromedp.NoSandbox,
		chromedp.Flag("disable-dev-shm-usage", true), chromedp.Flag("disable-gpu", true))
	actx, cancelA := chromedp.NewExecAllocator(ctx, opts...)
	defer cancelA()
	bctx, cancelB := chromedp.NewContext(actx)
	defer cancelB()
	if err := chromedp.Do(bctx, chromedp.Navigate(uiURL)); err != nil {
		t.Fatalf("open %s: %v", uiURL, err)
	}
	signedIn := `document.getElementById('nav').hidden === false && document.getElementById('who-name').textContent === 'admin'`
	if _, err := chromedp.Run(bctx, chromedp.Poll[chromedp.Void](signedIn, chromedp.WithPollingTimeout(20*time.Second))); err != nil {
		t.Fatalf("%s did not sign in: %v", uiURL, err)
	}
	if _, err := chromedp.Run(bctx, chromedp.Evaluate[string](`location.hash = '#/group/acme/newsletter-42'`)); err != nil {
		t.Fatal(err)
	}
	shows := `document.getElementById('view').innerText.includes('newsletter-42') && document.getElementById('view').innerText.includes('COMPLETED') && document.getElementById('view').innerText.includes('0 throttles')`
	if _, err := chromedp.Run(bctx, chromedp.Poll[chromedp.Void](shows, chromedp.WithPollingTimeout(20*time.Second))); err != nil {
		text, _ := chromedp.Run(bctx, chromedp.Evaluate[string](`document.getElementById('view').innerText`))
		t.Errorf("the group's page does not show it completed with its throttles: %v\n%s", err, text)
	}

	stop()
	if strings.Contains(devOut.String()+devErr.String(), "level=WARN") {
		t.Errorf("dev warned about its own set-up:\n%s\n%s", devOut.String(), devErr.String())
	}
}
