package telemetry

import (
	"context"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Priority levels of bulk_action_queue_groups{priority}; always reported, zero when absent.
var priorityLevels = []string{"high", "normal", "low"}

// Congestion levels of bulk_action_congestion_level{level}; always reported, zero when absent.
var congestionLevels = []string{"NONE", "LOW", "MODERATE", "HIGH", "CRITICAL"}

// Reasons of bulk_action_groups_waiting{reason} (redisq.HoldReasons); always reported, zero when
// absent.
var waitReasons = []string{"paused", "scheduled", "outside_window", "in_flight_limit", "rate_share_used", "global_rate", "no_worker", "type_rate", "destination_rate", "ready_full", "backing_off"}

// DefaultStateTimeout is the time [NewStateCollector] gives its function on each scrape when
// the timeout passed is zero or negative.
const DefaultStateTimeout = 5 * time.Second

// QueueState is the shared state of the pipeline, read from Redis and JetStream at scrape time so
// the gauges are right whichever replica is scraped. The zero value reports every gauge as 0.
type QueueState struct {
	// GroupsPerLevel is bulk_action_queue_groups{priority}: groups waiting in each fair-queue level
	// (high, normal, low). Levels missing from the map are reported as 0; other keys are reported too.
	GroupsPerLevel map[string]int64
	// ReadySize is bulk_action_ready_queue_size: jobs in the READY stream (a pack counts as its jobs).
	ReadySize int64
	// NonReadySize is bulk_action_non_ready_queue_size: jobs parked in the non-ready (backoff) queue.
	NonReadySize int64
	// InflightSize is bulk_action_inflight_size: admitted jobs not yet confirmed on READY.
	InflightSize int64
	// ActiveTenants is bulk_action_active_tenants: tenants sharing the global rate.
	ActiveTenants int64
	// CongestionLevels is bulk_action_congestion_level{level}: groups at each congestion level
	// (NONE, LOW, MODERATE, HIGH, CRITICAL). Levels missing from the map are reported as 0.
	CongestionLevels map[string]int64
	// GlobalRateLimit is bulk_action_rate_limit_global: the configured global limit, in jobs/s.
	GlobalRateLimit float64
	// GroupsWaiting is bulk_action_groups_waiting{reason}: groups held back by each reason (paused,
	// scheduled, outside_window, in_flight_limit, rate_share_used, global_rate, no_worker, type_rate, destination_rate, ready_full, backing_off), among the
	// groups the stuck watch list follows, at most a thousand per scrape; a group held for two
	// reasons counts under both. Reasons missing from the map are reported as 0.
	GroupsWaiting map[string]int64
	// Destinations are the adaptive rate's learned rates (docs/ARCHITECTURE.md §5), at most
	// [MaxDestinationSeries] of them: bulk_action_destination_rate{destination} and
	// bulk_action_destination_stopped{destination}. nil (the adaptive rate off) reports none.
	Destinations []DestinationState
	// DestinationsTracked is bulk_action_destinations_tracked: destinations the adaptive rate
	// tracks, all of them (Destinations may hold fewer).
	DestinationsTracked int64
}

// MaxDestinationSeries is the most destinations [QueueState.Destinations] reports, so that the
// learned rates' series stay few whatever ADAPTIVE_RATE_MAX_DESTINATIONS allows.
const MaxDestinationSeries = 100

// DestinationState is one destination's learned rate.
type DestinationState struct {
	// Destination names the downstream (a job type).
	Destination string
	// Rate is the learned rate in jobs/s; 0 = not learned yet (no throttle seen, not limited).
	Rate float64
	// Stopped says whether a Retry-After stops the destination now.
	Stopped bool
}

type stateCollector struct {
	fn      func(ctx context.Context) (QueueState, error)
	timeout time.Duration

	up, groups, ready, nonReady, inflight, active, congestion, globalLimit, waiting *prometheus.Desc
	destRate, destStopped, destTracked                                              *prometheus.Desc
}

// NewStateCollector returns a prometheus.Collector that calls fn on each scrape, with a context
// that ends after timeout ([DefaultStateTimeout] when timeout <= 0), and reports the returned
// [QueueState] as gauges plus bulk_action_state_up 1. When fn fails, it reports only
// bulk_action_state_up 0, so a dashboard shows a gap rather than stale or zero depths.
// Register it next to [NewMetrics] on the same registry; fn must be safe for concurrent calls
// if several scrapes may overlap.
func NewStateCollector(fn func(ctx context.Context) (QueueState, error), timeout time.Duration) prometheus.Collector {
	if timeout <= 0 {
		timeout = DefaultStateTimeout
	}
	gauge := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(fqName(name), help, labels, nil)
	}
	return &stateCollector{
		fn:          fn,
		timeout:     timeout,
		up:          gauge("state_up", "1 if the last read of the queue state succeeded, else 0."),
		groups:      gauge("queue_groups", "Groups waiting in the fair queue, by priority level.", "priority"),
		ready:       gauge("ready_queue_size", "Jobs in the READY stream (waiting or being worked on)."),
		nonReady:    gauge("non_ready_queue_size", "Jobs parked in the non-ready (backoff) queue."),
		inflight:    gauge("inflight_size", "Admitted jobs not yet confirmed on the READY stream."),
		active:      gauge("active_tenants", "Tenants sharing the global rate limit."),
		congestion:  gauge("congestion_level", "Groups at each congestion level.", "level"),
		globalLimit: gauge("rate_limit_global", "Configured global rate limit, in jobs per second."),
		waiting: gauge("groups_waiting", "Groups held back, by reason (paused, scheduled, outside_window, in_flight_limit, rate_share_used, "+
			"global_rate, no_worker, type_rate, destination_rate, ready_full, backing_off), among at most 1000 running or queued groups.", "reason"),
		destRate: gauge("destination_rate", "Learned rate of a destination (adaptive rate), in jobs per second; absent until its first throttle "+
			"(not limited). At most 100 destinations, in name order.", "destination"),
		destStopped: gauge("destination_stopped", "1 while a Retry-After stops the destination (adaptive rate), else 0. At most 100 destinations.", "destination"),
		destTracked: gauge("destinations_tracked", "Destinations the adaptive rate tracks (0 when it is off)."),
	}
}

// Describe implements prometheus.Collector.
func (c *stateCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.up, c.groups, c.ready, c.nonReady, c.inflight, c.active, c.congestion, c.globalLimit, c.waiting,
		c.destRate, c.destStopped, c.destTracked} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *stateCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	st, err := c.fn(ctx)
	if err != nil {
		ch <- prometheus.MustNewConstMetric(c.up, prometheus.GaugeValue, 0)
		return
	}
	ch <- prometheus.MustNewConstMetric(c.up, prometheus.GaugeValue, 1)
	perLevel(ch, c.groups, priorityLevels, st.GroupsPerLevel)
	ch <- prometheus.MustNewConstMetric(c.ready, prometheus.GaugeValue, float64(st.ReadySize))
	ch <- prometheus.MustNewConstMetric(c.nonReady, prometheus.GaugeValue, float64(st.NonReadySize))
	ch <- prometheus.MustNewConstMetric(c.inflight, prometheus.GaugeValue, float64(st.InflightSize))
	ch <- prometheus.MustNewConstMetric(c.active, prometheus.GaugeValue, float64(st.ActiveTenants))
	perLevel(ch, c.congestion, congestionLevels, st.CongestionLevels)
	ch <- prometheus.MustNewConstMetric(c.globalLimit, prometheus.GaugeValue, st.GlobalRateLimit)
	perLevel(ch, c.waiting, waitReasons, st.GroupsWaiting)
	ch <- prometheus.MustNewConstMetric(c.destTracked, prometheus.GaugeValue, float64(st.DestinationsTracked))
	for _, d := range st.Destinations[:min(len(st.Destinations), MaxDestinationSeries)] {
		stopped := 0.0
		if d.Stopped {
			stopped = 1
		}
		ch <- constOrInvalid(c.destStopped, stopped, d.Destination)
		if d.Rate > 0 {
			ch <- constOrInvalid(c.destRate, d.Rate, d.Destination)
		}
	}
}

// constOrInvalid is a gauge of one label value, or an invalid metric when the value cannot be
// a label (not UTF-8).
func constOrInvalid(d *prometheus.Desc, v float64, label string) prometheus.Metric {
	m, err := prometheus.NewConstMetric(d, prometheus.GaugeValue, v, label)
	if err != nil {
		return prometheus.NewInvalidMetric(d, err)
	}
	return m
}

// perLevel reports one series per known level (0 when missing) and one per extra key of values.
func perLevel(ch chan<- prometheus.Metric, d *prometheus.Desc, known []string, values map[string]int64) {
	for _, l := range known {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, float64(values[l]), l)
	}
	for l, v := range values {
		if slices.Contains(known, l) {
			continue
		}
		m, err := prometheus.NewConstMetric(d, prometheus.GaugeValue, float64(v), l)
		if err != nil {
			m = prometheus.NewInvalidMetric(d, err) // e.g. a label value that is not UTF-8
		}
		ch <- m
	}
}
