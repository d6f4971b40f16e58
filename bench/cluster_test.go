package bench

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"testing"
	"time"
)

var (
	flagClusterLimit     = flag.Int("cluster.limit", 3000, "cluster bench: GLOBAL_RPS, jobs per 1 s window")
	flagClusterSeconds   = flag.Int("cluster.seconds", 15, "cluster bench: the measured span of each phase, in seconds (after 2 s of warm-up)")
	flagClusterTenants   = flag.Int("cluster.tenants", 60, "cluster bench: tenants of equal weight, one group each")
	flagClusterShards    = flag.Int("cluster.shards", 16, "cluster bench: REDIS_SHARDS of the cluster phase")
	flagClusterPrimaries = flag.Int("cluster.primaries", 3, "cluster bench: primaries of the Redis Cluster")
	flagClusterPhases    = flag.String("cluster.phases", "cluster,single", "cluster bench: phases to run, comma-separated: cluster, single")
	flagClusterLogs      = flag.Bool("cluster.logs", false, "cluster bench: print the services' warnings and errors on stderr")
)

// ClusterSummary is the cluster bench's last JSON line.
type ClusterSummary struct {
	Bench string `json:"bench"`
	Phase string `json:"phase"`
	// The cluster phase's figures (the goals' figures).
	Limit                       int     `json:"limit"`
	Shards                      int     `json:"shards"`
	Primaries                   int     `json:"primaries"`
	Tenants                     int     `json:"tenants"`
	SpanS                       float64 `json:"span_s"`
	Jobs                        int64   `json:"jobs"`
	BusiestPrimaryShare         float64 `json:"busiest_primary_share"`
	GlobalMaxWindowRatio        float64 `json:"global_max_window_ratio"`
	GlobalMaxSlidingWindowRatio float64 `json:"global_max_sliding_window_ratio"`
	TenantShareJain             float64 `json:"tenant_share_jain"`
	Utilisation                 float64 `json:"utilisation"`
	TenantsDry                  int     `json:"tenants_dry"`
	CPUUsPerJob                 float64 `json:"cpu_us_per_job"`
	// CPUUsPerJobSingle is the single phase's, and the ratio divides the
	// cluster's by it (0 when a phase did not run).
	CPUUsPerJobSingle      float64 `json:"cpu_us_per_job_single"`
	CPUPerJobRatioVsSingle float64 `json:"cpu_per_job_ratio_vs_single"`
	HostLoadStart          float64 `json:"host_load_1m"`
	HostLoadEnd            float64 `json:"host_load_1m_end"`
}

// BenchmarkCluster runs the pipeline on a Redis Cluster with logical
// shards, then the same workload on one redis-server with one shard, and
// prints one JSON line per phase and a summary line (package
// documentation). Goals are reported, not asserted; a job lost or counted
// twice fails it.
func BenchmarkCluster(b *testing.B) {
	o := ClusterOptions{
		Limit: *flagClusterLimit, Span: time.Duration(*flagClusterSeconds) * time.Second, Warmup: ClusterWarmup,
		Tenants: *flagClusterTenants, Progress: func(s string) { b.Log(s) },
	}
	if *flagClusterLogs {
		o.Log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Minute)
	defer cancel()
	for b.Loop() {
		sum := ClusterSummary{Bench: "cluster", Phase: "summary", HostLoadStart: loadAvg()}
		var cluster, single *ClusterResult
		for _, phase := range splitList(*flagClusterPhases) {
			po := o
			switch phase {
			case "cluster":
				po.Shards, po.Primaries = *flagClusterShards, *flagClusterPrimaries
			case "single":
				po.Shards, po.Primaries = 1, 0
			default:
				b.Fatalf("-cluster.phases: unknown phase %q (want cluster, single)", phase)
			}
			r, err := RunClusterPhase(ctx, phase, po)
			if err != nil {
				b.Fatal(err)
			}
			printLine(r)
			if phase == "cluster" {
				cluster = r
			} else {
				single = r
			}
		}
		if cluster != nil {
			sum.Limit, sum.Shards, sum.Primaries, sum.Tenants, sum.SpanS, sum.Jobs = cluster.Limit, cluster.Shards,
				cluster.Primaries, cluster.Tenants, cluster.SpanS, cluster.Jobs
			sum.BusiestPrimaryShare, sum.GlobalMaxWindowRatio = cluster.BusiestPrimaryShare, cluster.GlobalMaxWindowRatio
			sum.GlobalMaxSlidingWindowRatio, sum.TenantShareJain = cluster.GlobalMaxSlidingWindowRatio, cluster.TenantShareJain
			sum.Utilisation, sum.TenantsDry, sum.CPUUsPerJob = cluster.Utilisation, cluster.TenantsDry, cluster.CPUUsPerJob
		}
		if single != nil {
			sum.CPUUsPerJobSingle = single.CPUUsPerJob
		}
		if cluster != nil && single != nil && single.CPUUsPerJob > 0 {
			sum.CPUPerJobRatioVsSingle = r3(cluster.CPUUsPerJob / single.CPUUsPerJob)
		}
		sum.HostLoadEnd = loadAvg()
		printLine(sum)
		if cluster != nil {
			clusterGoals(b, cluster)
		}
	}
}

func printLine(v any) {
	line, _ := json.Marshal(v)
	fmt.Println(string(line))
}

// clusterGoals logs the goals the cluster phase missed.
func clusterGoals(b *testing.B, r *ClusterResult) {
	for _, g := range []struct {
		name       string
		v, goal    float64
		atMostGoal bool
	}{
		{"busiest_primary_share", r.BusiestPrimaryShare, 0.40, true},
		{"global_max_window_ratio", r.GlobalMaxWindowRatio, 1.0, true},
		{"global_max_sliding_window_ratio", r.GlobalMaxSlidingWindowRatio, 1.02, true},
		{"tenant_share_jain", r.TenantShareJain, 0.99, false},
		{"utilisation", r.Utilisation, 0.97, false},
	} {
		if g.atMostGoal && g.v > g.goal {
			b.Logf("goal missed: %s %.3f, goal <= %.2f", g.name, g.v, g.goal)
		}
		if !g.atMostGoal && g.v < g.goal {
			b.Logf("goal missed: %s %.3f, goal >= %.2f", g.name, g.v, g.goal)
		}
	}
	if r.TenantsDry > 0 {
		b.Logf("%d tenants had no job queued at the span's end: demand did not last, the figures are not at full demand", r.TenantsDry)
	}
}

func TestClusterWindows(t *testing.T) {
	sec := int64(time.Second)
	// 10 events per second from 0 to 5 s, and 5 more at 2.5 s
	var times []int64
	for i := range 50 {
		times = append(times, int64(i)*sec/10)
	}
	for range 5 {
		times = append(times, 2*sec+sec/2)
	}
	slices.Sort(times)
	c := startsCounter(times)
	if n := c(0, 5*sec); n != 55 {
		t.Fatalf("count %d, want 55", n)
	}
	if n := maxAlignedWindow(c, sec/2, 5*sec, sec); n != 15 { // [2 s, 3 s)
		t.Errorf("aligned %d, want 15", n)
	}
	if n := maxAlignedWindow(c, sec/2, 2*sec+sec/2, sec); n != 10 { // [1 s, 2 s) only
		t.Errorf("aligned %d, want 10", n)
	}
	if n := maxSlidingWindow(c, 0, 5*sec, sec, sec/100); n != 15 {
		t.Errorf("sliding %d, want 15", n)
	}
	// the same as samples of a cumulative counter every 100 ms
	var s []admitSample
	var total int64
	for i := range 51 {
		at := int64(i) * sec / 10
		s = append(s, admitSample{ns: at, total: total})
		total += c(at, at+sec/10)
	}
	a := samplesCounter(s)
	if n := maxAlignedWindow(a, 0, 5*sec+1, sec); n != 15 {
		t.Errorf("aligned over samples %d, want 15", n)
	}
	if n := a(0, 5*sec+1); n != 55 {
		t.Errorf("samples count %d, want 55", n)
	}
	starts := []startRec{{0, 0}, {1, 1}, {sec, 0}, {sec + 1, 0}}
	j, whole, lo, hi := tenantJain(starts, 2, 0, 2*sec, sec)
	if j != 0.5 || whole != 0.8 || lo != 0.5 || hi != 1.5 {
		t.Errorf("jain %v whole %v shares %v %v, want 0.5 0.8 0.5 1.5", j, whole, lo, hi)
	}
}
