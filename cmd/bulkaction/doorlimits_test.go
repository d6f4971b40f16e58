package main

import (
	"context"
	"strings"
	"testing"

	"github.com/bulkaction/bulkaction/pkg/redisq"
)

// `tenant limits` shows a tenant's gateway limits in force, sets its own
// (0 = unlimited) and removes them ("default"); the gateway reads them from
// the same Redis HASH.
func TestTenantLimitsVerb(t *testing.T) {
	s := startSystem(t, false, "GATEWAY_TENANT_REQUEST_RATE", "40")
	ctx := context.Background()
	verb := func(args ...string) string {
		t.Helper()
		out, _, err := run(ctx, "", append([]string{"tenant", "limits"}, args...)...)
		if err != nil {
			t.Fatalf("tenant limits %v: %v", args, err)
		}
		return out
	}
	if out := verb("acme"); !strings.Contains(out, "tenant acme: request-rate default (40), job-rate default (50000), byte-rate default (67108864), "+
		"concurrent-requests default (32), sse-streams default (100), submit-bytes default (268435456)") {
		t.Errorf("defaults: %q", out)
	}
	if out := verb("acme", "--request-rate", "500", "--sse-streams", "0", "--submit-bytes", "1048576"); !strings.Contains(out,
		"request-rate 500, job-rate default (50000), byte-rate default (67108864), concurrent-requests default (32), sse-streams unlimited, submit-bytes 1048576") {
		t.Errorf("set: %q", out)
	}
	own, err := s.queue.TenantDoorLimits(ctx, "acme")
	if err != nil || own[redisq.DoorRequestRate] != 500 || own[redisq.DoorSSEStreams] != 0 || len(own) != 2 {
		t.Errorf("acme's own limits in Redis: %v %v", own, err)
	}
	if n, ok, err := s.queue.TenantSubmitRoom(ctx, "acme"); err != nil || !ok || n != 1<<20 {
		t.Errorf("acme's own room in Redis: %d %v %v", n, ok, err)
	}
	if out := verb("acme", "--request-rate", "default", "--submit-bytes", "default"); !strings.Contains(out, "request-rate default (40)") ||
		!strings.Contains(out, "submit-bytes default (268435456)") {
		t.Errorf("back to the defaults: %q", out)
	}
	for _, args := range [][]string{{"acme", "--job-rate", "-1"}, {"acme", "--sse-streams", "many"}} {
		_, _, err := run(ctx, "", append([]string{"tenant", "limits"}, args...)...)
		if err == nil || !strings.Contains(err.Error(), "must be a whole number >= 0 (0 = unlimited) or \"default\"") {
			t.Errorf("%v: err = %v", args, err)
		}
	}
	if _, _, err := run(ctx, "", "tenant", "limits"); err == nil {
		t.Error("limits without a tenant succeeded")
	}
}
