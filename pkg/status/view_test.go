package status_test

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/bulkaction/bulkaction/pkg/api"
	"github.com/bulkaction/bulkaction/pkg/contracts"
	"github.com/bulkaction/bulkaction/pkg/redisq"
	"github.com/bulkaction/bulkaction/pkg/status"
)

func sample() *status.Group {
	at := time.Date(2025, 1, 2, 12, 0, 0, 0, time.UTC)
	return &status.Group{
		Tenant: "acme", GroupID: "g", State: contracts.StateRunning, Priority: contracts.PriorityHigh, BasePriority: 2,
		MaxInFlight: 40, Total: 300, Jobs: 300, Queued: 200, InFlight: 40, BackingOff: 12, Done: 45, Succeeded: 40, Failed: 5, Cancelled: 3,
		Position: 1, TenantPosition: 2, WaitingGroups: 5, WaitingTenants: 3,
		Rate: 12.5, RateWindow: 30 * time.Second, ETASeconds: 17, Congestion: redisq.CongestionLevel("MILD"), BackoffMs: 1500,
		Retries: 7, Throttles: 4,
		Holds: []status.Hold{
			{Hold: redisq.Hold{Reason: redisq.HoldRateShare}, Detail: "rate share used", Until: at.Add(time.Second)},
			{Hold: redisq.Hold{Reason: redisq.HoldBackingOff, AtLeast: true}, Detail: "12 jobs backing off", Until: at.Add(3 * time.Second)},
		},
		Refused:  &redisq.Refusals{Messages: 1, Jobs: 2, Last: redisq.Refusal{Reason: "over_quota", Error: "quota", At: at, MsgID: "m", Jobs: 2}, ByReason: []redisq.RefusalCount{{Reason: "over_quota", Messages: 1, Jobs: 2}}, Recent: []redisq.Refusal{{Reason: "over_quota", Error: "quota", At: at, MsgID: "m", Jobs: 2}}},
		Callback: &api.Callback{URL: "https://example.com/cb", State: api.CallbackWaiting},
		RetryOf:  "f", RetryGroups: []string{"g-retry-1"},
		CreatedAt: at.Add(-time.Hour), StartedAt: at.Add(-time.Minute), At: at,
	}
}

// A status's JSON is its API view, and the view reads back into the same
// status: the CLI shows a group read over HTTP as it shows one read from
// Redis.
func TestViewRoundTrip(t *testing.T) {
	s := sample()
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	want, _ := json.Marshal(s.View())
	if string(b) != string(want) {
		t.Fatalf("JSON is not the view:\n%s\n%s", b, want)
	}
	var v api.Group
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatal(err)
	}
	got := status.FromView(&v)
	if !reflect.DeepEqual(got, s) {
		t.Errorf("FromView(View()):\n got %+v\nwant %+v", got, s)
	}
	if v.Status.ETA == nil || !v.Status.ETA.Equal(s.At.Add(17*time.Second)) || *v.Status.Position != 1 || v.Total == nil || *v.Total != 300 {
		t.Errorf("view: %s", b)
	}
}

// A group not waiting and with no ETA has null position and ETA; an
// unsealed one a null total.
func TestViewNulls(t *testing.T) {
	s := sample()
	s.Position, s.TenantPosition, s.ETASeconds, s.Total = 0, 0, -1, -1
	v := s.View()
	if v.Status.Position != nil || v.Status.TenantPosition != nil || v.Status.ETASeconds != nil || v.Status.ETA != nil || v.Total != nil {
		t.Errorf("view of a group not waiting: %+v %+v", v, v.Status)
	}
	if back := status.FromView(v); back.Position != 0 || back.ETASeconds != -1 || back.Total != -1 {
		t.Errorf("read back: position %d eta %v total %d", back.Position, back.ETASeconds, back.Total)
	}
}
