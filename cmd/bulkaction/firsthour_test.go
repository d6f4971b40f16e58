package main

import (
	"context"
	"encoding/json"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/bulkaction/bulkaction/internal/config"
	"github.com/bulkaction/bulkaction/internal/testkit"
	"github.com/bulkaction/bulkaction/pkg/client"
	"github.com/bulkaction/bulkaction/pkg/contracts"
	"github.com/bulkaction/bulkaction/pkg/redisq"
)

// TestSubmitReadsAPIJobFormat: a file in the API's own NDJSON job format
// (the README's jobs.ndjson) was read as payload lines: every whole line
// became a payload, every id a line number, and every job then failed
// (unknown field "jobId"). Its format is now recognised and said.
func TestSubmitReadsAPIJobFormat(t *testing.T) {
	s := startSystem(t, true)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	file := writeLines(t, []string{
		`{"jobId":"c1","type":"sleep","payload":{"ms":5}}`,
		`{"jobId":"c2","type":"sleep","payload":{"ms":5}}`,
	})
	out, errOut, err := run(ctx, "", "submit", "--group", "api-format", "--type", "sleep", "--file", file)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(errOut, "read 2 jobs in the API's job format") || !strings.Contains(out, "submitted 2 jobs to group api-format") {
		t.Errorf("submit printed %q, stderr %q", out, errOut)
	}
	out, _, err = run(ctx, "", "watch", "api-format", "--interval", "100ms")
	if err != nil || !strings.Contains(out, "api-format COMPLETED: 2 jobs (2 succeeded, 0 failed, 0 cancelled)") {
		t.Fatalf("watch: %v\n%s", err, out)
	}
	for _, id := range []string{"c1", "c2"} {
		if !s.jobStored(t, "api-format", id) {
			t.Errorf("job %q not stored under its own id", id)
		}
	}

	// Without --type: each line names its type.
	out, _, err = run(ctx, "", "submit", "--group", "api-format-2", "--file", file)
	if err != nil || !strings.Contains(out, "(type sleep,") {
		t.Errorf("submit without --type: %v %q", err, out)
	}
	// A payload file needs --type.
	if _, _, err := run(ctx, "", "submit", "--group", "p", "--file", writeLines(t, []string{`{"ms":1}`})); err == nil || !strings.Contains(err.Error(), "--type") {
		t.Errorf("payload file without --type: %v", err)
	}
	// A repeated id is refused, naming both lines.
	dup := writeLines(t, []string{
		`{"jobId":"c1","type":"sleep","payload":{"ms":5}}`,
		`{"jobId":"c2","type":"sleep","payload":{"ms":5}}`,
		`{"jobId":"c1","type":"sleep","payload":{"ms":6}}`,
	})
	if _, _, err := run(ctx, "", "submit", "--group", "dup", "--file", dup); err == nil || !strings.Contains(err.Error(), `line 3: field jobId: "c1" repeats the job id of line 1`) {
		t.Errorf("repeated id: %v", err)
	}
	// --format payload reads the same file the old way, on request.
	_, errOut, err = run(ctx, "", "submit", "--group", "as-payloads", "--type", "sleep", "--format", "payload", "--file", file)
	if err != nil || !strings.Contains(errOut, "as one payload per line") {
		t.Errorf("--format payload: %v %q", err, errOut)
	}
}

// TestControlVerbsRefuseUnknownGroups: "pause newsletter-24" (a typo)
// printed "accepted" and created an empty paused group that no list
// showed; pause and resume of a COMPLETED group printed "accepted"; watch
// of a typo waited forever.
func TestControlVerbsRefuseUnknownGroups(t *testing.T) {
	s := startSystem(t, true)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	before := s.submitMsgs(t)
	for _, verb := range []string{"pause", "resume", "cancel"} {
		_, _, err := run(ctx, "", verb, "newsletter-24")
		if err == nil || !strings.Contains(err.Error(), "group newsletter-24 of tenant default does not exist") {
			t.Errorf("%s of an unknown group: %v", verb, err)
			continue
		}
		if hasCreate := strings.Contains(err.Error(), "--create"); hasCreate != (verb != "resume") {
			t.Errorf("%s: the --create hint is wrong: %v", verb, err)
		}
	}
	if n := s.submitMsgs(t); n != before {
		t.Errorf("refused controls published %d messages", n-before)
	}

	start := time.Now()
	out, _, err := run(ctx, "", "watch", "newsletter-4", "--appear-timeout", "1s", "--interval", "100ms")
	if err == nil || !strings.Contains(err.Error(), "does not exist") || time.Since(start) > 10*time.Second {
		t.Errorf("watch of an unknown group: %v after %s\n%s", err, time.Since(start), out)
	}

	if _, _, err := run(ctx, "", "submit", "-g", "done", "-t", "sleep", "-f", writeLines(t, jobLines(3))); err != nil {
		t.Fatal(err)
	}
	// Submitted and not stored yet is not unknown: watch waits for it.
	if out, _, err := run(ctx, "", "watch", "done", "--appear-timeout", "1ms", "--interval", "100ms"); err != nil {
		t.Fatalf("watch of a group just submitted: %v\n%s", err, out)
	}
	for _, verb := range []string{"pause", "resume"} {
		out, _, err := run(ctx, "", verb, "done")
		if err == nil || !strings.Contains(err.Error(), "has already ended (COMPLETED): there is nothing to "+verb) || strings.Contains(out, "accepted") {
			t.Errorf("%s of a completed group: %v %q", verb, err, out)
		}
	}

	// --create: the rare intended case, and the group is listed.
	out, _, err = run(ctx, "", "pause", "--create", "early")
	if err != nil || !strings.Contains(out, "pause of group early (tenant default) accepted") {
		t.Fatalf("pause --create: %v %q", err, out)
	}
	testkit.WaitFor(t, "early paused", 10*time.Second, func() bool {
		m := statusJSON(t, ctx, "early")
		return m["state"] == "PAUSED"
	})
	groups, _, err := s.queue.ListGroups(ctx, redisq.ListOptions{Tenant: client.DefaultTenant})
	if err != nil {
		t.Fatal(err)
	}
	listed := false
	for _, g := range groups {
		listed = listed || g.Group.ID == "early"
	}
	if !listed {
		t.Errorf("a group created by pause --create is not listed")
	}
	if out, _, err := run(ctx, "", "cancel", "--create", "early-cancel"); err != nil || !strings.Contains(out, "cancel of group early-cancel accepted") {
		t.Errorf("cancel --create: %v %q", err, out)
	}
}

// TestStatsAndTenantRefuseAPI: stats and tenant ignored --api and read the
// default Redis, showing another system's data without a word.
func TestStatsAndTenantRefuseAPI(t *testing.T) {
	startSystem(t, false)
	ctx := context.Background()
	for _, args := range [][]string{
		{"stats"}, {"tenant", "weight"}, {"tenant", "weight", "acme", "3"}, {"tenant", "quota"},
	} {
		_, _, err := run(ctx, "", append([]string{"--api", "http://127.0.0.1:1"}, args...)...)
		if err == nil || !strings.Contains(err.Error(), "cannot use the HTTP API") || !strings.Contains(err.Error(), `--api ""`) {
			t.Errorf("%v --api: %v", args, err)
		}
	}
	// $BULKACTION_API with the servers named too (dev's export line): read
	// them, and say so.
	t.Setenv(apiEnv, "http://127.0.0.1:1")
	if _, errOut, err := run(ctx, "", "stats"); err != nil || !strings.Contains(errOut, "note: stats reads Redis at redis://") {
		t.Errorf("stats with $%s and the servers named: %v %q", apiEnv, err, errOut)
	}
	// … without BULKACTION_REDIS_URL it would read the default Redis.
	t.Setenv(config.Prefix+"_REDIS_URL", "")
	if _, _, err := run(ctx, "", "tenant", "weight"); err == nil || !strings.Contains(err.Error(), "$"+apiEnv) {
		t.Errorf("tenant weight with $%s and no Redis named: %v", apiEnv, err)
	}
	// --api "" reads the servers configured here (whatever they hold).
	if _, _, err := run(ctx, "", "stats", "--api", ""); err != nil && strings.Contains(err.Error(), "HTTP API") {
		t.Errorf(`stats --api "": %v`, err)
	}
}

// TestTenantWeightOfUnknownTenant: "tenant weight nosuchtenant 5" was
// accepted silently.
func TestTenantWeightOfUnknownTenant(t *testing.T) {
	startSystem(t, true)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	_, _, err := run(ctx, "", "tenant", "weight", "nosuchtenant", "5")
	if err == nil || !strings.Contains(err.Error(), "tenant nosuchtenant has no groups") || !strings.Contains(err.Error(), "--force") {
		t.Errorf("weight of an unknown tenant: %v", err)
	}
	if out, _, _ := run(ctx, "", "tenant", "weight", "nosuchtenant"); !strings.Contains(out, "weight 1") {
		t.Errorf("the refused weight was set: %q", out)
	}
	if out, _, err := run(ctx, "", "tenant", "weight", "nosuchtenant", "5", "--force"); err != nil || !strings.Contains(out, "weight 5") {
		t.Errorf("--force: %v %q", err, out)
	}
	if _, _, err := run(ctx, "", "submit", "--tenant", "acme", "-g", "g", "-t", "sleep", "-f", writeLines(t, jobLines(2))); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, "acme's group", 10*time.Second, func() bool {
		_, _, err := run(ctx, "", "status", "--tenant", "acme", "g")
		return err == nil
	})
	if out, _, err := run(ctx, "", "tenant", "weight", "acme", "2"); err != nil || !strings.Contains(out, "tenant acme: weight 2") {
		t.Errorf("weight of a known tenant: %v %q", err, out)
	}
	if _, _, err := run(ctx, "", "tenant", "weight", "acme", "1001"); err == nil || strings.Contains(err.Error(), "redisq") {
		t.Errorf("weight 1001: %v", err)
	}
}

// TestErrorsSayWhatToDo runs the binary: errors carried package prefixes
// ("bulkaction: cli: …", "config: envconfig.Process: assigning …"), four
// lines of go-redis pool noise came before the message when Redis was
// down, a down gateway was a raw dial error, and config printed only the
// defaults.
func TestErrorsSayWhatToDo(t *testing.T) {
	clearEnv(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := l.Addr().String()
	l.Close()
	env := func(kv ...string) []string {
		out := []string{config.Prefix + "_LOG_LEVEL=warn"}
		for i := 0; i < len(kv); i += 2 {
			out = append(out, config.Prefix+"_"+kv[i]+"="+kv[i+1])
		}
		return out
	}

	_, errOut, code := runBinary(t, env("GLOBAL_RPS", "abc"), "status", "g")
	if code != 1 || !strings.HasPrefix(errOut, `bulkaction: BULKACTION_GLOBAL_RPS: "abc" is not a whole number; set a whole number, or unset BULKACTION_GLOBAL_RPS for the default (10000)`) ||
		strings.Contains(errOut, "envconfig") || strings.Count(strings.TrimSpace(errOut), "\n") != 0 {
		t.Errorf("bad setting: exit %d, stderr %q", code, errOut)
	}
	_, errOut, code = runBinary(t, env("GLOBAL_RPS", "0"), "status", "g")
	if code != 1 || strings.Contains(errOut, "config:") || !strings.Contains(errOut, "BULKACTION_GLOBAL_RPS=0: must be at least 1") {
		t.Errorf("out-of-range setting: exit %d, stderr %q", code, errOut)
	}

	_, errOut, code = runBinary(t, env("REDIS_URL", "redis://"+closed+"/0"), "status", "g")
	lines := strings.Split(strings.TrimSpace(errOut), "\n")
	if code != 1 || len(lines) != 1 || strings.Contains(errOut, "pool") ||
		!strings.HasPrefix(lines[0], "bulkaction: Redis at redis://"+closed+"/0 (BULKACTION_REDIS_URL) does not answer") ||
		!strings.Contains(lines[0], "bulkaction dev") {
		t.Errorf("Redis down: exit %d, stderr:\n%s", code, errOut)
	}

	_, errOut, code = runBinary(t, append(env("API_KEY", "bak_x"), "BULKACTION_API=http://"+closed), "status", "g")
	if code != 1 || !strings.Contains(errOut, "the gateway at http://"+closed+" does not answer (connection refused)") ||
		!strings.Contains(errOut, "bulkaction dev") || strings.Contains(errOut, "apiclient") {
		t.Errorf("gateway down: exit %d, stderr %q", code, errOut)
	}

	// Errors of a running system carry no package prefix either.
	startSystem(t, false)
	_, _, err = run(context.Background(), "", "status", "nope")
	if err == nil || strings.HasPrefix(err.Error(), "cli:") || !strings.Contains(err.Error(), "group not found") {
		t.Errorf("status of an unknown group: %v", err)
	}

	// config shows the settings in effect.
	out, _, code := runBinary(t, env("GLOBAL_RPS", "400", "REDIS_PASSWORD", "s3cret"), "config")
	var rps, pw string
	for _, l := range strings.Split(out, "\n") {
		switch f := strings.Fields(l); {
		case len(f) > 2 && f[0] == "BULKACTION_GLOBAL_RPS":
			rps = strings.Join(f[1:3], " ")
		case len(f) > 2 && f[0] == "BULKACTION_REDIS_PASSWORD":
			pw = strings.Join(f[1:3], " ")
		}
	}
	if code != 0 || rps != "400 environment" || pw != "(set) environment" || strings.Contains(out, "s3cret") {
		t.Errorf("config: exit %d, GLOBAL_RPS %q, REDIS_PASSWORD %q\n%s", code, rps, pw, out)
	}
}

// TestStatusTextPausedAndHeld: a paused group showed "eta 2s" and "rate
// 274.3 jobs/s (over the last 0s)"; a group held by its in-flight limit
// showed "position not waiting (1 groups wait)"; "throttles" counted
// ordinary errors as well as 429s.
func TestStatusTextPausedAndHeld(t *testing.T) {
	startSystem(t, true)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	slow := make([]string, 50)
	for i := range slow {
		slow[i] = `{"ms":300}`
	}
	if _, _, err := run(ctx, "", "submit", "-g", "held", "-t", "sleep", "--max-in-flight", "1", "-f", writeLines(t, slow)); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, "held at its in-flight limit", 20*time.Second, func() bool {
		m := statusJSON(t, ctx, "held")
		w, _ := liveJSON(t, m)["waiting"].([]any)
		for _, h := range w {
			if h.(map[string]any)["reason"] == "in_flight_limit" {
				return true
			}
		}
		return false
	})
	out, _, err := run(ctx, "", "status", "held")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out, "not waiting") || strings.Contains(out, "1 groups") || !strings.Contains(out, "0 retries, 0 throttles") {
		t.Errorf("status of a group at its in-flight limit:\n%s", out)
	}

	if _, _, err := run(ctx, "", "pause", "held"); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, "held paused", 10*time.Second, func() bool { return statusJSON(t, ctx, "held")["state"] == "PAUSED" })
	out, _, err = run(ctx, "", "status", "held")
	if err != nil {
		t.Fatal(err)
	}
	row := func(name string) string {
		for _, l := range strings.Split(out, "\n") {
			if f := strings.Fields(l); len(f) > 0 && f[0] == name {
				return strings.TrimSpace(strings.TrimPrefix(l, name))
			}
		}
		return ""
	}
	if row("eta") != "none while paused" || row("rate") != "none while paused" || strings.Contains(out, "over the last 0s") {
		t.Errorf("status of a paused group:\n%s", out)
	}
	if m := liveJSON(t, statusJSON(t, ctx, "held")); m["etaSeconds"] != nil || m["rate"] != 0.0 {
		t.Errorf("status --json of a paused group: eta %v rate %v", m["etaSeconds"], m["rate"])
	}
}

// TestSealAboveDistinctJobsIsReported: a group sealed above its distinct
// jobs (a repeated id in one request) stayed RUNNING with "nothing holds
// it" and an ETA. Status now says it waits for the missing jobs, and has
// no ETA.
func TestSealAboveDistinctJobsIsReported(t *testing.T) {
	s := startSystem(t, true)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cl := client.New(s.js, client.Options{Names: contracts.Names{Prefix: s.cfg.SubjectPrefix}})
	jobs := []client.Job{{ID: "a", Type: "sleep", Payload: []byte(`{"ms":1}`)}, {ID: "b", Type: "sleep", Payload: []byte(`{"ms":1}`)}}
	if err := cl.Submit(ctx, "short", jobs...); err != nil {
		t.Fatal(err)
	}
	if err := cl.Seal(ctx, "short", 3); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, "both jobs done", 20*time.Second, func() bool {
		m := statusJSON(t, ctx, "short")
		return m["done"] == 2.0
	})
	out, _, err := run(ctx, "", "status", "short")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "sealed at 3 but 2 distinct jobs received: it waits for 1 more job to be submitted") ||
		!strings.Contains(out, "none until the missing jobs are submitted") {
		t.Errorf("status of a group sealed above its jobs:\n%s", out)
	}
	m := statusJSON(t, ctx, "short")
	w, _ := liveJSON(t, m)["waiting"].([]any)
	if liveJSON(t, m)["etaSeconds"] != nil || len(w) != 1 || w[0].(map[string]any)["reason"] != "awaiting_jobs" {
		b, _ := json.Marshal(m)
		t.Errorf("status --json: %s", b)
	}
	// The missing job completes it.
	if err := cl.Submit(ctx, "short", client.Job{ID: "c", Type: "sleep", Payload: []byte(`{"ms":1}`)}); err != nil {
		t.Fatal(err)
	}
	if out, _, err := run(ctx, "", "watch", "short", "--interval", "100ms"); err != nil || !strings.Contains(out, "short COMPLETED: 3 jobs") {
		t.Errorf("watch: %v\n%s", err, out)
	}
}
