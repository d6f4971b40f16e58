package main

import (
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bulkaction/bulkaction/internal/cli"
	"github.com/bulkaction/bulkaction/internal/config"
	"github.com/bulkaction/bulkaction/internal/pipelinetest"
	"github.com/bulkaction/bulkaction/internal/testkit"
	"github.com/bulkaction/bulkaction/services/gateway"
)

// startGateway runs every target, the gateway on a free port with a key of
// tenant acme and an admin key, and puts acme's key in $BULKACTION_API_KEY.
// It returns the gateway's address and the admin key.
func startGateway(t *testing.T) (api, adminKey string) {
	t.Helper()
	clearEnv(t)
	g := pipelinetest.StartGateway(t, []string{"acme"}, func(c *config.Config) { c.MaxRetryCount = 0 })
	t.Setenv(apiKeyEnv, g.Keys["acme"])
	return g.URL, g.Keys[pipelinetest.Admin]
}

// TestVerbsOverAPI: with --api, submit streams the file to the gateway and
// seals the group, watch follows its events to the end, status prints the
// same table as from Redis (or the API's JSON), groups lists and pages,
// pause, resume and cancel act through the API, and errors show the
// API's problem.
func TestVerbsOverAPI(t *testing.T) {
	api, adminKey := startGateway(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	file := writeLines(t, jobLines(30))

	out, _, err := run(ctx, "", "submit", "--api", api, "--group", "g30", "--type", "sleep", "--file", file, "--priority", "high")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "submitted 30 jobs to group g30 of tenant acme (type sleep, priority high) and sealed it at 30") {
		t.Errorf("submit printed %q", out)
	}
	out, _, err = run(ctx, "", "watch", "--api", api, "g30", "--interval", "100ms")
	if err != nil {
		t.Fatalf("watch: %v\n%s", err, out)
	}
	if !strings.Contains(out, "g30 COMPLETED: 30 jobs (27 succeeded, 3 failed, 0 cancelled) in") {
		t.Errorf("watch printed %q", out)
	}
	out, _, err = run(ctx, "", "status", "--api", api, "g30")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"g30 (tenant acme)", "COMPLETED", "high (base 0)", "30 received, sealed at 30",
		"30/30 done (27 succeeded, 3 failed, 0 cancelled)", "ended", "congestion  NONE"} {
		if !strings.Contains(out, want) {
			t.Errorf("status lacks %q:\n%s", want, out)
		}
	}
	out, _, err = run(ctx, "", "status", "--api", api, "g30", "--json")
	if err != nil {
		t.Fatal(err)
	}
	var view struct {
		State     string `json:"state"`
		Succeeded int64  `json:"succeeded"`
		Status    *struct {
			Congestion string `json:"congestion"`
		} `json:"status"`
	}
	if err := json.Unmarshal([]byte(out), &view); err != nil || view.State != "COMPLETED" || view.Succeeded != 27 || view.Status == nil {
		t.Errorf("status --json: %v\n%s", err, out)
	}

	// The same file again: the group has ended and is refused.
	if _, _, err := run(ctx, "", "submit", "--api", api, "--group", "g30", "--type", "sleep", "--file", file); !errors.Is(err, cli.ErrGroupRefuses) {
		t.Errorf("submit to an ended group: %v", err)
	}

	// pause --create creates the group paused; submit stores its jobs; cancel --wait
	// ends it CANCELLED, and watch exits 3.
	if out, _, err = run(ctx, "", "pause", "--api", api, "--create", "p"); err != nil || !strings.Contains(out, "pause of group p (tenant acme) accepted") {
		t.Fatalf("pause: %v %q", err, out)
	}
	if _, _, err := run(ctx, "", "submit", "--api", api, "--group", "p", "--type", "sleep", "--file", file); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, "p paused", 30*time.Second, func() bool {
		out, _, err := run(ctx, "", "status", "--api", api, "p")
		return err == nil && strings.Contains(out, "PAUSED") && strings.Contains(out, "30 received")
	})
	out, _, err = run(ctx, "", "cancel", "--api", api, "p", "--wait")
	if err != nil || !strings.Contains(out, "cancel of group p accepted") || !strings.Contains(out, "p CANCELLED: 30 jobs (0 succeeded, 0 failed, 30 cancelled)") {
		t.Fatalf("cancel: %v\n%s", err, out)
	}
	if _, _, err := run(ctx, "", "watch", "--api", api, "p"); !errors.Is(err, exitCancelled) {
		t.Errorf("watch of a cancelled group: %v", err)
	}

	// resume of a paused group lets it complete.
	if _, _, err := run(ctx, "", "pause", "--api", api, "--create", "r"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := run(ctx, "", "submit", "--api", api, "--group", "r", "--type", "sleep", "--file", writeLines(t, jobLines(5))); err != nil {
		t.Fatal(err)
	}
	if out, _, err := run(ctx, "", "resume", "--api", api, "r"); err != nil || !strings.Contains(out, "resume of group r (tenant acme) accepted") {
		t.Fatalf("resume: %v %q", err, out)
	}
	if out, _, err := run(ctx, "", "watch", "--api", api, "r"); err != nil || !strings.Contains(out, "r COMPLETED: 5 jobs") {
		t.Fatalf("watch r: %v\n%s", err, out)
	}

	// groups: newest first, filtered, paged.
	out, _, err = run(ctx, "", "groups", "--api", api)
	if err != nil {
		t.Fatal(err)
	}
	var rows [][]string
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		rows = append(rows, strings.Fields(l))
	}
	if len(rows) != 4 || rows[0][0] != "TENANT" || strings.Join(rows[1][:5], " ") != "acme r COMPLETED normal 5/5" ||
		rows[2][1] != "p" || strings.Join(rows[3][:7], " ") != "acme g30 COMPLETED high 30/30 27 3" {
		t.Errorf("groups:\n%s", out)
	}
	out, errOut, err := run(ctx, "", "groups", "--api", api, "--state", "completed", "--limit", "1")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, " r ") || strings.Contains(out, "g30") || !strings.Contains(errOut, "more groups: bulkaction groups --state COMPLETED --cursor ") {
		t.Errorf("groups --limit 1:\n%s\nstderr: %s", out, errOut)
	}
	cursor := strings.TrimSpace(errOut[strings.LastIndex(errOut, " ")+1:])
	out, errOut, err = run(ctx, "", "groups", "--api", api, "--state", "COMPLETED", "--cursor", cursor, "--json")
	if err != nil {
		t.Fatal(err)
	}
	var list struct {
		Groups []struct {
			GroupID string `json:"groupId"`
		} `json:"groups"`
		Next *string `json:"next"`
	}
	if err := json.Unmarshal([]byte(out), &list); err != nil || len(list.Groups) != 1 || list.Groups[0].GroupID != "g30" || list.Next != nil || errOut != "" {
		t.Errorf("second page: %v %+v\n%s\nstderr: %s", err, list, out, errOut)
	}

	// Errors carry the API's problem.
	if _, _, err := run(ctx, "", "status", "--api", api, "nope"); err == nil || !strings.Contains(err.Error(), "404 Not found: no such group") {
		t.Errorf("unknown group: %v", err)
	}
	if _, _, err := run(ctx, "", "groups"); err == nil || !strings.Contains(err.Error(), "--api") {
		t.Errorf("groups without --api: %v", err)
	}

	// An admin key names a tenant: --tenant, else the default tenant.
	t.Setenv(apiKeyEnv, adminKey)
	if out, _, err := run(ctx, "", "status", "--api", api, "--tenant", "acme", "g30"); err != nil || !strings.Contains(out, "g30 (tenant acme)") {
		t.Errorf("admin status --tenant acme: %v\n%s", err, out)
	}
	if _, _, err := run(ctx, "", "status", "--api", api, "g30"); err == nil || !strings.Contains(err.Error(), "404") {
		t.Errorf("admin status of the default tenant's g30: %v", err)
	}
	t.Setenv(apiEnv, api)
	if out, _, err := run(ctx, "", "groups", "--tenant", "acme", "--limit", "10"); err != nil || strings.Count(out, "acme") != 3 {
		t.Errorf("admin groups of acme (--api from $%s): %v\n%s", apiEnv, err, out)
	}
	t.Setenv(apiKeyEnv, "bak_unknown")
	if _, _, err := run(ctx, "", "status", "g30"); err == nil || !strings.Contains(err.Error(), "401 Missing or unknown API key") || strings.Contains(err.Error(), "bak_unknown") {
		t.Errorf("unknown key: %v", err)
	}
	t.Setenv(apiKeyEnv, "")
	if _, _, err := run(ctx, "", "status", "g30"); err == nil || !strings.Contains(err.Error(), apiKeyEnv) {
		t.Errorf("no key: %v", err)
	}
}

// TestGatewayKey: `bulkaction gateway key` prints a new key and the keys
// file line that lets it in; `bulkaction gateway` still runs the target.
func TestGatewayKey(t *testing.T) {
	clearEnv(t)
	ctx := context.Background()
	for _, tc := range []struct {
		args []string
		want gateway.Principal
	}{
		{[]string{"--tenant", "acme", "--name", "ci"}, gateway.Principal{Tenant: "acme", Name: "ci"}},
		{[]string{"--admin"}, gateway.Principal{Admin: true}},
	} {
		out, _, err := run(ctx, "", append([]string{"gateway", "key"}, tc.args...)...)
		if err != nil {
			t.Fatal(err)
		}
		var key, line string
		for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
			switch {
			case strings.HasPrefix(l, gateway.KeyPrefix):
				key = l
			case strings.HasPrefix(l, "sha256:"):
				line = l
			}
		}
		keys, err := gateway.ParseKeys(strings.NewReader(line))
		if err != nil || key == "" || len(keys) != 1 || keys[gateway.HashKey(key)] != tc.want || line != gateway.KeyLine(key, map[bool]string{true: "*", false: "acme"}[tc.want.Admin], tc.want.Name) {
			t.Errorf("gateway key %v printed %q (parsed %v, %v)", tc.args, out, keys, err)
		}
	}
	// --append adds the line to a keys file and prints only the key.
	keysFile := filepath.Join(t.TempDir(), "keys")
	for i := 0; i < 2; i++ {
		out, _, err := run(ctx, "", "gateway", "key", "--tenant", "acme", "--append", keysFile)
		if err != nil {
			t.Fatal(err)
		}
		k, err := gateway.LoadKeys(keysFile, nil)
		if err != nil || k.Len() != i+1 {
			t.Fatalf("keys file after %d keys: %v", i+1, err)
		}
		if p, ok := k.Lookup(strings.TrimSpace(lastLine(out))); !ok || p.Tenant != "acme" {
			t.Errorf("the printed key is not in the keys file: %q", out)
		}
	}
	for _, args := range [][]string{{}, {"--tenant", "bad tenant"}, {"--tenant", "acme", "--admin"}, {"--tenant", "acme", "--name", "two words"}} {
		if _, _, err := run(ctx, "", append([]string{"gateway", "key"}, args...)...); err == nil {
			t.Errorf("gateway key %v: no error", args)
		}
	}
	gw, rest, err := newRoot().Find([]string{"gateway"})
	if err != nil || len(rest) != 0 || gw.Name() != "gateway" || !gw.Runnable() || !gw.HasSubCommands() {
		t.Errorf("bulkaction gateway: %v %v runnable=%v", gw, err, gw.Runnable())
	}
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}
