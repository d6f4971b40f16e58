package telemetry

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/bulkaction/bulkaction/pkg/redisq"
)

func TestStateCollectorReportsState(t *testing.T) {
	st := QueueState{
		GroupsPerLevel:   map[string]int64{"high": 2, "low": 5, "urgent": 1},
		ReadySize:        120,
		NonReadySize:     7,
		InflightSize:     3,
		ActiveTenants:    8,
		CongestionLevels: map[string]int64{"NONE": 6, "HIGH": 2},
		GlobalRateLimit:  10000,
		GroupsWaiting:    map[string]int64{"paused": 1, "backing_off": 3},
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(NewStateCollector(func(context.Context) (QueueState, error) { return st, nil }, time.Second))

	const want = `
# HELP bulk_action_active_tenants Tenants sharing the global rate limit.
# TYPE bulk_action_active_tenants gauge
bulk_action_active_tenants 8
# HELP bulk_action_congestion_level Groups at each congestion level.
# TYPE bulk_action_congestion_level gauge
bulk_action_congestion_level{level="CRITICAL"} 0
bulk_action_congestion_level{level="HIGH"} 2
bulk_action_congestion_level{level="LOW"} 0
bulk_action_congestion_level{level="MODERATE"} 0
bulk_action_congestion_level{level="NONE"} 6
# HELP bulk_action_destinations_tracked Destinations the adaptive rate tracks (0 when it is off).
# TYPE bulk_action_destinations_tracked gauge
bulk_action_destinations_tracked 0
# HELP bulk_action_groups_waiting Groups held back, by reason (paused, scheduled, outside_window, in_flight_limit, rate_share_used, global_rate, no_worker, type_rate, destination_rate, ready_full, backing_off), among at most 1000 running or queued groups.
# TYPE bulk_action_groups_waiting gauge
bulk_action_groups_waiting{reason="backing_off"} 3
bulk_action_groups_waiting{reason="destination_rate"} 0
bulk_action_groups_waiting{reason="global_rate"} 0
bulk_action_groups_waiting{reason="in_flight_limit"} 0
bulk_action_groups_waiting{reason="no_worker"} 0
bulk_action_groups_waiting{reason="outside_window"} 0
bulk_action_groups_waiting{reason="paused"} 1
bulk_action_groups_waiting{reason="rate_share_used"} 0
bulk_action_groups_waiting{reason="ready_full"} 0
bulk_action_groups_waiting{reason="scheduled"} 0
bulk_action_groups_waiting{reason="type_rate"} 0
# HELP bulk_action_inflight_size Admitted jobs not yet confirmed on the READY stream.
# TYPE bulk_action_inflight_size gauge
bulk_action_inflight_size 3
# HELP bulk_action_non_ready_queue_size Jobs parked in the non-ready (backoff) queue.
# TYPE bulk_action_non_ready_queue_size gauge
bulk_action_non_ready_queue_size 7
# HELP bulk_action_queue_groups Groups waiting in the fair queue, by priority level.
# TYPE bulk_action_queue_groups gauge
bulk_action_queue_groups{priority="high"} 2
bulk_action_queue_groups{priority="low"} 5
bulk_action_queue_groups{priority="normal"} 0
bulk_action_queue_groups{priority="urgent"} 1
# HELP bulk_action_rate_limit_global Configured global rate limit, in jobs per second.
# TYPE bulk_action_rate_limit_global gauge
bulk_action_rate_limit_global 10000
# HELP bulk_action_ready_queue_size Jobs in the READY stream (waiting or being worked on).
# TYPE bulk_action_ready_queue_size gauge
bulk_action_ready_queue_size 120
# HELP bulk_action_state_up 1 if the last read of the queue state succeeded, else 0.
# TYPE bulk_action_state_up gauge
bulk_action_state_up 1
`
	if got := gatherText(t, reg); strings.TrimSpace(got) != strings.TrimSpace(want) {
		t.Errorf("gathered:\n%s\nwant:\n%s", got, want)
	}
}

func TestStateCollectorErrorReportsOnlyUp(t *testing.T) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(NewStateCollector(func(context.Context) (QueueState, error) {
		return QueueState{ReadySize: 99}, errors.New("redis: connection refused")
	}, time.Second))

	const want = `
# HELP bulk_action_state_up 1 if the last read of the queue state succeeded, else 0.
# TYPE bulk_action_state_up gauge
bulk_action_state_up 0
`
	if got := gatherText(t, reg); strings.TrimSpace(got) != strings.TrimSpace(want) {
		t.Errorf("gathered:\n%s\nwant:\n%s", got, want)
	}
}

func TestStateCollectorTimeout(t *testing.T) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(NewStateCollector(func(ctx context.Context) (QueueState, error) {
		<-ctx.Done() // a state read that never answers
		return QueueState{}, ctx.Err()
	}, 20*time.Millisecond))

	up := gatherFamilies(t, reg)["bulk_action_state_up"]
	if up == nil || up.GetMetric()[0].GetGauge().GetValue() != 0 {
		t.Fatalf("state_up = %v, want 0 after timeout", up)
	}
	if n := len(gatherFamilies(t, reg)); n != 1 {
		t.Errorf("gathered %d families after timeout, want only state_up", n)
	}
}

func TestStateCollectorDeadline(t *testing.T) {
	tests := []struct {
		name    string
		timeout time.Duration
		want    time.Duration
	}{
		{"given", 300 * time.Millisecond, 300 * time.Millisecond},
		{"zero means default", 0, DefaultStateTimeout},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var left time.Duration
			c := NewStateCollector(func(ctx context.Context) (QueueState, error) {
				dl, ok := ctx.Deadline()
				if !ok {
					return QueueState{}, errors.New("no deadline")
				}
				left = time.Until(dl)
				return QueueState{}, nil
			}, tt.timeout)
			reg := prometheus.NewRegistry()
			reg.MustRegister(c)
			if n := countSeries(t, reg, "bulk_action_state_up"); n != 1 {
				t.Fatalf("state_up series = %d", n)
			}
			if left <= 0 || left > tt.want {
				t.Errorf("deadline %v away, want within %v", left, tt.want)
			}
			if left < tt.want/2 {
				t.Errorf("deadline %v away, want close to %v", left, tt.want)
			}
		})
	}
}

func TestStateCollectorBesideMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	observeAll(NewMetrics(reg))
	if err := reg.Register(NewStateCollector(func(context.Context) (QueueState, error) { return QueueState{}, nil }, 0)); err != nil {
		t.Fatalf("register state collector beside metrics: %v", err)
	}
	got := gatherFamilies(t, reg)
	for _, name := range []string{"bulk_action_state_up", "bulk_action_ready_queue_size", "bulk_action_enqueue_total"} {
		if got[name] == nil {
			t.Errorf("%s missing", name)
		}
	}
}

// bulk_action_groups_waiting reports one series per hold reason the queue
// knows, and no other, so the label's values are a bounded set.
func TestWaitReasonsAreTheQueues(t *testing.T) {
	var want []string
	for _, r := range redisq.HoldReasons {
		want = append(want, string(r))
	}
	if !slices.Equal(waitReasons, want) {
		t.Errorf("bulk_action_groups_waiting reasons %v, want redisq.HoldReasons %v", waitReasons, want)
	}
}

// The learned rates are gauges per destination: a rate once learned, a
// stop while a Retry-After runs; a destination not learned yet has no rate
// series (it is not limited), and at most MaxDestinationSeries are reported.
func TestStateCollectorReportsDestinations(t *testing.T) {
	st := QueueState{DestinationsTracked: MaxDestinationSeries + 3}
	st.Destinations = append(st.Destinations,
		DestinationState{Destination: "email", Rate: 85.5},
		DestinationState{Destination: "partner", Rate: 12, Stopped: true},
		DestinationState{Destination: "sms"})
	for i := len(st.Destinations); i < MaxDestinationSeries+3; i++ {
		st.Destinations = append(st.Destinations, DestinationState{Destination: fmt.Sprintf("z%03d", i), Rate: 1})
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(NewStateCollector(func(context.Context) (QueueState, error) { return st, nil }, time.Second))
	got := gatherText(t, reg)
	for _, line := range []string{
		`bulk_action_destination_rate{destination="email"} 85.5`,
		`bulk_action_destination_stopped{destination="email"} 0`,
		`bulk_action_destination_rate{destination="partner"} 12`,
		`bulk_action_destination_stopped{destination="partner"} 1`,
		`bulk_action_destination_stopped{destination="sms"} 0`,
		`bulk_action_destinations_tracked 103`,
	} {
		if !strings.Contains(got, line+"\n") {
			t.Errorf("missing %q in:\n%s", line, got)
		}
	}
	if strings.Contains(got, `bulk_action_destination_rate{destination="sms"}`) {
		t.Errorf("a destination not learned yet has a rate series:\n%s", got)
	}
	if n := strings.Count(got, "bulk_action_destination_stopped{"); n != MaxDestinationSeries {
		t.Errorf("%d destinations reported, want at most %d", n, MaxDestinationSeries)
	}
}
