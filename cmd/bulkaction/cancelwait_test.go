package main

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/bulkaction/bulkaction/pkg/client"
	"github.com/bulkaction/bulkaction/pkg/contracts"
)

// endCounts finds "<gid> CANCELLED: <n> jobs (<s> succeeded, <f> failed,
// <c> cancelled)" in out and returns n and s+f+c.
func endCounts(t *testing.T, out, gid string) (jobs, settled int) {
	t.Helper()
	m := regexp.MustCompile(regexp.QuoteMeta(gid) + ` CANCELLED: (\d+) jobs \((\d+) succeeded, (\d+) failed, (\d+) cancelled\)`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no end line of %s:\n%s", gid, out)
	}
	n := make([]int, 4)
	for i := range n {
		n[i], _ = strconv.Atoi(m[i+1])
	}
	return n[0], n[1] + n[2] + n[3]
}

// TestCancelWaitCountsAddUp: with 300 jobs of 500 ms, "cancel --wait"
// printed "39 succeeded, 0 failed, 124 cancelled" of 300 jobs: it returned
// at the cancel, while the jobs already running had not finished. It and
// watch now wait for them, and say so, so the counts they print add up.
func TestCancelWaitCountsAddUp(t *testing.T) {
	s := startSystem(t, true)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	jobs := strings.Repeat(`{"ms":500}`+"\n", 300)
	if _, _, err := run(ctx, jobs, "submit", "-g", "promo", "-t", "sleep", "-f", "-"); err != nil {
		t.Fatal(err)
	}
	watchOut := &syncBuffer{}
	watchErr := make(chan error, 1)
	go func() { watchErr <- runTo(ctx, watchOut, &syncBuffer{}, "", "watch", "promo", "--interval", "100ms") }()
	var info string
	for {
		g, ok, err := s.queue.Group(ctx, contracts.Group(client.DefaultTenant, "promo"))
		if err != nil {
			t.Fatal(err)
		}
		if ok && g.Jobs == 300 && g.Pending < 300 {
			info = fmt.Sprintf("%+v", g.GroupCounts)
			break
		}
		select {
		case <-ctx.Done():
			t.Fatal("the group did not start")
		case <-time.After(20 * time.Millisecond):
		}
	}
	out, _, err := run(ctx, "", "cancel", "--wait", "promo")
	if err != nil {
		t.Fatalf("cancel --wait: %v\n%s", err, out)
	}
	t.Logf("cancelled at %s:\n%s", info, out)
	if n, settled := endCounts(t, out, "promo"); n != 300 || settled != 300 {
		t.Errorf("cancel --wait: %d jobs, %d accounted for", n, settled)
	}
	if !strings.Contains(out, "group promo is cancelled; waiting for the ") {
		t.Errorf("cancel --wait does not say it waits for the running jobs:\n%s", out)
	}
	if err := <-watchErr; !errors.Is(err, exitCancelled) {
		t.Fatalf("watch returned %v, want exit code 3\n%s", err, watchOut)
	}
	if n, settled := endCounts(t, watchOut.String(), "promo"); n != 300 || settled != 300 {
		t.Errorf("watch: %d jobs, %d accounted for", n, settled)
	}
}
