package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"testing"
	"time"

	"github.com/bulkaction/bulkaction/pkg/contracts"
	"github.com/bulkaction/bulkaction/pkg/redisq"
)

// The tenant scenario "T1" of the admission load test (docs/ARCHITECTURE.md
// §4, §5): tenant A has one group of 10,000 jobs, tenant B 20 groups of 500
// jobs, all enqueued at once. Each run lasts tenantRun, during which both
// tenants stay backlogged at any weights up to 2:1 (A then gets about 667
// jobs/s of the 1,000, B 333/s).
const (
	tenantA      = "tenant-a"
	tenantB      = "tenant-b"
	tenantAJobs  = 10_000
	tenantBGroup = 20
	tenantBJobs  = 500 // per group
	tenantRun    = 10 * time.Second
	tenantWindow = 2 * time.Second // the windows Jain's index and the ratio are measured over
)

// tenantLine is the JSON line of the tenant scenario for one admission mode.
// tenant_share_jain is the lowest Jain fairness index, (a+b)²/(2(a²+b²)), of
// the two tenants' admitted jobs over the 2-second windows of a run with
// equal weights (1 = equal shares; 0.5 = one tenant gets everything);
// tenant_weight_ratio is A's admitted jobs / B's over a run with weights
// 2:1 (2 = exact). The fields after them add context.
type tenantLine struct {
	Bench               string  `json:"bench"`
	Mode                string  `json:"mode"`
	Scenario            string  `json:"scenario"`
	TenantShareJain     float64 `json:"tenant_share_jain"`
	TenantWeightRatio   float64 `json:"tenant_weight_ratio"`
	TenantShareJainMean float64 `json:"tenant_share_jain_mean"`
	WeightRatioMin      float64 `json:"tenant_weight_ratio_min_window"`
	WeightRatioMax      float64 `json:"tenant_weight_ratio_max_window"`
	WindowS             float64 `json:"window_s"`
	Windows             int     `json:"windows"`
	EqualJobs           [2]int  `json:"equal_weights_jobs_a_b"`
	WeightedJobs        [2]int  `json:"weights_2_1_jobs_a_b"`
	MaxCallMs           float64 `json:"max_call_ms"`
}

// runTenantAdmission runs the tenant scenario twice, with equal weights and
// with weights 2:1, each on a redis-server of its own, and prints one JSON
// line.
func runTenantAdmission(b *testing.B, mode string) {
	equal, callEq := tenantRunOnce(b, mode, 1)
	weighted, callW := tenantRunOnce(b, mode, 2)
	line := tenantLine{Bench: "admission", Mode: mode, Scenario: "T1", WindowS: tenantWindow.Seconds(),
		Windows: len(equal), MaxCallMs: round(msOf(max(callEq, callW)))}
	worst, mean := 1.0, 0.0
	for _, w := range equal {
		j := jain(float64(w[0]), float64(w[1]))
		worst = min(worst, j)
		mean += j / float64(len(equal))
		line.EqualJobs[0] += w[0]
		line.EqualJobs[1] += w[1]
	}
	line.TenantShareJain, line.TenantShareJainMean = round(worst), round(mean)
	line.WeightRatioMin = math.Inf(1)
	for _, w := range weighted {
		r := float64(w[0]) / float64(max(w[1], 1))
		line.WeightRatioMin, line.WeightRatioMax = min(line.WeightRatioMin, r), max(line.WeightRatioMax, r)
		line.WeightedJobs[0] += w[0]
		line.WeightedJobs[1] += w[1]
	}
	line.WeightRatioMin, line.WeightRatioMax = round(line.WeightRatioMin), round(line.WeightRatioMax)
	line.TenantWeightRatio = round(float64(line.WeightedJobs[0]) / float64(max(line.WeightedJobs[1], 1)))
	out, _ := json.Marshal(line)
	fmt.Fprintln(os.Stdout, string(out))
	b.ReportMetric(line.TenantShareJain, "tenant-jain")
	b.ReportMetric(line.TenantWeightRatio, "tenant-weight-ratio")
	b.Logf("%s T1: jobs of A and B per %s window, equal weights %v, weights 2:1 %v", mode, tenantWindow, equal, weighted)
}

// tenantRunOnce runs the tenant scenario for tenantRun with tenant A's
// weight set to weightA, admitting as the other scenarios do, and returns
// the jobs of A and B handed on in each whole tenantWindow, and the longest
// call.
func tenantRunOnce(b *testing.B, mode string, weightA int) ([][2]int, time.Duration) {
	b.StopTimer()
	s := startServer(b)
	q := s.queue(b, redisq.Config{Mode: mode, GlobalLimit: admitLimit, Window: admitWindow, Alpha: *admissionAlpha})
	ctx := context.Background()
	if err := q.SetTenantWeight(ctx, tenantA, weightA); err != nil {
		b.Fatal(err)
	}
	var jobs []redisq.Job
	for i := 0; i < tenantAJobs; i++ {
		jobs = append(jobs, redisq.Job{Group: contracts.GroupRef{Tenant: tenantA, ID: groupID(0)}, ID: jobID(i),
			Type: "send-promotion", Payload: payload(i)})
	}
	for g := 0; g < tenantBGroup; g++ {
		for i := 0; i < tenantBJobs; i++ {
			jobs = append(jobs, redisq.Job{Group: contracts.GroupRef{Tenant: tenantB, ID: groupID(g)}, ID: jobID(i),
				Type: "send-promotion", Payload: payload(i)})
		}
	}
	enqueueAll(b, q, jobs)
	t := newTally(len(jobs))

	windowMs := admitWindow.Milliseconds()
	startMs := (time.Now().UnixMilli()/windowMs + 1) * windowMs
	time.Sleep(time.Until(time.UnixMilli(startMs)))
	run, stop := context.WithDeadline(ctx, time.UnixMilli(startMs).Add(tenantRun))
	defer stop()
	b.StartTimer()
	runLoops(b, run, stop, q, t, mode)
	b.StopTimer()
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.dup != "" {
		b.Fatalf("job %s handed on twice", t.dup)
	}
	if t.done >= t.total {
		b.Fatalf("every job was done within %s: the tenants were not backlogged throughout", tenantRun)
	}
	return tenantWindows(t.events, startMs, tenantWindow.Milliseconds(), startMs+tenantRun.Milliseconds()), t.maxCall
}

// tenantWindows counts the jobs of tenantA and tenantB handed on in each
// whole window of windowMs from startMs up to endMs.
func tenantWindows(events []event, startMs, windowMs, endMs int64) [][2]int {
	n := (endMs - startMs) / windowMs
	out := make([][2]int, n)
	for _, e := range events {
		w := (e.atMs - startMs) / windowMs
		if e.atMs < startMs || w >= n {
			continue
		}
		switch e.tenant {
		case tenantA:
			out[w][0] += e.n
		case tenantB:
			out[w][1] += e.n
		}
	}
	return out
}

// jain is Jain's fairness index of xs: (Σx)² / (n·Σx²); 1 when all are
// equal, 1/n when one gets everything.
func jain(xs ...float64) float64 {
	var sum, sq float64
	for _, x := range xs {
		sum += x
		sq += x * x
	}
	if sq == 0 {
		return 1
	}
	return sum * sum / (float64(len(xs)) * sq)
}
