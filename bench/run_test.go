package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"
)

// TestRunSmall runs every phase on a small workload and checks that the
// figures exist and say what they claim: every job ran, asynq's and
// BullMQ's small batches waited for the whole backlog while the pipeline's
// small group did not, and the latency parts add up. It needs Node.js and
// npm for the BullMQ peer (and the npm registry, the first time).
func TestRunSmall(t *testing.T) {
	if testing.Short() {
		t.Skip("starts redis-server, NATS, the pipeline and asynq")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var out bytes.Buffer
	rep := &Reporter{W: &out}
	o := Options{Jobs: 2000, Groups: 4, Workers: 8, Backlog: 3000, Small: 20, Million: 4000, LatencyDuration: 1500 * time.Millisecond, Warmup: 500 * time.Millisecond}
	if err := Run(ctx, o, rep); err != nil {
		t.Fatal(err)
	}
	// Every line is a figure of this bench.
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != len(rep.Figures()) {
		t.Fatalf("%d lines for %d figures", len(lines), len(rep.Figures()))
	}
	for _, l := range lines {
		var f map[string]any
		if err := json.Unmarshal([]byte(l), &f); err != nil {
			t.Fatalf("line %q: %v", l, err)
		}
		if f["bench"] != "e2e" || len(f) != 3 {
			t.Fatalf("line %q: want {bench:e2e,name,value}", l)
		}
	}
	get := func(name string) float64 {
		t.Helper()
		v, ok := rep.Get(name)
		if !ok {
			t.Fatalf("figure %s missing", name)
		}
		return v
	}
	for _, sfx := range []string{"", "_asynq", "_bullmq"} {
		for _, name := range []string{FigThroughput, FigHoL, FigLatencyP50, FigLatencyP99, FigCPU, "process_cpu_ms_per_1k_jobs", "redis_cpu_ms_per_1k_jobs"} {
			if v := get(name + sfx); v <= 0 {
				t.Errorf("%s = %v, want > 0", name+sfx, v)
			}
		}
	}
	// Every ratio is ours divided by the peer's.
	for _, c := range []struct{ ratio, fig string }{
		{"throughput_ratio_vs_", FigThroughput}, {"cpu_per_job_ratio_vs_", FigCPU}, {"hol_ratio_vs_", FigHoL},
		{"latency_p50_ratio_vs_", FigLatencyP50}, {"latency_p99_ratio_vs_", FigLatencyP99},
	} {
		for _, p := range []string{SystemAsynq, SystemBullMQ} {
			if r, want := get(c.ratio+p), get(c.fig)/get(c.fig+"_"+p); r < want*0.99 || r > want*1.01 {
				t.Errorf("%s%s = %v, want %v", c.ratio, p, r, want)
			}
		}
	}
	if get(FigThroughputRatio) != get("throughput_ratio_vs_asynq") || get(FigThroughputRatioBullMQ) != get("throughput_ratio_vs_bullmq") {
		t.Error("the exported ratio names do not match the printed ones")
	}
	// CPU per job is the process's and the redis-server's.
	for _, sfx := range []string{"", "_asynq", "_bullmq"} {
		sum := get("process_cpu_ms_per_1k_jobs"+sfx) + get("redis_cpu_ms_per_1k_jobs"+sfx)
		if v := get(FigCPU + sfx); v < sum*0.99-0.01 || v > sum*1.01+0.01 {
			t.Errorf("%s = %v, want process + redis = %v", FigCPU+sfx, v, sum)
		}
	}
	// The three hops relayed one message per job, and the ceiling built on
	// them, were measured. (They do not bound the pipeline: READY packs and
	// RESULT batches carry several jobs per message.)
	for _, name := range []string{FigFloorNats, FigCeiling} {
		if v := get(name); v <= 0 {
			t.Errorf("%s = %v", name, v)
		}
	}
	// Like for like with the peers: the processor starts before the result
	// is recorded.
	if start, total := get(FigLatencyStartP99), get(FigLatencyP99); start <= 0 || start > total {
		t.Errorf("%s = %v, want in (0, %s = %v]", FigLatencyStartP99, start, FigLatencyP99, total)
	}
	for _, p := range []string{"asynq", "bullmq"} {
		for _, name := range []string{"latency_same_rate_p99_ms_" + p, "latency_start_p99_ms_at_rate_" + p,
			"latency_p99_same_rate_ratio_vs_" + p, "latency_start_p99_same_rate_ratio_vs_" + p} {
			if v := get(name); v <= 0 {
				t.Errorf("%s = %v", name, v)
			}
		}
		// The pipeline ran at the rate the peer was offered (within 10 %).
		if r, pr := get("latency_rate_jobs_per_s_at_rate_"+p), get("latency_same_rate_jobs_per_s_"+p); r < pr*0.9 || r > pr*1.1 {
			t.Errorf("pipeline at %s's rate: %v jobs/s, the peer's %v", p, r, pr)
		}
	}
	if v := get("processor_runs_per_job"); v < 1 {
		t.Errorf("processor_runs_per_job = %v: some jobs did not run", v)
	}
	// One FIFO queue: every backlog task ran before the small batch ended.
	if v := get("hol_backlog_done_first_asynq"); v < float64(o.Backlog-o.Workers-o.Small) {
		t.Errorf("asynq: %v backlog tasks done before the small batch, want about %d", v, o.Backlog)
	}
	// BullMQ has no groups: the small tenant waits behind the backlog too.
	if v := get("hol_backlog_done_first_bullmq"); v < float64(o.Backlog-o.Workers-o.Small) {
		t.Errorf("bullmq: %v backlog jobs done before the small tenant, want about %d", v, o.Backlog)
	}
	// Fair queue: the small group does not wait for the backlog.
	if v := get("hol_backlog_done_first"); v > float64(o.Backlog)/2 {
		t.Errorf("pipeline: %v of %d backlog jobs done before the small group", v, o.Backlog)
	}
	// The million run: every system's time and rate agree, and the
	// pipeline's peak holds every job's hash (kept for JobTTL after it is
	// recorded).
	for _, sfx := range []string{"", "_asynq", "_bullmq"} {
		sec, rate := get(FigMillion+sfx), get(FigMillionJobsPerSec+sfx)
		if sec <= 0 || rate*sec < float64(o.Million)*0.99 || rate*sec > float64(o.Million)*1.01 {
			t.Errorf("million%s: %v s at %v jobs/s for %d jobs", sfx, sec, rate, o.Million)
		}
		if mb, per := get(FigMillionPeakRedis+sfx), get(FigMillionPeakRedisPerJob+sfx); mb < 0 || per*float64(o.Million)/1e6 < mb*0.99-0.001 || per*float64(o.Million)/1e6 > mb*1.01+0.001 {
			t.Errorf("million%s: peak %v MB, %v bytes per job", sfx, mb, per)
		}
	}
	if v := get(FigMillionPeakRedisPerJob); v < 100 {
		t.Errorf("pipeline million: peak %v bytes per job, want at least a job hash's", v)
	}
	for _, p := range []string{SystemAsynq, SystemBullMQ} {
		if r, want := get("million_time_ratio_vs_"+p), get(FigMillion)/get(FigMillion+"_"+p); r < want*0.99 || r > want*1.01 {
			t.Errorf("million_time_ratio_vs_%s = %v, want %v", p, r, want)
		}
		if theirs := get(FigMillionPeakRedis + "_" + p); theirs > 0 {
			if r, want := get("million_peak_redis_ratio_vs_"+p), get(FigMillionPeakRedis)/theirs; r < want*0.99 || r > want*1.01 {
				t.Errorf("million_peak_redis_ratio_vs_%s = %v, want %v", p, r, want)
			}
		}
	}
	if p50, p99 := get(FigLatencyP50), get(FigLatencyP99); p50 > p99 {
		t.Errorf("p50 %v > p99 %v", p50, p99)
	}
	if a, b, tot := get("latency_submit_to_enqueue_p50_ms"), get("latency_enqueue_to_record_p50_ms"), get(FigLatencyP50); a > tot+1 || b > tot+1 {
		t.Errorf("latency parts (%v, %v ms) exceed the total p50 %v ms", a, b, tot)
	}
}

func TestPercentile(t *testing.T) {
	d := []time.Duration{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	for _, c := range []struct {
		p    float64
		want time.Duration
	}{{50, 5}, {99, 10}, {100, 10}, {10, 1}, {1, 1}, {91, 10}, {90, 9}} {
		if got := Percentile(d, c.p); got != c.want {
			t.Errorf("p%v = %v, want %v", c.p, got, c.want)
		}
	}
	if Percentile(nil, 50) != 0 {
		t.Error("empty: want 0")
	}
}

func TestPaceSendsTheScheduledCount(t *testing.T) {
	var calls, total int
	start := time.Now()
	sent, err := pace(context.Background(), 2000, 300*time.Millisecond, 5*time.Millisecond, func(n int) error {
		calls++
		total += n
		if calls == 3 {
			time.Sleep(50 * time.Millisecond) // a slow send is caught up, not dropped
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if sent != 600 || total != 600 {
		t.Fatalf("sent %d (callbacks %d), want 600", sent, total)
	}
	if el := time.Since(start); el < 300*time.Millisecond {
		t.Fatalf("returned after %v, before the 300ms schedule", el)
	}
}

func TestReporter(t *testing.T) {
	var out bytes.Buffer
	r := &Reporter{W: &out}
	r.Add("a", 1.23456)
	r.Add("b", 0)
	r.Add("a", 2)
	if got, want := out.String(), "{\"bench\":\"e2e\",\"name\":\"a\",\"value\":1.235}\n{\"bench\":\"e2e\",\"name\":\"b\",\"value\":0}\n{\"bench\":\"e2e\",\"name\":\"a\",\"value\":2}\n"; got != want {
		t.Fatalf("output\n%s want\n%s", got, want)
	}
	if v, ok := r.Get("a"); !ok || v != 2 {
		t.Fatalf("Get(a) = %v, %v; want the last value 2", v, ok)
	}
	if _, ok := r.Get("c"); ok {
		t.Fatal("Get(c) found a figure never added")
	}
}

func TestOptionsSystems(t *testing.T) {
	for _, c := range []struct {
		only string
		want []string
		err  bool
	}{
		{"", []string{SystemPipeline, SystemAsynq, SystemBullMQ}, false},
		{"bullmq", []string{SystemBullMQ}, false},
		{"pipeline, bullmq", []string{SystemPipeline, SystemBullMQ}, false},
		{"pipeline,sidekiq", nil, true},
	} {
		o := Options{Only: c.only}
		got, err := o.systems()
		if (err != nil) != c.err {
			t.Fatalf("Only %q: error %v, want error %v", c.only, err, c.err)
		}
		if err != nil {
			continue
		}
		if len(got) != len(c.want) {
			t.Errorf("Only %q: %v, want %v", c.only, got, c.want)
		}
		for _, s := range c.want {
			if !got[s] {
				t.Errorf("Only %q: %s missing from %v", c.only, s, got)
			}
		}
	}
}

// TestBullMQWithoutNode checks that a machine without Node.js gets the
// error that says so, before anything is installed.
func TestBullMQWithoutNode(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	_, err := StartBullMQ(context.Background(), BullMQOptions{RedisURL: "redis://127.0.0.1:1/2"})
	if !errors.Is(err, ErrNoNode) {
		t.Fatalf("err = %v, want ErrNoNode", err)
	}
}
