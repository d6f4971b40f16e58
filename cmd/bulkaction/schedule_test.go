package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/bulkaction/bulkaction/internal/testkit"
	"github.com/bulkaction/bulkaction/pkg/contracts"
	"github.com/bulkaction/bulkaction/pkg/status"
)

// groupSchedule reads status --json of a group: its notBefore and why it
// waits.
func groupSchedule(t *testing.T, ctx context.Context, args ...string) (notBefore time.Time, waiting string) {
	t.Helper()
	out, _, err := run(ctx, "", append([]string{"status", "--json"}, args...)...)
	if err != nil {
		t.Fatalf("status %v: %v", args, err)
	}
	var v struct {
		NotBefore *time.Time `json:"notBefore"`
		Status    *struct {
			Waiting []struct {
				Detail string `json:"detail"`
			} `json:"waiting"`
		} `json:"status"`
	}
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		t.Fatalf("status --json %q: %v", out, err)
	}
	if v.NotBefore != nil {
		notBefore = *v.NotBefore
	}
	if v.Status != nil && len(v.Status.Waiting) > 0 {
		waiting = v.Status.Waiting[0].Detail
	}
	return notBefore, waiting
}

// TestScheduleVerbs: submit --not-before holds a group, status says it is
// scheduled until then, `schedule --not-before` moves its start over NATS
// (later, then now: it completes); `tenant windows` sets, shows and clears
// a tenant's default windows in Redis; bad flags are refused naming them.
func TestScheduleVerbs(t *testing.T) {
	s := startSystem(t, true)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	file := writeLines(t, []string{`{"ms":1}`, `{"ms":1}`})
	if _, _, err := run(ctx, "", "submit", "--tenant", "acme", "--group", "later", "--type", "sleep", "--file", file, "--not-before", "1h"); err != nil {
		t.Fatal(err)
	}
	g := contracts.Group("acme", "later")
	testkit.WaitFor(t, "the group stored", 10*time.Second, func() bool {
		info, ok, err := s.queue.Group(ctx, g)
		return err == nil && ok && info.Jobs == 2
	})
	first, waiting := groupSchedule(t, ctx, "--tenant", "acme", "later")
	if d := time.Until(first); d < 59*time.Minute || d > time.Hour || !strings.HasPrefix(waiting, "scheduled until ") {
		t.Fatalf("after submit --not-before 1h: notBefore in %v, waiting %q", d, waiting)
	}
	later := first.Add(time.Hour).Truncate(time.Second)
	out, _, err := run(ctx, "", "schedule", "--tenant", "acme", "later", "--not-before", later.Format(time.RFC3339))
	if err != nil || !strings.Contains(out, "schedule of group later (tenant acme) accepted: not before "+status.ScheduleTime(later)) {
		t.Fatalf("schedule later: %q, %v", out, err)
	}
	testkit.WaitFor(t, "the later start", 10*time.Second, func() bool {
		nb, w := groupSchedule(t, ctx, "--tenant", "acme", "later")
		return nb.Equal(later) && w == "scheduled until "+status.ScheduleTime(later)
	})
	if _, _, err := run(ctx, "", "schedule", "--tenant", "acme", "later", "--not-before", "now"); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, "the group to complete", 30*time.Second, func() bool {
		info, _, err := s.queue.Group(ctx, g)
		return err == nil && info.State == contracts.StateCompleted
	})

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"schedule", "--tenant", "acme", "later"}, "--not-before"},
		{[]string{"schedule", "--tenant", "acme", "later", "--not-before", "tomorrow"}, "--not-before"},
		{[]string{"submit", "--tenant", "acme", "--group", "bad", "--type", "sleep", "--file", file, "--window", "mon-fri 09:00-17:00 Mars/Olympus"}, "zone"},
		{[]string{"tenant", "windows", "acme", "--window", "someday 09:00-17:00 UTC"}, "--window[0]"},
	} {
		if _, _, err := run(ctx, "", tc.args...); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v, want an error naming %s", tc.args, err, tc.want)
		}
	}

	out, _, err = run(ctx, "", "tenant", "windows", "acme", "--window", "mon-fri 08:00-20:00 Europe/Berlin", "--window", "sat 10:00-14:00 Europe/Berlin")
	want := "tenant acme: default sending windows mon,tue,wed,thu,fri 08:00-20:00 Europe/Berlin; sat 10:00-14:00 Europe/Berlin\n"
	if err != nil || out != want {
		t.Fatalf("tenant windows set: %q, %v; want %q", out, err, want)
	}
	if ws, err := s.queue.TenantWindows(ctx, "acme"); err != nil || len(ws) != 2 {
		t.Fatalf("in Redis: %v, %v", ws, err)
	}
	if out, _, err = run(ctx, "", "tenant", "windows", "acme"); err != nil || out != want {
		t.Errorf("tenant windows: %q, %v", out, err)
	}
	if out, _, err = run(ctx, "", "tenant", "windows", "acme", "--clear"); err != nil || !strings.Contains(out, "no default sending windows") {
		t.Errorf("tenant windows --clear: %q, %v", out, err)
	}
}

// TestScheduleVerbsOverAPI: with --api, submit --not-before and --window
// reach the gateway, status says why the group waits, schedule moves its
// start, and tenant windows reads, sets and clears the tenant's default
// windows through GET and PUT /v1/windows, answering the gateway's
// refusals.
func TestScheduleVerbsOverAPI(t *testing.T) {
	api, _ := startGateway(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	file := writeLines(t, []string{`{"ms":1}`, `{"ms":1}`})
	if _, _, err := run(ctx, "", "submit", "--api", api, "--group", "later", "--type", "sleep", "--file", file,
		"--not-before", "1h", "--window", "mon-sun 00:00-24:00 UTC"); err != nil {
		t.Fatal(err)
	}
	var first time.Time
	testkit.WaitFor(t, "the group scheduled", 10*time.Second, func() bool {
		out, _, err := run(ctx, "", "status", "--api", api, "--json", "later")
		if err != nil {
			return false
		}
		var v struct {
			NotBefore *time.Time `json:"notBefore"`
		}
		if json.Unmarshal([]byte(out), &v) != nil || v.NotBefore == nil {
			return false
		}
		first = *v.NotBefore
		return true
	})
	out, _, err := run(ctx, "", "status", "--api", api, "later")
	if err != nil || !strings.Contains(out, "scheduled until "+status.ScheduleTime(first)) ||
		!strings.Contains(out, "windows mon,tue,wed,thu,fri,sat,sun 00:00-24:00 UTC") {
		t.Fatalf("status: %q, %v", out, err)
	}
	later := first.Add(time.Hour).Truncate(time.Second)
	if out, _, err = run(ctx, "", "schedule", "--api", api, "later", "--not-before", later.Format(time.RFC3339)); err != nil ||
		!strings.Contains(out, "accepted: not before "+status.ScheduleTime(later)) {
		t.Fatalf("schedule: %q, %v", out, err)
	}
	testkit.WaitFor(t, "the later start", 10*time.Second, func() bool {
		out, _, err := run(ctx, "", "status", "--api", api, "later")
		return err == nil && strings.Contains(out, "scheduled until "+status.ScheduleTime(later))
	})
	if _, _, err := run(ctx, "", "schedule", "--api", api, "nope", "--not-before", "1h"); err == nil || !strings.Contains(err.Error(), "nope") {
		t.Errorf("schedule of an unknown group: %v", err)
	}

	if out, _, err = run(ctx, "", "tenant", "windows", "--api", api, "acme"); err != nil || !strings.Contains(out, "tenant acme: no default sending windows") {
		t.Fatalf("tenant windows before any: %q, %v", out, err)
	}
	want := "tenant acme: default sending windows sat,sun 10:00-14:00 Europe/Berlin\n"
	if out, _, err = run(ctx, "", "tenant", "windows", "--api", api, "acme", "--window", "sat-sun 10:00-14:00 Europe/Berlin"); err != nil || out != want {
		t.Fatalf("tenant windows set: %q, %v; want %q", out, err, want)
	}
	if out, _, err = run(ctx, "", "tenant", "windows", "--api", api, "acme"); err != nil || out != want {
		t.Errorf("tenant windows read: %q, %v; want %q", out, err, want)
	}
	if _, _, err = run(ctx, "", "tenant", "windows", "--api", api, "globex"); err == nil {
		t.Errorf("another tenant's windows with acme's key: no error")
	}
	if out, _, err = run(ctx, "", "tenant", "windows", "--api", api, "acme", "--clear"); err != nil || !strings.Contains(out, "no default sending windows") {
		t.Errorf("tenant windows --clear: %q, %v", out, err)
	}
}
