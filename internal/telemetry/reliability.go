package telemetry

import "github.com/prometheus/client_golang/prometheus"

// Label values of bulk_action_groups_repaired_total{reason} (the reasons of
// redisq.Queue.RepairGroup, plus abandoned groups and finished cancels).
const (
	// RepairLease: leased jobs nobody would re-publish were handed to the reclaim.
	RepairLease = "lease"
	// RepairQueue: a group with jobs to admit was missing from the fair queue.
	RepairQueue = "queue"
	// RepairInFlight: a group's in-flight slots had leaked.
	RepairInFlight = "inflight"
	// RepairComplete: a sealed group whose jobs had all ended was not COMPLETED.
	RepairComplete = "complete"
	// RepairCancel: a cancel cut short (a process died between its steps) was finished.
	RepairCancel = "cancel"
	// RepairAbandoned: an unsealed group without work, idle for GROUP_IDLE_TTL, was abandoned (its keys expire).
	RepairAbandoned = "abandoned"
)

// RepairReasons lists the label values of bulk_action_groups_repaired_total.
var RepairReasons = []string{RepairLease, RepairQueue, RepairInFlight, RepairComplete, RepairCancel, RepairAbandoned}

func (m *Metrics) registerReliability(reg prometheus.Registerer) {
	m.GroupsRepaired = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: fqName("groups_repaired_total"),
		Help: "Repairs made to groups without progress, by reason (lease, queue, inflight, complete, cancel, abandoned).",
	}, []string{"reason"})
	reg.MustRegister(m.GroupsRepaired)
	for _, r := range RepairReasons {
		m.GroupsRepaired.WithLabelValues(r)
	}
}
