package main

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/bulkaction/bulkaction/internal/config"
	"github.com/bulkaction/bulkaction/internal/pipelinetest"
)

// TestThrottlesCountOnlyRateLimits: the "throttles" of a group counted
// every retry, so ordinary retryable errors with no 429 showed as
// throttles. Throttles now count the attempts a downstream rate limited
// (429), retries every retry, in the status from Redis and over the API.
func TestThrottlesCountOnlyRateLimits(t *testing.T) {
	clearEnv(t)
	g := pipelinetest.StartGateway(t, []string{"acme"}, func(c *config.Config) {
		c.MaxRetryCount, c.MaxThrottles = 2, 2
	})
	key := g.Keys["acme"]
	t.Setenv(apiKeyEnv, key)
	for k, v := range map[string]string{"REDIS_URL": g.Config.RedisURL, "REDIS_PREFIX": g.Config.RedisPrefix, "NATS_URL": g.Config.NatsURL} {
		t.Setenv(config.Prefix+"_"+k, v)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	groups := map[string]string{
		"errors":  `{"ms":1,"failRate":1}`,
		"limited": `{"ms":1,"rateLimitRate":1,"retryAfterMs":20}`,
	}
	for gid, payload := range groups {
		file := writeLines(t, []string{payload, payload, payload})
		if _, _, err := run(ctx, "", "submit", "--api", g.URL, "--group", gid, "--type", "sleep", "--file", file); err != nil {
			t.Fatal(err)
		}
		if out, _, err := run(ctx, "", "watch", "--api", g.URL, gid, "--interval", "100ms"); err != nil ||
			!strings.Contains(out, gid+" COMPLETED: 3 jobs (0 succeeded, 3 failed, 0 cancelled)") {
			t.Fatalf("watch %s: %v\n%s", gid, err, out)
		}
	}
	// Each job is retried twice: after errors in "errors", after 429s in
	// "limited" (the third of each fails it).
	want := map[string][2]int64{"errors": {6, 0}, "limited": {6, 6}} // retries, throttles
	for gid, w := range want {
		out, _, err := run(ctx, "", "status", "--tenant", "acme", gid, "--json")
		var m map[string]any
		if err == nil {
			err = json.Unmarshal([]byte(out), &m)
		}
		if err != nil {
			t.Fatalf("status %s --json: %v\n%s", gid, err, out)
		}
		if live := liveJSON(t, m); live["retries"] != float64(w[0]) || live["throttles"] != float64(w[1]) {
			t.Errorf("status %s --json: retries %v, throttles %v; want %d and %d", gid, live["retries"], live["throttles"], w[0], w[1])
		}
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, g.URL+"/v1/groups/"+gid, nil)
		req.Header.Set("Authorization", "Bearer "+key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var v struct {
			Status map[string]any `json:"status"`
		}
		err = json.NewDecoder(resp.Body).Decode(&v)
		resp.Body.Close()
		if err != nil || v.Status == nil {
			t.Fatalf("GET group %s: %v %+v", gid, err, v)
		}
		if v.Status["retries"] != float64(w[0]) || v.Status["throttles"] != float64(w[1]) {
			t.Errorf("GET group %s: retries %v, throttles %v; want %d and %d", gid, v.Status["retries"], v.Status["throttles"], w[0], w[1])
		}
		for _, via := range [][]string{{"status", "--tenant", "acme", gid}, {"status", "--api", g.URL, gid}} {
			out, _, err := run(ctx, "", via...)
			text := plural(w[0], "retry") + ", " + plural(w[1], "throttle")
			if err != nil || !strings.Contains(out, text) {
				t.Errorf("%v lacks %q: %v\n%s", via, text, err, out)
			}
		}
	}
}
