package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/bulkaction/bulkaction/internal/config"
	"github.com/bulkaction/bulkaction/internal/conns"
	"github.com/bulkaction/bulkaction/internal/natsutil"
	"github.com/bulkaction/bulkaction/internal/stack"
	"github.com/bulkaction/bulkaction/internal/telemetry"
	"github.com/bulkaction/bulkaction/internal/testenv"
	"github.com/bulkaction/bulkaction/internal/testkit"
	"github.com/bulkaction/bulkaction/pkg/client"
	"github.com/bulkaction/bulkaction/pkg/contracts"
	"github.com/bulkaction/bulkaction/pkg/redisq"
	"github.com/bulkaction/bulkaction/pkg/status"
)

// system is a NATS server and a Redis key space the verbs talk to, with
// the BULKACTION_* variables pointing at them.
type system struct {
	js    jetstream.JetStream
	cfg   *config.Config
	queue *redisq.Queue
	redis *testenv.RedisEnv
}

// jobStored reports whether Redis holds job id of the default tenant's
// group gid, queued or not (no command shows a job by its id).
func (s *system) jobStored(t *testing.T, gid, id string) bool {
	t.Helper()
	h, err := redisq.ReadJob(context.Background(), s.redis.Client, redisq.NewKeys(s.redis.Prefix),
		contracts.Group(client.DefaultTenant, gid), id)
	if err != nil {
		t.Fatal(err)
	}
	return len(h) > 0
}

// startSystem points the environment at a new embedded NATS server and the
// shared redis-server (a key prefix of the test's own), then either runs
// every target on them (withTargets) or only creates the streams.
func startSystem(t *testing.T, withTargets bool, env ...string) *system {
	t.Helper()
	clearEnv(t)
	url, _, js := testenv.NATS(t)
	r := testenv.Redis(t)
	vars := append([]string{
		"NATS_URL", url, "REDIS_URL", r.URL, "REDIS_PREFIX", r.Prefix, "HTTP_ADDR", "", "LOG_LEVEL", "warn",
	}, env...)
	for i := 0; i < len(vars); i += 2 {
		t.Setenv(config.Prefix+"_"+vars[i], vars[i+1])
	}
	cfg, err := config.Load()
	if err != nil {
		t.Fatal(err)
	}
	s := &system{js: js, cfg: cfg, redis: r}
	ctx := context.Background()
	if !withTargets {
		if err := natsutil.EnsureStreams(ctx, js, contracts.Names{Prefix: cfg.SubjectPrefix}, conns.StreamSettings(cfg)); err != nil {
			t.Fatal(err)
		}
		if s.queue, err = redisq.New(ctx, r.Client, conns.QueueConfig(cfg)); err != nil {
			t.Fatal(err)
		}
		return s
	}
	log, _ := telemetry.NewLogger(os.Stderr, "text", "warn")
	st, err := stack.Start(ctx, stack.Options{Config: cfg, Targets: stack.PipelineTargets, Log: log})
	if err != nil {
		t.Fatalf("stack: %v", err)
	}
	s.queue = st.Conns.Queue
	t.Cleanup(func() {
		if err := st.Stop(); err != nil {
			t.Errorf("stack: %v", err)
		}
	})
	return s
}

func (s *system) submitMsgs(t *testing.T) uint64 {
	t.Helper()
	n, err := natsutil.StreamMsgs(context.Background(), s.js, contracts.Names{Prefix: s.cfg.SubjectPrefix}.StreamSubmit())
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// jobLines returns n JSONL lines: every 7th line in the {"jobId","payload"}
// form with id "j<line>", every 10th line a job that fails for good.
func jobLines(n int) []string {
	lines := make([]string, n)
	for i := 1; i <= n; i++ {
		payload := `{"ms":1}`
		if i%10 == 0 {
			payload = `{"permanentFailRate":1}`
		}
		if i%7 == 0 {
			payload = fmt.Sprintf(`{"jobId":"j%d","payload":%s}`, i, payload)
		}
		lines[i-1] = payload
	}
	return lines
}

func writeLines(t *testing.T, lines []string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "jobs.jsonl")
	if err := os.WriteFile(p, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func statusJSON(t *testing.T, ctx context.Context, gid string) map[string]any {
	t.Helper()
	out, _, err := run(ctx, "", "status", gid, "--json")
	if err != nil {
		t.Fatalf("status %s: %v", gid, err)
	}
	var m map[string]any
	if err := json.Unmarshal([]byte(out), &m); err != nil {
		t.Fatalf("status --json: %v\n%s", err, out)
	}
	return m
}

// liveJSON is the live part ("status") of a group's view as JSON decodes it.
func liveJSON(t *testing.T, m map[string]any) map[string]any {
	t.Helper()
	live, ok := m["status"].(map[string]any)
	if !ok {
		t.Fatalf("status --json has no status object: %v", m)
	}
	return live
}

func TestSubmitWatchStatusCompleted(t *testing.T) {
	s := startSystem(t, true)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	file := writeLines(t, jobLines(1000))

	out, _, err := run(ctx, "", "submit", "--group", "g1000", "--type", "sleep", "--file", file)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "submitted 1000 jobs to group g1000 of tenant default") || !strings.Contains(out, "sealed it at 1000") {
		t.Errorf("submit printed %q", out)
	}

	out, _, err = run(ctx, "", "watch", "g1000", "--interval", "200ms")
	if err != nil {
		t.Fatalf("watch: %v\n%s", err, out)
	}
	if !strings.Contains(out, "g1000 COMPLETED: 1000 jobs (900 succeeded, 100 failed, 0 cancelled)") {
		t.Errorf("watch printed:\n%s", out)
	}

	m := statusJSON(t, ctx, "g1000")
	for k, want := range map[string]any{
		"state": "COMPLETED", "total": 1000.0, "jobs": 1000.0, "done": 1000.0,
		"succeeded": 900.0, "failed": 100.0, "cancelled": 0.0, "tenant": "default", "groupId": "g1000",
	} {
		if m[k] != want {
			t.Errorf("status --json %s = %v, want %v", k, m[k], want)
		}
	}
	// The live part is nested under "status", as GET /v1/groups/{id} has it.
	for k, want := range map[string]any{"position": nil, "etaSeconds": 0.0} {
		if live := liveJSON(t, m); live[k] != want {
			t.Errorf("status --json status.%s = %v, want %v", k, live[k], want)
		}
	}

	// Ids: "jobId" where given, else the line number.
	for id, want := range map[string]bool{"1": true, "j7": true, "7": false, "1000": true} {
		if got := s.jobStored(t, "g1000", id); got != want {
			t.Errorf("job %q exists = %v, want %v", id, got, want)
		}
	}

	out, _, err = run(ctx, "", "status", "g1000")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"g1000 (tenant default)", "COMPLETED", "1000/1000 done (900 succeeded, 100 failed, 0 cancelled)", "sealed at 1000"} {
		if !strings.Contains(out, want) {
			t.Errorf("status lacks %q:\n%s", want, out)
		}
	}
}

func TestSubmitBadLinesPublishNothing(t *testing.T) {
	s := startSystem(t, false)
	ctx := context.Background()
	lines := jobLines(1000)
	lines[2] = `{"ms":`
	lines[499] = `{"jobId":"bad id!","payload":{}}`
	lines[997] = `{"jobId":"j7","payload":{}}`
	_, _, err := run(ctx, "", "submit", "-g", "g", "-t", "sleep", "-f", writeLines(t, lines))
	if err == nil {
		t.Fatal("a file with bad lines was accepted")
	}
	msg := err.Error()
	for _, want := range []string{
		"3 bad line(s); nothing was submitted",
		"line 3: field payload: not valid JSON",
		"line 500: field jobId: contains ' '",
		`line 998: field jobId: "j7" repeats the job id of line 7`,
	} {
		if !strings.Contains(msg, want) {
			t.Errorf("error lacks %q:\n%s", want, msg)
		}
	}
	if n := s.submitMsgs(t); n != 0 {
		t.Fatalf("%d messages published from a bad file", n)
	}

	// The same jobs from standard input, fixed.
	out, _, err := run(ctx, strings.Join(jobLines(1000), "\n"), "submit", "-g", "g", "-t", "sleep", "-f", "-")
	if err != nil {
		t.Fatal(err)
	}
	// The client sends 100 jobs per message.
	if n := s.submitMsgs(t); n != 11 {
		t.Errorf("stream holds %d messages, want 10 of 100 jobs and a seal (%s)", n, out)
	}
}

func TestSubmitStoppedPartWaySaysSoAndRerunIsSafe(t *testing.T) {
	s := startSystem(t, false)
	ctx := context.Background()
	name := contracts.Names{Prefix: s.cfg.SubjectPrefix}.StreamSubmit()
	limit := func(maxMsgs int64) {
		t.Helper()
		st, err := s.js.Stream(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		c := st.CachedInfo().Config
		c.MaxMsgs, c.Discard = maxMsgs, jetstream.DiscardNew
		if _, err := s.js.UpdateStream(ctx, c); err != nil {
			t.Fatal(err)
		}
	}
	limit(3) // messages of 100 jobs: 300 jobs
	file := writeLines(t, jobLines(1000))
	_, _, err := run(ctx, "", "submit", "-g", "part", "-t", "sleep", "-f", file, "--chunk", "500")
	if err == nil {
		t.Fatal("submit into a full stream succeeded")
	}
	for _, want := range []string{"publishing stopped after 300 of 1000 jobs were stored", "the group is not sealed", "Re-running the same command is safe"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q: %v", want, err)
		}
	}
	if n := s.submitMsgs(t); n != 3 {
		t.Fatalf("stream holds %d messages, want 3", n)
	}

	limit(-1)
	if _, _, err := run(ctx, "", "submit", "-g", "part", "-t", "sleep", "-f", file); err != nil {
		t.Fatal(err)
	}
	// The 3 stored messages come again with the same ids (the same jobs in
	// the same batches) and are dropped as duplicates.
	if n := s.submitMsgs(t); n != 11 {
		t.Errorf("after the re-run the stream holds %d messages, want 10 of 100 jobs and a seal", n)
	}
}

func TestCancelEndsWatchWithExitCode3(t *testing.T) {
	startSystem(t, true, "GLOBAL_RPS", "20")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	jobs := strings.Repeat(`{"ms":20}`+"\n", 200)
	if _, _, err := run(ctx, jobs, "submit", "-g", "slow", "-t", "sleep", "-f", "-"); err != nil {
		t.Fatal(err)
	}
	for {
		// submit returns once the stream has the jobs; the fetcher may not
		// have ingested them yet.
		out, _, err := run(ctx, "", "status", "slow", "--json")
		var m map[string]any
		if err == nil {
			if err := json.Unmarshal([]byte(out), &m); err != nil {
				t.Fatalf("status --json: %v\n%s", err, out)
			}
		} else if !errors.Is(err, status.ErrNotFound) {
			t.Fatalf("status slow: %v", err)
		}
		if m["state"] == "RUNNING" && m["done"].(float64) > 0 {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatal("the group did not start")
		case <-time.After(50 * time.Millisecond):
		}
	}

	out, _, err := run(ctx, "", "status", "slow")
	if err != nil || !strings.Contains(out, "position    tenant 1 of 1 waiting tenants; group 1 among its tenant's waiting groups") || !strings.Contains(out, "RUNNING") {
		t.Errorf("status: %v\n%s", err, out)
	}
	out, _, err = run(ctx, "", "stats", "--json")
	if err != nil {
		t.Fatal(err)
	}
	var st struct {
		GroupsPerLevel map[string]int64 `json:"groupsPerLevel"`
		ReadyDepth     int64            `json:"readyDepth"`
		Rate           struct {
			Limit         float64 `json:"limitPerSecond"`
			ActiveTenants int64   `json:"activeTenants"`
			TenantShare   float64 `json:"tenantSharePerSecond"`
		} `json:"rate"`
		Congestion struct {
			GroupsPerLevel map[string]int64 `json:"groupsPerLevel"`
		} `json:"congestion"`
	}
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		t.Fatal(err)
	}
	if st.GroupsPerLevel["normal"] != 1 || st.Rate.Limit != 20 || st.Rate.ActiveTenants != 1 || st.Rate.TenantShare != 20 || st.ReadyDepth < 0 || len(st.Congestion.GroupsPerLevel) != 5 {
		t.Errorf("stats --json = %s", out)
	}
	if out, _, err := run(ctx, "", "stats"); err != nil || !strings.Contains(out, "waiting groups  1 (high 0, normal 1, low 0)") ||
		!strings.Contains(out, "active tenants  1 (share 20 jobs/s each") {
		t.Errorf("stats: %v\n%s", err, out)
	}

	watchOut := &syncBuffer{}
	watchErr := make(chan error, 1)
	go func() { watchErr <- runTo(ctx, watchOut, &syncBuffer{}, "", "watch", "slow", "--interval", "100ms") }()

	out, _, err = run(ctx, "", "cancel", "slow")
	if err != nil || !strings.Contains(out, "cancel of group slow accepted") {
		t.Fatalf("cancel: %v %q", err, out)
	}
	if err := <-watchErr; !errors.Is(err, exitCancelled) {
		t.Fatalf("watch returned %v, want exit code 3\n%s", err, watchOut)
	}
	if !strings.Contains(watchOut.String(), "slow CANCELLED") {
		t.Errorf("watch printed:\n%s", watchOut)
	}
	m := statusJSON(t, ctx, "slow")
	sum := m["succeeded"].(float64) + m["failed"].(float64) + m["cancelled"].(float64)
	if m["state"] != "CANCELLED" || sum != 200 || m["cancelled"].(float64) == 0 {
		t.Errorf("after cancel: state %v, %v+%v+%v", m["state"], m["succeeded"], m["failed"], m["cancelled"])
	}
	if out, _, err := run(ctx, "", "cancel", "slow"); err != nil || !strings.Contains(out, "has already ended") {
		t.Errorf("second cancel: %v %q", err, out)
	}
}

func TestVerbErrors(t *testing.T) {
	startSystem(t, false)
	ctx := context.Background()
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"status", "nope"}, "group not found"},
		{[]string{"watch", "bad id"}, "groupId"},
		{[]string{"submit", "-g", "g", "-t", "sleep", "-f", "-", "--priority", "urgent"}, "--priority"},
		{[]string{"submit", "-g", "g:1", "-t", "sleep", "-f", "-"}, "--group"},
		{[]string{"submit", "-g", "g", "-t", "sleep"}, `"file" not set`},
		{[]string{"submit", "-g", "g", "-t", "sleep", "-f", "-"}, "no jobs"},
		{[]string{"submit", "-g", "g", "-t", "sleep", "-f", "-", "--max-in-flight", "-1"}, "--max-in-flight -1: must be within [0, "},
		// A tenant is a subject token: no dots.
		{[]string{"submit", "--tenant", "a.b", "-g", "g", "-t", "sleep", "-f", "-"}, "--tenant"},
		{[]string{"status", "--tenant", "a.b", "g"}, "--tenant"},
		{[]string{"watch", "--tenant", "a.b", "g"}, "--tenant"},
		{[]string{"cancel", "--tenant", "a.b", "g"}, "--tenant"},
		{[]string{"pause", "--tenant", "a.b", "g"}, "--tenant"},
		{[]string{"resume", "--tenant", "a.b", "g"}, "--tenant"},
		{[]string{"pause", "bad id"}, "groupId"},
		{[]string{"tenant", "weight", "acme", "x"}, "must be an integer from 1 to 1000"},
		{[]string{"dev", "--redis", "valkey"}, "--redis"},
		{[]string{"dev", "--scale", "small"}, "--scale applies only with --demo"},
		{[]string{"dev", "--demo", "--scale", "huge"}, `scale "huge"`},
	} {
		_, _, err := run(ctx, "", c.args...)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: err = %v, want it to mention %q", c.args, err, c.want)
		}
	}

	// A bad $BULKACTION_TENANT is refused the same way.
	t.Setenv(config.Prefix+"_TENANT", "a.b")
	if _, _, err := run(ctx, "", "status", "g"); err == nil || !strings.Contains(err.Error(), "--tenant") {
		t.Errorf("status with %s_TENANT=a.b: %v, want an error naming --tenant", config.Prefix, err)
	}
	os.Unsetenv(config.Prefix + "_TENANT")

	// No bulkaction streams on the server: say so instead of timing out.
	_, nc, _ := testenv.NATS(t)
	t.Setenv(config.Prefix+"_NATS_URL", nc.ConnectedUrl())
	_, _, err := run(ctx, "{}", "submit", "-g", "g", "-t", "sleep", "-f", "-")
	if err == nil || !strings.Contains(err.Error(), "has no stream") {
		t.Errorf("submit without streams: %v", err)
	}
}

// TestSubmitRefusesWhatCannotApply: submitting to a group that already
// ended once printed "submitted … sealed" and exited 0 while every job was
// dead-lettered, and --priority on an existing group was reported as
// applied and was not. Both are now errors, and nothing is published.
func TestSubmitRefusesWhatCannotApply(t *testing.T) {
	s := startSystem(t, true)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	lastSeq := func() uint64 {
		t.Helper()
		st, err := s.js.Stream(ctx, contracts.Names{Prefix: s.cfg.SubjectPrefix}.StreamSubmit())
		if err != nil {
			t.Fatal(err)
		}
		return st.CachedInfo().State.LastSeq
	}

	small := writeLines(t, jobLines(5))
	if _, _, err := run(ctx, "", "submit", "-g", "once", "-t", "sleep", "-f", small); err != nil {
		t.Fatal(err)
	}
	if out, _, err := run(ctx, "", "watch", "once", "--interval", "100ms"); err != nil {
		t.Fatalf("watch: %v\n%s", err, out)
	}
	seq := lastSeq()
	_, _, err := run(ctx, "", "submit", "-g", "once", "-t", "sleep", "-f", small)
	if err == nil || !strings.Contains(err.Error(), "group default/once already ended (COMPLETED)") {
		t.Fatalf("submit to an ended group: %v", err)
	}
	if got := lastSeq(); got != seq {
		t.Fatalf("submit to an ended group published %d messages", got-seq)
	}

	slow := make([]string, 500)
	for i := range slow {
		slow[i] = `{"ms":100}`
	}
	slowFile := writeLines(t, slow)
	if _, _, err := run(ctx, "", "submit", "-g", "slow", "-t", "sleep", "-f", slowFile); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, "group slow stored", 30*time.Second, func() bool {
		_, ok, err := s.queue.Group(ctx, contracts.Group(client.DefaultTenant, "slow"))
		return err == nil && ok
	})
	seq = lastSeq()
	_, _, err = run(ctx, "", "submit", "-g", "slow", "-t", "sleep", "-f", slowFile, "--priority", "low")
	if err == nil || !strings.Contains(err.Error(), "--priority low: group default/slow exists with priority normal") {
		t.Fatalf("--priority on an existing group: %v", err)
	}
	if got := lastSeq(); got != seq {
		t.Fatalf("a refused submit published %d messages", got-seq)
	}
	// So is an in-flight limit the group was not created with.
	_, _, err = run(ctx, "", "submit", "-g", "slow", "-t", "sleep", "-f", slowFile, "--max-in-flight", "5")
	if err == nil || !strings.Contains(err.Error(), "--max-in-flight 5: group default/slow exists with max in flight 0") {
		t.Fatalf("--max-in-flight on an existing group: %v", err)
	}
	if got := lastSeq(); got != seq {
		t.Fatalf("a refused submit published %d messages", got-seq)
	}
	// Re-running the same command (same total, no new settings) is safe.
	if _, _, err := run(ctx, "", "submit", "-g", "slow", "-t", "sleep", "-f", slowFile); err != nil {
		t.Fatalf("re-run: %v", err)
	}
}

// TestStatusAddsUpWhileRunning: status of a running group once showed
// "16/300 done … 244 waiting" with the jobs on READY or running nowhere,
// and "rate 0.0 jobs/s" beside "eta 1s". At every sample now pending +
// inFlight + nonReady + done + cancelled == jobs, and there is no ETA
// without a rate.
func TestStatusAddsUpWhileRunning(t *testing.T) {
	startSystem(t, true)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	lines := make([]string, 300)
	for i := range lines {
		lines[i] = `{"ms":20}`
	}
	if _, _, err := run(ctx, "", "submit", "-g", "sum", "-t", "sleep", "-f", writeLines(t, lines)); err != nil {
		t.Fatal(err)
	}
	num := func(m map[string]any, k string) int64 {
		f, _ := m[k].(float64)
		return int64(f)
	}
	samples, running := 0, 0
	for {
		out, _, err := run(ctx, "", "status", "sum", "--json")
		if err != nil {
			if strings.Contains(err.Error(), "not found") {
				continue // not ingested yet
			}
			t.Fatal(err)
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(out), &m); err != nil {
			t.Fatal(err)
		}
		samples++
		sum := num(m, "queued") + num(m, "inFlight") + num(m, "backingOff") + num(m, "done") + num(m, "cancelled")
		if sum != num(m, "jobs") {
			t.Fatalf("sample %d: queued %d + inFlight %d + backingOff %d + done %d + cancelled %d = %d, jobs %d",
				samples, num(m, "queued"), num(m, "inFlight"), num(m, "backingOff"), num(m, "done"), num(m, "cancelled"), sum, num(m, "jobs"))
		}
		live := liveJSON(t, m)
		if rate, _ := live["rate"].(float64); rate == 0 && m["state"] != "COMPLETED" && live["etaSeconds"] != nil {
			t.Fatalf("sample %d: ETA %v without a rate", samples, live["etaSeconds"])
		}
		if num(m, "inFlight") > 0 {
			running++
		}
		if m["state"] == "COMPLETED" {
			break
		}
	}
	if running == 0 {
		t.Fatalf("no sample of %d saw a job in READY or running", samples)
	}
}
