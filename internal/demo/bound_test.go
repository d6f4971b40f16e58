package demo

import (
	"bytes"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/bulkaction/bulkaction/pkg/redisq"
)

func TestLimitsOf(t *testing.T) {
	l := LimitsOf(redisq.Config{Mode: redisq.ModePaced, GlobalLimit: 800, Window: 2 * time.Second, TypeLimits: map[string]int{"sms": 40}})
	if l.GlobalRps != 400 || len(l.TypeRps) != 1 || l.TypeRps["sms"] != 20 {
		t.Errorf("paced, 800 per 2 s, sms 40 per 2 s: %+v", l)
	}
	if l := LimitsOf(redisq.Config{Mode: redisq.ModeSeed, GlobalLimit: 400, Window: time.Second}); l.GlobalRps != 0 || l.TypeRps != nil {
		t.Errorf("seed mode: %+v, want no limits", l)
	}
}

func near(d time.Duration, s float64) bool { return math.Abs(d.Seconds()-s) < 0.001 }

// TestBoundCountsRetries: every retry passes the rate gate again, so the
// bound is the admissions, first attempts and retries, over the limit.
func TestBoundCountsRetries(t *testing.T) {
	s := &Summary{Limits: Limits{GlobalRps: 400, TypeRps: map[string]float64{"sms": 20}}, Groups: []GroupResult{
		{ID: "acme/newsletter", Type: "sleep", Jobs: 20000, Retries: 2000},
		{ID: "hooli/crm-sync", Type: "sleep", Jobs: 1500, Retries: 1560},
		{ID: "umbrella/survey", Type: "sms", Jobs: 250, Retries: 6},
		{ID: "umbrella/vip-recall", Type: "sleep", Jobs: 150, Retries: 4, SubmittedAt: 5 * time.Second},
	}}
	b := s.Bound()
	if b.Jobs != 21900 || b.Retries != 3570 || !near(b.Makespan, 25470.0/400) || b.From != 0 || b.Limit != "the global limit of 400/s" {
		t.Errorf("bound %+v, want 21900 first attempts and 3570 retries at the global 400/s: %.3fs", b, 25470.0/400)
	}
	if !near(b.FirstAttempts, 21900.0/400) {
		t.Errorf("first attempts alone %s, want %.3fs", b.FirstAttempts, 21900.0/400)
	}
	if r := b.Ratio(70 * time.Second); math.Abs(r-70/(25470.0/400)) > 1e-9 {
		t.Errorf("ratio %v", r)
	}
}

// TestBoundOfAnotherLimit: a type limit, or a group submitted late, binds
// when it allows less than the global limit over the whole workload.
func TestBoundOfAnotherLimit(t *testing.T) {
	s := &Summary{Limits: Limits{GlobalRps: 400, TypeRps: map[string]float64{"sms": 20, "push": 1000}}, Groups: []GroupResult{
		{ID: "a/big", Type: "sleep", Jobs: 4000},
		{ID: "b/sms", Type: "sms", Jobs: 1000, Retries: 100, SubmittedAt: 2 * time.Second},
		{ID: "c/push", Type: "push", Jobs: 100},
	}}
	b := s.Bound()
	if !near(b.Makespan, 2+1100.0/20) || b.Limit != "the sms limit of 20/s" || b.From != 2*time.Second || b.Jobs != 1000 || b.Retries != 100 {
		t.Errorf("bound %+v, want the sms limit's 2s + 1100/20", b)
	}
	if !near(b.FirstAttempts, 2+1000.0/20) {
		t.Errorf("first attempts alone %s", b.FirstAttempts)
	}

	// A late group of the global limit: only its own admissions can follow
	// its submission.
	s = &Summary{Limits: Limits{GlobalRps: 100}, Groups: []GroupResult{
		{ID: "a/early", Type: "sleep", Jobs: 100},
		{ID: "b/late", Type: "sleep", Jobs: 200, Retries: 100, SubmittedAt: 30 * time.Second},
	}}
	if b := s.Bound(); !near(b.Makespan, 33) || b.From != 30*time.Second || b.Jobs != 200 {
		t.Errorf("late group: %+v, want 30s + 300/100", b)
	}

	// Cancelled jobs were never admitted; nothing limits an ungated run.
	s = &Summary{Limits: Limits{GlobalRps: 10}, Groups: []GroupResult{{ID: "a/x", Type: "sleep", Jobs: 100, Cancelled: 40}}}
	if b := s.Bound(); !near(b.Makespan, 6) {
		t.Errorf("with cancelled jobs: %+v", b)
	}
	s.Limits = Limits{}
	if b := s.Bound(); b != (Bound{}) {
		t.Errorf("without limits: %+v", b)
	}
}

func TestMakespanLine(t *testing.T) {
	s := sampleSummary()
	s.Limits = Limits{GlobalRps: 20}
	s.Makespan = 61 * time.Second
	var b bytes.Buffer
	if err := s.Write(&b); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	// 1070 first attempts and 170 retries at 20/s: 62 s.
	want := "makespan 61.0s, limit allows 62.0s (0.98×): 1240 admissions (1070 first attempts, 170 retries) at the global limit of 20/s; first attempts alone 53.5s"
	if got := lines[len(lines)-1]; got != want {
		t.Errorf("last line\n%s\nwant\n%s", got, want)
	}
	// The groups submitted at once are a few ms in: the line names no start.
	s.Groups[0].SubmittedAt = 3 * time.Millisecond
	if got := s.MakespanLine(); got != want {
		t.Errorf("with the big group 3 ms in:\n%s\nwant\n%s", got, want)
	}
	// A late group that binds: the line says from when.
	s.Groups[3].SubmittedAt = 70 * time.Second
	if got := s.MakespanLine(); !strings.Contains(got, "limit allows 71.0s (0.86×): 20 admissions (20 first attempts, 0 retries) at the global limit of 20/s from 70.0s;") {
		t.Errorf("a late group binds: %q", got)
	}
	s.Limits = Limits{}
	if got := s.MakespanLine(); got != "makespan 61.0s, no rate limit" {
		t.Errorf("without limits: %q", got)
	}
	s.Makespan = 0 // a group has not ended
	if got := s.MakespanLine(); got != "" {
		t.Errorf("unfinished run: %q", got)
	}
}

// TestBoundOfPartnerCapacity: the groups calling a downstream end no sooner
// than its capacity accepts their calls, whatever the admission limits.
func TestBoundOfPartnerCapacity(t *testing.T) {
	w, err := ForScale(ScaleFull)
	if err != nil {
		t.Fatal(err)
	}
	s := &Summary{Limits: Limits{GlobalRps: 2000, Capacity: map[string]Capacity{"http": w.Partner}}, Groups: []GroupResult{
		{ID: "acme/newsletter", Type: "sleep", Jobs: 20000, Retries: 1000, Succeeded: 19990},
		{ID: "hooli/crm-sync", Type: "http", Jobs: 1500, Retries: 90, Throttles: 90, Succeeded: 1500},
	}}
	b := s.Bound()
	// 12 calls in the bucket, 720 by 12 s, 240 by 24 s, 528 at 100/s; the
	// global limit allows 22,590 admissions in 11.3 s.
	if !near(b.Makespan, 29.28) || !b.Downstream || b.Jobs != 1500 || b.Retries != 0 ||
		b.Limit != "the capacity of hooli's partner API (60/s, 20/s from 12s, 100/s from 24s)" {
		t.Errorf("bound %+v, want hooli's 1500 calls at the partner's capacity: 29.28s", b)
	}
	if !near(b.FirstAttempts, 29.28) {
		t.Errorf("first attempts alone %s", b.FirstAttempts)
	}
	s.Makespan = 31 * time.Second
	want := "makespan 31.0s, limit allows 29.3s (1.06×): 1500 calls accepted at the capacity of hooli's partner API (60/s, 20/s from 12s, 100/s from 24s); first attempts alone 29.3s"
	if got := s.MakespanLine(); got != want {
		t.Errorf("makespan line\n%s\nwant\n%s", got, want)
	}
	// Only the calls it accepted count: jobs that failed never got through.
	s.Groups[1].Succeeded = 972
	if b := s.Bound(); !near(b.Makespan, 24) || !b.Downstream {
		t.Errorf("972 calls accepted: %+v, want 24s", b)
	}
	// At the demo's own limit the global limit binds: the partner does not
	// make the demo longer than its admissions do.
	s.Limits.GlobalRps = 400
	if b := s.Bound(); b.Downstream || b.Limit != "the global limit of 400/s" {
		t.Errorf("at 400/s: %+v, want the global limit", b)
	}
}
