package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/bulkaction/bulkaction/internal/cli"
	"github.com/bulkaction/bulkaction/pkg/client"
	"github.com/bulkaction/bulkaction/pkg/contracts"
	"github.com/bulkaction/bulkaction/pkg/redisq"
)

// `tenant quota` lists the defaults and the tenants with limits of their
// own, shows one tenant's limits and counts, sets a tenant's own limit (0 =
// unlimited) and removes it ("default").
func TestTenantQuotaVerb(t *testing.T) {
	s := startSystem(t, false, "TENANT_MAX_ACTIVE_GROUPS", "10")
	ctx := context.Background()
	verb := func(args ...string) string {
		t.Helper()
		out, _, err := run(ctx, "", append([]string{"tenant", "quota"}, args...)...)
		if err != nil {
			t.Fatalf("tenant quota %v: %v", args, err)
		}
		return out
	}
	defaults := "defaults (BULKACTION_TENANT_MAX_QUEUED_JOBS, BULKACTION_TENANT_MAX_ACTIVE_GROUPS here): max queued jobs unlimited, max active groups 10"
	if out := verb(); !strings.Contains(out, defaults) || !strings.Contains(out, "no tenant has a quota of its own") {
		t.Errorf("no quotas set: %q", out)
	}
	if _, err := s.queue.EnqueueBatch(ctx, []redisq.Job{{Group: contracts.Group("acme", "g"), ID: "1", Type: "t"}, {Group: contracts.Group("acme", "g"), ID: "2", Type: "t"}}); err != nil {
		t.Fatal(err)
	}
	if out := verb("acme", "--max-queued-jobs", "1000"); !strings.Contains(out,
		"tenant acme: max queued jobs 1000, 2 queued now; max active groups default (10), 1 active now") {
		t.Errorf("set: %q", out)
	}
	if out := verb("acme", "--max-active-groups", "0"); !strings.Contains(out, "max queued jobs 1000, 2 queued now; max active groups unlimited, 1 active now") {
		t.Errorf("set unlimited: %q", out)
	}
	if out := verb("globex"); !strings.Contains(out, "tenant globex: max queued jobs default (unlimited), 0 queued now; max active groups default (10), 0 active now") {
		t.Errorf("show globex: %q", out)
	}
	out := verb()
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 3 || lines[0] != defaults || !strings.HasPrefix(lines[1], "TENANT") ||
		strings.Join(strings.Fields(lines[2]), " ") != "acme 1000 unlimited 2 1" {
		t.Errorf("list: %q", out)
	}
	if tq, err := s.queue.TenantQuota(ctx, "acme"); err != nil || tq.MaxQueuedJobs != 1000 || !tq.OwnQueuedJobs || tq.MaxActiveGroups != 0 || !tq.OwnActiveGroups {
		t.Errorf("acme in Redis: %+v %v", tq, err)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"acme", "--max-queued-jobs", "-1"}, "must be a whole number >= 0 (0 = unlimited) or \"default\""},
		{[]string{"acme", "--max-active-groups", "x"}, "--max-active-groups \"x\""},
		{[]string{"--max-queued-jobs", "5"}, "name the tenant"},
		{[]string{"a.b", "--max-queued-jobs", "5"}, "tenant"},
		{[]string{"acme", "globex"}, "accepts at most 1 arg"},
	} {
		_, _, err := run(ctx, "", append([]string{"tenant", "quota"}, c.args...)...)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("tenant quota %v: %v, want an error mentioning %q", c.args, err, c.want)
		}
	}
	if tq, _ := s.queue.TenantQuota(ctx, "acme"); tq.MaxQueuedJobs != 1000 || tq.MaxActiveGroups != 0 {
		t.Errorf("a refused setting changed acme's: %+v", tq)
	}
	// "default" removes the tenant's own limits.
	if out := verb("acme", "--max-queued-jobs", "default", "--max-active-groups", "default"); !strings.Contains(out,
		"tenant acme: max queued jobs default (unlimited), 2 queued now; max active groups default (10), 1 active now") {
		t.Errorf("reset: %q", out)
	}
	if out := verb(); !strings.Contains(out, "no tenant has a quota of its own") {
		t.Errorf("after the reset: %q", out)
	}
}

// submit refuses, before publishing anything, a submission its tenant's
// quotas would refuse, naming the quota and its limit; with room it goes
// through.
func TestSubmitRefusesOverQuota(t *testing.T) {
	s := startSystem(t, false, "TENANT_MAX_QUEUED_JOBS", "10", "TENANT_MAX_ACTIVE_GROUPS", "1")
	ctx := context.Background()
	var busy []redisq.Job
	for i := range 8 {
		busy = append(busy, redisq.Job{Group: contracts.Group(client.DefaultTenant, "busy"), ID: fmt.Sprint("b", i), Type: "t"})
	}
	if _, err := s.queue.EnqueueBatch(ctx, busy); err != nil {
		t.Fatal(err)
	}
	file := writeLines(t, jobLines(5))
	before := s.submitMsgs(t)

	_, _, err := run(ctx, "", "submit", "-g", "new", "-t", "sleep", "-f", file)
	if !errors.Is(err, cli.ErrOverQuota) || !strings.Contains(err.Error(), "tenant.maxActiveGroups is 1 and tenant default has 1 active groups") ||
		!strings.Contains(err.Error(), "Nothing was submitted") {
		t.Fatalf("a second group: %v", err)
	}
	if _, _, err := run(ctx, "", "tenant", "quota", client.DefaultTenant, "--max-active-groups", "2"); err != nil {
		t.Fatal(err)
	}
	_, _, err = run(ctx, "", "submit", "-g", "new", "-t", "sleep", "-f", file)
	if !errors.Is(err, cli.ErrOverQuota) || !strings.Contains(err.Error(), "tenant.maxQueuedJobs is 10 and tenant default has 8 queued jobs") ||
		!strings.Contains(err.Error(), "5 new jobs would make 13") {
		t.Fatalf("13 queued jobs: %v", err)
	}
	if got := s.submitMsgs(t); got != before {
		t.Fatalf("refused submissions published %d messages", got-before)
	}
	// Exactly at the limit: accepted.
	if _, _, err := run(ctx, "", "tenant", "quota", client.DefaultTenant, "--max-queued-jobs", "13"); err != nil {
		t.Fatal(err)
	}
	if out, _, err := run(ctx, "", "submit", "-g", "new", "-t", "sleep", "-f", file); err != nil || !strings.Contains(out, "submitted 5 jobs") {
		t.Fatalf("submit with room: %v %q", err, out)
	}
	if got := s.submitMsgs(t); got != before+2 {
		t.Errorf("published %d messages, want 2 (the jobs and the seal)", got-before)
	}
}
