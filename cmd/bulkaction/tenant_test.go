package main

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/bulkaction/bulkaction/internal/config"
	"github.com/bulkaction/bulkaction/internal/testkit"
	"github.com/bulkaction/bulkaction/pkg/contracts"
	"github.com/bulkaction/bulkaction/pkg/status"
)

// tenantStatus runs `status --json` of a group with extra args (--tenant)
// and returns the decoded object, or the verb's error.
func tenantStatus(ctx context.Context, gid string, args ...string) (map[string]any, error) {
	out, _, err := run(ctx, "", append([]string{"status", gid, "--json"}, args...)...)
	if err != nil {
		return nil, err
	}
	var m map[string]any
	if err := json.Unmarshal([]byte(out), &m); err != nil {
		return nil, err
	}
	return m, nil
}

// The verbs name a group by tenant and id: --tenant, else
// $BULKACTION_TENANT, else "default".
func TestTenantFlagAndEnv(t *testing.T) {
	s := startSystem(t, true)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	file := writeLines(t, jobLines(20))

	out, _, err := run(ctx, "", "submit", "--tenant", "acme", "-g", "g", "-t", "sleep", "-f", file)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "submitted 20 jobs to group g of tenant acme") || !strings.Contains(out, "bulkaction watch --tenant acme g") {
		t.Errorf("submit printed %q", out)
	}
	if out, _, err := run(ctx, "", "watch", "--tenant", "acme", "g", "--interval", "100ms"); err != nil ||
		!strings.Contains(out, "g COMPLETED: 20 jobs (18 succeeded, 2 failed, 0 cancelled)") {
		t.Fatalf("watch --tenant acme: %v\n%s", err, out)
	}
	if out, _, err := run(ctx, "", "status", "--tenant", "acme", "g"); err != nil || !strings.Contains(out, "g (tenant acme)") ||
		!strings.Contains(out, "20/20 done (18 succeeded, 2 failed, 0 cancelled)") {
		t.Errorf("status --tenant acme: %v\n%s", err, out)
	}
	m, err := tenantStatus(ctx, "g", "--tenant", "acme")
	if err != nil || m["tenant"] != "acme" || m["groupId"] != "g" || m["state"] != "COMPLETED" {
		t.Errorf("status --json --tenant acme: %v %v", err, m)
	}
	// The same id in another tenant, or in the default one, is another group.
	for _, args := range [][]string{{"--tenant", "globex"}, nil} {
		if _, err := tenantStatus(ctx, "g", args...); !errors.Is(err, status.ErrNotFound) {
			t.Errorf("status g %v: %v, want group not found", args, err)
		}
	}

	// $BULKACTION_TENANT is the default; --tenant wins over it.
	t.Setenv(config.Prefix+"_TENANT", "acme")
	if m, err := tenantStatus(ctx, "g"); err != nil || m["tenant"] != "acme" {
		t.Errorf("status g with %s_TENANT=acme: %v %v", config.Prefix, err, m)
	}
	if _, err := tenantStatus(ctx, "g", "--tenant", "globex"); !errors.Is(err, status.ErrNotFound) {
		t.Errorf("--tenant globex with %s_TENANT=acme: %v, want group not found", config.Prefix, err)
	}
	out, _, err = run(ctx, "", "submit", "-g", "g2", "-t", "sleep", "-f", file)
	if err != nil || !strings.Contains(out, "of tenant acme") {
		t.Fatalf("submit with %s_TENANT=acme: %v %q", config.Prefix, err, out)
	}
	if out, _, err := run(ctx, "", "watch", "g2", "--interval", "100ms"); err != nil || !strings.Contains(out, "g2 COMPLETED: 20 jobs") {
		t.Fatalf("watch g2: %v\n%s", err, out)
	}
	if _, ok, err := s.queue.Group(ctx, contracts.Group("acme", "g2")); err != nil || !ok {
		t.Errorf("acme/g2: %v %v, want the group", ok, err)
	}
	if _, ok, err := s.queue.Group(ctx, contracts.Group("default", "g2")); err != nil || ok {
		t.Errorf("default/g2: %v %v, want no group", ok, err)
	}
}

// pause stops a running group (status shows PAUSED and no position),
// resume lets it run to completion.
func TestPauseAndResumeVerbs(t *testing.T) {
	startSystem(t, true, "GLOBAL_RPS", "50")
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	if _, _, err := run(ctx, strings.Repeat(`{"ms":1}`+"\n", 200), "submit", "-g", "pz", "-t", "sleep", "-f", "-"); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, "pz running", 30*time.Second, func() bool {
		m, err := tenantStatus(ctx, "pz")
		return err == nil && m["state"] == "RUNNING" && m["done"].(float64) > 0
	})
	out, _, err := run(ctx, "", "pause", "pz")
	if err != nil || !strings.Contains(out, "pause of group pz (tenant default) accepted") {
		t.Fatalf("pause: %v %q", err, out)
	}
	var m map[string]any
	testkit.WaitFor(t, "pz PAUSED", 30*time.Second, func() bool {
		m, err = tenantStatus(ctx, "pz")
		return err == nil && m["state"] == "PAUSED"
	})
	if live := liveJSON(t, m); live["position"] != nil || live["tenantPosition"] != nil || m["done"].(float64) >= 200 {
		t.Errorf("paused group: position %v tenant position %v done %v; want no position and work left", live["position"], live["tenantPosition"], m["done"])
	}
	out, _, err = run(ctx, "", "status", "pz")
	if err != nil || !strings.Contains(out, "PAUSED") || !strings.Contains(out, "position    paused: not admitted until resumed") {
		t.Errorf("status of a paused group: %v\n%s", err, out)
	}

	out, _, err = run(ctx, "", "resume", "pz")
	if err != nil || !strings.Contains(out, "resume of group pz (tenant default) accepted") {
		t.Fatalf("resume: %v %q", err, out)
	}
	out, _, err = run(ctx, "", "watch", "pz", "--interval", "200ms")
	if err != nil || !strings.Contains(out, "pz COMPLETED: 200 jobs (200 succeeded, 0 failed, 0 cancelled)") {
		t.Fatalf("watch after resume: %v\n%s", err, out)
	}
}

func TestTenantWeightVerb(t *testing.T) {
	s := startSystem(t, false)
	ctx := context.Background()
	verb := func(args ...string) string {
		t.Helper()
		out, _, err := run(ctx, "", append([]string{"tenant", "weight"}, args...)...)
		if err != nil {
			t.Fatalf("tenant weight %v: %v", args, err)
		}
		return out
	}
	if out := verb(); !strings.Contains(out, "every tenant has weight 1") {
		t.Errorf("no weights set: %q", out)
	}
	if out := verb("acme", "3", "--force"); !strings.Contains(out, "tenant acme: weight 3") {
		t.Errorf("set: %q", out)
	}
	if out := verb(); strings.TrimSpace(out) != "acme\t3" {
		t.Errorf("list: %q, want acme 3", out)
	}
	if out := verb("acme"); !strings.Contains(out, "tenant acme: weight 3") {
		t.Errorf("show acme: %q", out)
	}
	if out := verb("globex"); !strings.Contains(out, "tenant globex: weight 1") {
		t.Errorf("show globex: %q", out)
	}
	if w, err := s.queue.TenantWeights(ctx); err != nil || len(w) != 1 || w["acme"] != 3 {
		t.Errorf("weights in Redis: %v %v", w, err)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"acme", "0"}, "between 1 and 1000"},
		{[]string{"acme", "1001"}, "between 1 and 1000"},
		{[]string{"acme", "x"}, "integer from 1 to 1000"},
		{[]string{"a.b", "2"}, "tenant"},
		{[]string{"a.b"}, "tenant"},
	} {
		_, _, err := run(ctx, "", append([]string{"tenant", "weight"}, c.args...)...)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("tenant weight %v: %v, want an error mentioning %q", c.args, err, c.want)
		}
	}
	if w, _ := s.queue.TenantWeights(ctx); w["acme"] != 3 {
		t.Errorf("a refused weight changed acme's: %v", w)
	}
	// Weight 1 is the default: setting it removes the setting.
	verb("acme", "1")
	if out := verb(); !strings.Contains(out, "every tenant has weight 1") {
		t.Errorf("after resetting acme: %q", out)
	}
}

// A cancel --create of a group nobody submitted yet creates it cancelled:
// a later submit to it is refused, publishing nothing.
func TestCancelOfAnUnknownGroup(t *testing.T) {
	s := startSystem(t, true)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	out, _, err := run(ctx, "", "cancel", "--create", "ghost")
	if err != nil || !strings.Contains(out, "group ghost is not known yet; it will be created cancelled") ||
		!strings.Contains(out, "cancel of group ghost accepted") {
		t.Fatalf("cancel of an unknown group: %v %q", err, out)
	}
	testkit.WaitFor(t, "ghost CANCELLED", 30*time.Second, func() bool {
		m, err := tenantStatus(ctx, "ghost")
		return err == nil && m["state"] == "CANCELLED"
	})
	st, err := s.js.Stream(ctx, contracts.Names{Prefix: s.cfg.SubjectPrefix}.StreamSubmit())
	if err != nil {
		t.Fatal(err)
	}
	seq := st.CachedInfo().State.LastSeq
	_, _, err = run(ctx, "", "submit", "-g", "ghost", "-t", "sleep", "-f", writeLines(t, jobLines(5)))
	if err == nil || !strings.Contains(err.Error(), "group default/ghost already ended (CANCELLED)") {
		t.Fatalf("submit to a group cancelled before its first job: %v", err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.LastSeq != seq {
		t.Errorf("a refused submit published %d messages", info.State.LastSeq-seq)
	}
	if out, _, err := run(ctx, "", "cancel", "ghost"); err != nil || !strings.Contains(out, "has already ended") {
		t.Errorf("second cancel: %v %q", err, out)
	}
}

// --max-in-flight is the group's in-flight limit: status shows it, and no
// more of the group's jobs are admitted and unfinished at once.
func TestSubmitMaxInFlight(t *testing.T) {
	s := startSystem(t, true)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	lines := strings.Repeat(`{"ms":30}`+"\n", 100)
	if _, _, err := run(ctx, lines, "submit", "-g", "lim", "-t", "sleep", "-f", "-", "--max-in-flight", "3"); err != nil {
		t.Fatal(err)
	}
	g := contracts.Group("default", "lim")
	most := int64(0)
	testkit.WaitFor(t, "lim COMPLETED", 45*time.Second, func() bool {
		info, ok, err := s.queue.Group(ctx, g)
		if err != nil || !ok {
			return false
		}
		if info.InFlight > 3 {
			t.Fatalf("%d jobs in flight, limit 3", info.InFlight)
		}
		most = max(most, info.InFlight)
		return info.State == contracts.StateCompleted
	})
	if most != 3 {
		t.Errorf("at most %d jobs were in flight, want the limit of 3 reached", most)
	}
	if m, err := tenantStatus(ctx, "lim"); err != nil || m["maxInFlight"] != 3.0 || m["succeeded"] != 100.0 {
		t.Errorf("status --json: %v %v", err, m)
	}
	if out, _, err := run(ctx, "", "status", "lim"); err != nil || !strings.Contains(out, "max in flight  3") {
		t.Errorf("status: %v\n%s", err, out)
	}
}
