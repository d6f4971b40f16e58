package bench

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/redis/go-redis/v9"

	"github.com/bulkaction/bulkaction/internal/config"
	"github.com/bulkaction/bulkaction/internal/conns"
	"github.com/bulkaction/bulkaction/internal/loop"
	"github.com/bulkaction/bulkaction/internal/natsutil"
	"github.com/bulkaction/bulkaction/internal/stack"
	"github.com/bulkaction/bulkaction/internal/telemetry"
	"github.com/bulkaction/bulkaction/internal/testenv"
	"github.com/bulkaction/bulkaction/pkg/client"
	"github.com/bulkaction/bulkaction/pkg/contracts"
	"github.com/bulkaction/bulkaction/pkg/processor"
	"github.com/bulkaction/bulkaction/pkg/redisq"
)

// Cluster bench defaults (`make bench-cluster`, BenchmarkCluster).
const (
	// ClusterJobType is the job type of the cluster bench's processor: it
	// records when and for which tenant it ran, and returns.
	ClusterJobType = "cluster-bench"
	// ClusterWarmup is how long after every job is queued the measured span
	// starts.
	ClusterWarmup = 2 * time.Second
	// ClusterJainWindow is the window over which tenant_share_jain is taken.
	ClusterJainWindow = 2 * time.Second
	// ClusterSlideStep is the step of the sliding 1 s windows.
	ClusterSlideStep = time.Millisecond
	// clusterAdmitSample is how often the fetcher's admission counter is
	// read: the resolution of the admission times.
	clusterAdmitSample = time.Millisecond
	// clusterWindowRead is how often the shards' counts of the global
	// limit's windows are read (they are kept two windows).
	clusterWindowRead = 200 * time.Millisecond
	// clusterGroup is every tenant's one group.
	clusterGroup = "bulk"
)

// ClusterOptions configure one phase of the cluster bench.
type ClusterOptions struct {
	// Limit is GLOBAL_RPS (jobs per 1 s window).
	Limit int
	// Span is the measured span, Warmup how long before it (after every
	// job is queued) is left out.
	Span, Warmup time.Duration
	// Tenants is the number of tenants, of equal weight, one group each.
	Tenants int
	// Shards is REDIS_SHARDS and Primaries the Redis Cluster's primaries;
	// Primaries 0 = one plain redis-server (Shards must be 1).
	Shards, Primaries int
	// Workers is WORKER_COUNT (0 = [DefaultWorkers]).
	Workers int
	// Log receives the services' logs; nil = none.
	Log *slog.Logger
	// Progress, when set, receives progress lines.
	Progress func(string)
}

// ClusterResult is one phase's figures, printed as one JSON line. Ratios
// and shares are rounded to three decimals.
type ClusterResult struct {
	Bench     string  `json:"bench"`
	Phase     string  `json:"phase"`
	Limit     int     `json:"limit"`
	Shards    int     `json:"shards"`
	Primaries int     `json:"primaries"`
	Tenants   int     `json:"tenants"`
	SpanS     float64 `json:"span_s"`
	// Jobs are the jobs admitted in the span (the fetcher's admission
	// counter), JobsStarted the processor runs that started in it.
	Jobs        int64 `json:"jobs"`
	JobsStarted int64 `json:"jobs_started"`
	// JobsSubmitted is the phase's whole workload, SubmitS how long it
	// took to submit it.
	JobsSubmitted int64   `json:"jobs_submitted"`
	SubmitS       float64 `json:"submit_s"`

	BusiestPrimaryShare    float64 `json:"busiest_primary_share"`
	BusiestPrimaryCPUShare float64 `json:"busiest_primary_cpu_share"`
	// PrimaryCommands, PrimaryCPUMs, PrimaryShards and PrimaryTenants are
	// per primary (in the cluster's order): commands run in the span, CPU
	// in the span, shards and tenants whose slot it serves; GlobalPrimary
	// serves the cross-shard keys ({g}).
	PrimaryCommands []int64 `json:"primary_commands"`
	PrimaryCPUMs    []int64 `json:"primary_cpu_ms"`
	PrimaryShards   []int   `json:"primary_shards"`
	PrimaryTenants  []int   `json:"primary_tenants"`
	GlobalPrimary   int     `json:"global_primary"`

	// GlobalMaxWindowRatio is from the shards' own counts of each aligned
	// window (exact, Redis time); GlobalMaxWindowRatioSampled from the
	// sampled admission counter, as the sliding figure.
	GlobalMaxWindowRatio        float64 `json:"global_max_window_ratio"`
	GlobalMaxWindowRatioSampled float64 `json:"global_max_window_ratio_sampled"`
	GlobalMaxSlidingWindowRatio float64 `json:"global_max_sliding_window_ratio"`
	// GlobalMaxSlidingWindowRatioSampled is the sliding figure from the
	// sampled admission counter (times when the calls returned).
	GlobalMaxSlidingWindowRatioSampled float64 `json:"global_max_sliding_window_ratio_sampled"`
	// GlobalMinWindowRatio is the least jobs admitted in an aligned 1 s
	// window of the span over the limit, and AdmittedPerS every such
	// window's jobs: where utilisation was lost.
	GlobalMinWindowRatio              float64 `json:"global_min_window_ratio"`
	AdmittedPerS                      []int64 `json:"admitted_per_s"`
	GlobalMaxWindowRatioStarts        float64 `json:"global_max_window_ratio_starts"`
	GlobalMaxSlidingWindowRatioStarts float64 `json:"global_max_sliding_window_ratio_starts"`
	TenantShareJain                   float64 `json:"tenant_share_jain"`
	TenantShareJainSpan               float64 `json:"tenant_share_jain_span"`
	// TenantMinShare and TenantMaxShare are the least and most jobs a
	// tenant started in the span, over the even share (jobs/tenants).
	TenantMinShare    float64 `json:"tenant_min_share"`
	TenantMaxShare    float64 `json:"tenant_max_share"`
	Utilisation       float64 `json:"utilisation"`
	UtilisationStarts float64 `json:"utilisation_starts"`
	// TenantsDry counts tenants with no job queued at the span's end:
	// their demand did not last the span, so the figures are not at full
	// demand.
	TenantsDry int `json:"tenants_dry"`

	CPUUsPerJob        float64 `json:"cpu_us_per_job"`
	ProcessCPUUsPerJob float64 `json:"process_cpu_us_per_job"`
	RedisCPUUsPerJob   float64 `json:"redis_cpu_us_per_job"`
	// AdmitCalls counts the admission scripts that leased jobs in the span
	// (one per shard and round), JobsPerAdmitCall the jobs of each.
	AdmitCalls       int64   `json:"admit_calls"`
	JobsPerAdmitCall float64 `json:"jobs_per_admit_call"`
	// ScriptCallsPerJob is, per Lua script, its calls in the span per job
	// admitted: with shards, a batch of several tenants is one call per
	// shard it touches.
	ScriptCallsPerJob map[string]float64 `json:"script_calls_per_job"`
	// JobsRunTwice counts jobs the processor ran more than once (allowed:
	// at least once; none expected here).
	JobsRunTwice int     `json:"jobs_run_twice"`
	HostLoad1m   float64 `json:"host_load_1m"`
}

// clusterRecorder is the processor: it records each run's start time and
// tenant, and the runs of every job.
type clusterRecorder struct {
	tenantIx map[string]int // read only once the phase runs
	mu       sync.Mutex
	starts   []startRec
	runs     map[string]int // tenant/job → runs
	unknown  int
}

type startRec struct {
	ns     int64
	tenant int
}

func (r *clusterRecorder) process(_ context.Context, j *processor.Job) error {
	now := time.Now().UnixNano()
	ix, ok := r.tenantIx[j.Tenant]
	r.mu.Lock()
	defer r.mu.Unlock()
	if !ok || j.GroupID != clusterGroup {
		r.unknown++
		return nil
	}
	r.starts = append(r.starts, startRec{ns: now, tenant: ix})
	r.runs[j.Tenant+"/"+j.JobID]++
	return nil
}

// admitSample is the fetcher's admission counter at a time.
type admitSample struct {
	ns    int64
	total int64
}

// admitSampler reads the admission counter (ready and non-ready) every
// clusterAdmitSample until stop is called.
func admitSampler(m *telemetry.Metrics) (stop func() []admitSample) {
	read := func() int64 {
		var t float64
		for _, d := range []string{telemetry.DestinationReady, telemetry.DestinationNonReady} {
			var pm dto.Metric
			if err := m.BackpressureAdmitted.WithLabelValues(d).Write(&pm); err == nil {
				t += pm.GetCounter().GetValue()
			}
		}
		return int64(t)
	}
	done := make(chan struct{})
	var out []admitSample
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(clusterAdmitSample)
		defer t.Stop()
		for {
			out = append(out, admitSample{time.Now().UnixNano(), read()})
			select {
			case <-done:
				out = append(out, admitSample{time.Now().UnixNano(), read()})
				return
			case <-t.C:
			}
		}
	})
	return func() []admitSample {
		close(done)
		wg.Wait()
		return out
	}
}

// windowWatch reads every shard's count of the jobs admitted in the
// global limit's current and last aligned windows ([redisq.Queue.GlobalAdmitted]:
// the counters admission increments in the same script that leases the
// jobs, by Redis's clock) every clusterWindowRead, and keeps the last
// value read of each window: the jobs admitted in each aligned window,
// exactly.
func windowWatch(q *redisq.Queue, window time.Duration) (stop func() (map[int64]int64, error)) {
	ctx, cancel := context.WithCancel(context.Background())
	counts := map[int64]int64{}
	var err error
	var wg sync.WaitGroup
	read := func() {
		w := time.Now().UnixNano() / int64(window)
		for _, ww := range []int64{w - 1, w} {
			n, e := q.GlobalAdmitted(ctx, ww)
			if e != nil {
				if ctx.Err() == nil && err == nil {
					err = e
				}
				return
			}
			counts[ww] = max(counts[ww], n)
		}
	}
	wg.Go(func() { loop.Every(ctx, clusterWindowRead, func(context.Context) { read() }, loop.Now()) })
	return func() (map[int64]int64, error) {
		cancel()
		wg.Wait()
		ctx = context.Background()
		read() // the last window's final count
		return counts, err
	}
}

// admitLog is the queue's observer in the cluster bench: every admission
// script call's jobs at the Redis time the script ran
// ([redisq.AdmitObserver]), which is when they count toward the limits.
type admitLog struct {
	mu    sync.Mutex
	calls []admitSample // ns = the script's Redis time; total = its jobs
	// scripts are the script calls answered: name and when (unix ns)
	scripts []scriptCall
}

type scriptCall struct {
	name string
	ns   int64
}

func (l *admitLog) ObserveLua(name string, _ time.Duration) {
	now := time.Now().UnixNano()
	l.mu.Lock()
	defer l.mu.Unlock()
	l.scripts = append(l.scripts, scriptCall{name: name, ns: now})
}

// scriptsPerJob is, per script, its calls answered in [from, to) per job.
func (l *admitLog) scriptsPerJob(from, to, jobs int64) map[string]float64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := map[string]float64{}
	if jobs <= 0 {
		return out
	}
	for _, c := range l.scripts {
		if c.ns >= from && c.ns < to {
			out[c.name]++
		}
	}
	for k, v := range out {
		out[k] = r3(v / float64(jobs))
	}
	return out
}

func (l *admitLog) ObserveAdmit(nowMs int64, jobs int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.calls = append(l.calls, admitSample{ns: nowMs * int64(time.Millisecond), total: int64(jobs)})
}

// counter counts the jobs of the calls logged, by their Redis time.
func (l *admitLog) counter() counter {
	l.mu.Lock()
	calls := slices.Clone(l.calls)
	l.mu.Unlock()
	slices.SortFunc(calls, func(a, b admitSample) int { return cmp.Compare(a.ns, b.ns) })
	cum := make([]admitSample, len(calls)) // total: jobs of the calls up to this one, as a sampled counter
	var t int64
	for i, c := range calls {
		t += c.total
		cum[i] = admitSample{ns: c.ns, total: t}
	}
	return samplesCounter(cum)
}

// counter counts events in [a, b) (unix ns).
type counter func(a, b int64) int64

// startsCounter counts the sorted times in [a, b).
func startsCounter(sorted []int64) counter {
	return func(a, b int64) int64 {
		i, _ := slices.BinarySearch(sorted, a)
		j, _ := slices.BinarySearch(sorted, b)
		return int64(j - i)
	}
}

// samplesCounter counts what a cumulative counter sampled at increasing
// times rose in [a, b): an increase is placed at the sample that first
// saw it.
func samplesCounter(s []admitSample) counter {
	at := func(t int64) int64 { // value of the last sample before t
		i := sort.Search(len(s), func(i int) bool { return s[i].ns >= t })
		if i == 0 {
			return 0
		}
		return s[i-1].total
	}
	return func(a, b int64) int64 { return at(b) - at(a) }
}

// alignedWindows is what count gives each window [k·w, (k+1)·w) wholly
// within [from, to), in order.
func alignedWindows(count counter, from, to, w int64) []int64 {
	var out []int64
	for a := (from + w - 1) / w * w; a+w <= to; a += w {
		out = append(out, count(a, a+w))
	}
	return out
}

// maxAlignedWindow is the most count gives any window [k·w, (k+1)·w)
// wholly within [from, to); 0 if none fits.
func maxAlignedWindow(count counter, from, to, w int64) int64 {
	var most int64
	for _, n := range alignedWindows(count, from, to, w) {
		most = max(most, n)
	}
	return most
}

// maxSlidingWindow is the most count gives any window [a, a+w) with a =
// from + k·step and a+w <= to.
func maxSlidingWindow(count counter, from, to, w, step int64) int64 {
	var most int64
	for a := from; a+w <= to; a += step {
		most = max(most, count(a, a+w))
	}
	return most
}

// tenantJain returns Jain's index of the tenants' starts over each window
// of length w from `from` while it ends by `to`: the least, and over the
// whole [from, to); and the least and most tenant's share of the whole
// span over the even share.
func tenantJain(starts []startRec, tenants int, from, to, w int64) (minJain, whole, minShare, maxShare float64) {
	per := map[int64][]float64{}
	all := make([]float64, tenants)
	for _, s := range starts {
		if s.ns < from || s.ns >= to {
			continue
		}
		all[s.tenant]++
		k := (s.ns - from) / w
		if from+(k+1)*w > to {
			continue
		}
		if per[k] == nil {
			per[k] = make([]float64, tenants)
		}
		per[k][s.tenant]++
	}
	minJain = math.Inf(1)
	for k := int64(0); from+(k+1)*w <= to; k++ {
		xs := per[k]
		if xs == nil {
			xs = make([]float64, tenants)
		}
		minJain = math.Min(minJain, jainIndex(xs))
	}
	if math.IsInf(minJain, 1) {
		minJain = 0
	}
	var sum float64
	for _, x := range all {
		sum += x
	}
	if sum > 0 {
		even := sum / float64(tenants)
		minShare, maxShare = slices.Min(all)/even, slices.Max(all)/even
	}
	return minJain, jainIndex(all), minShare, maxShare
}

// nodeSnap is a primary's counters at a time.
type nodeSnap struct {
	commands int64
	cpu      time.Duration
}

// redisNode is one primary (or the single redis-server) of a phase.
type redisNode struct {
	admin *redis.Client
	pid   int
}

func (n redisNode) snap(ctx context.Context) (nodeSnap, error) {
	var s nodeSnap
	stats, err := n.admin.Info(ctx, "commandstats").Result()
	if err != nil {
		return s, fmt.Errorf("bench: INFO commandstats: %w", err)
	}
	s.commands = commandCalls(stats)
	s.cpu = time.Duration(pidCPU(n.pid) * float64(time.Second))
	return s, nil
}

// commandCalls sums the calls of every command in an INFO commandstats
// answer, INFO itself left out (the bench's own reads); commands run by
// scripts count, as do the EVALSHA calls that ran them.
func commandCalls(stats string) int64 {
	var total int64
	for _, line := range strings.Split(stats, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_") || name == "cmdstat_info" {
			continue
		}
		for _, f := range strings.Split(rest, ",") {
			if v, ok := strings.CutPrefix(f, "calls="); ok {
				n, _ := strconv.ParseInt(v, 10, 64)
				total += n
			}
		}
	}
	return total
}

func serverPID(ctx context.Context, c *redis.Client) (int, error) {
	info, err := c.Info(ctx, "server").Result()
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "process_id:"); ok {
			return strconv.Atoi(v)
		}
	}
	return 0, errors.New("bench: INFO server has no process_id")
}

// RunClusterPhase runs one phase: fresh servers (a Redis Cluster of
// o.Primaries primaries, or one redis-server when 0, and an embedded NATS
// server), every pipeline target in this process with REDIS_SHARDS
// o.Shards, and o.Tenants tenants each submitting one group of jobs enough
// to outlast the span at the limit twice over. It measures the span, then
// waits until every group has COMPLETED and checks that every job was
// counted once and run.
func RunClusterPhase(ctx context.Context, name string, o ClusterOptions) (*ClusterResult, error) {
	progress := func(format string, args ...any) {
		if o.Progress != nil {
			o.Progress(name + ": " + fmt.Sprintf(format, args...))
		}
	}
	if o.Limit < 1 || o.Tenants < 1 || o.Span < time.Second || o.Shards < 1 || (o.Primaries == 0 && o.Shards != 1) {
		return nil, fmt.Errorf("bench: cluster phase %s: bad options %+v", name, o)
	}
	if o.Workers <= 0 {
		o.Workers = DefaultWorkers
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	dir, err := os.MkdirTemp("", "bulkaction-bench-cluster-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)

	// Redis
	var addrs []string
	var cluster *testenv.RedisCluster
	if o.Primaries > 0 {
		cluster, err = testenv.StartRedisCluster(dir, o.Primaries)
		if err != nil {
			return nil, err
		}
		defer cluster.Stop()
		addrs = cluster.Addrs()
	} else {
		rs, err := testenv.StartRedisServer(dir)
		if err != nil {
			return nil, err
		}
		defer rs.Stop()
		addrs = []string{rs.Addr()}
	}
	nodes := make([]redisNode, len(addrs))
	for i, a := range addrs {
		nodes[i].admin = redis.NewClient(&redis.Options{Addr: a})
		defer nodes[i].admin.Close()
		if nodes[i].pid, err = serverPID(ctx, nodes[i].admin); err != nil {
			return nil, err
		}
	}
	ns, err := natsutil.StartEmbedded(natsutil.EmbeddedOptions{Port: -1})
	if err != nil {
		return nil, err
	}
	defer func() { ns.Shutdown(); ns.WaitForShutdown() }()

	cfg, err := config.Load()
	if err != nil {
		return nil, err
	}
	cfg.RedisURL, cfg.NatsURL, cfg.HTTPAddr = "redis://"+addrs[0]+"/0", ns.ClientURL(), ""
	cfg.LogFormat, cfg.LogLevel = "text", "error"
	cfg.GlobalRps, cfg.WorkerCount, cfg.RedisShards = o.Limit, o.Workers, o.Shards
	if cluster != nil {
		cfg.RedisCluster = strings.Join(addrs, ",")
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}

	tenants := make([]string, o.Tenants)
	rec := &clusterRecorder{tenantIx: map[string]int{}, runs: map[string]int{}}
	for i := range tenants {
		tenants[i] = fmt.Sprintf("tenant-%03d", i)
		rec.tenantIx[tenants[i]] = i
	}
	res := &ClusterResult{Bench: "cluster", Phase: name, Limit: o.Limit, Shards: o.Shards, Primaries: max(o.Primaries, 1),
		Tenants: o.Tenants, SpanS: o.Span.Seconds(), GlobalPrimary: 0}
	if err := placeShards(ctx, cluster, cfg.RedisPrefix, tenants, res); err != nil {
		return nil, err
	}
	progress("shards per primary %v, tenants per primary %v, cross-shard keys on primary %d",
		res.PrimaryShards, res.PrimaryTenants, res.GlobalPrimary)

	mux := processor.NewMux()
	mux.HandleFunc(ClusterJobType, rec.process)
	alog := &admitLog{}
	cs, err := conns.Connect(ctx, cfg, "bench-cluster", alog)
	if err != nil {
		return nil, fmt.Errorf("bench: cluster phase %s: %w", name, err)
	}
	defer cs.Close()
	st, err := stack.Start(ctx, stack.Options{Config: cfg, Targets: stack.PipelineTargets, Mux: mux, Log: o.Log, Conns: cs})
	if err != nil {
		return nil, fmt.Errorf("bench: cluster phase %s: %w", name, err)
	}
	defer func() { _ = st.Stop() }()
	stopSampler, stopWindows := admitSampler(st.Metrics), windowWatch(st.Conns.Queue, st.Conns.Queue.Config().Window)
	var samples []admitSample
	var windows map[int64]int64
	defer func() {
		if samples == nil {
			stopSampler()
			_, _ = stopWindows()
		}
	}()

	// Demand: twice what the limit lets through from the first submit to
	// the span's end, so every tenant has jobs queued all along.
	perTenant := int(math.Ceil(2 * float64(o.Limit) * (o.Span + o.Warmup).Seconds() / float64(o.Tenants)))
	res.JobsSubmitted = int64(perTenant * o.Tenants)
	start := time.Now()
	if err := submitTenants(ctx, st, tenants, perTenant); err != nil {
		return nil, err
	}
	res.SubmitS = r3(time.Since(start).Seconds())
	q := st.Conns.Queue
	ref := func(t string) contracts.GroupRef { return contracts.Group(t, clusterGroup) }
	qctx, cancelQ := context.WithTimeout(ctx, 2*time.Minute)
	defer cancelQ()
	err = waitFor(qctx, 100*time.Millisecond, func() (bool, error) {
		for _, t := range tenants {
			info, ok, err := q.Group(qctx, ref(t))
			if err != nil || !ok || info.Jobs < int64(perTenant) {
				return false, err
			}
		}
		return true, nil
	})
	if err != nil {
		return nil, fmt.Errorf("bench: cluster phase %s: jobs not all queued: %w", name, err)
	}
	progress("%d jobs submitted in %.1fs, queued after %.1fs", res.JobsSubmitted, res.SubmitS, time.Since(start).Seconds())

	// The span.
	time.Sleep(o.Warmup)
	snap := func() ([]nodeSnap, time.Duration, error) {
		out := make([]nodeSnap, len(nodes))
		proc := processCPU()
		for i, n := range nodes {
			s, err := n.snap(ctx)
			if err != nil {
				return nil, 0, err
			}
			out[i] = s
		}
		return out, proc, nil
	}
	res.HostLoad1m = loadAvg()
	t0 := time.Now()
	before, proc0, err := snap()
	if err != nil {
		return nil, err
	}
	time.Sleep(o.Span)
	t1 := time.Now()
	after, proc1, err := snap()
	if err != nil {
		return nil, err
	}
	for _, t := range tenants {
		info, ok, err := q.Group(ctx, ref(t))
		if err != nil {
			return nil, err
		}
		if !ok || info.Pending == 0 {
			res.TenantsDry++
		}
	}
	progress("span measured; waiting for the groups to complete")

	// Every group completes with exact counts. At the limit, what is left
	// takes at most jobs/limit seconds: three times that and two minutes
	// more before giving up.
	cctx, cancelC := context.WithTimeout(ctx, 3*time.Duration(res.JobsSubmitted)*time.Second/time.Duration(o.Limit)+2*time.Minute)
	defer cancelC()
	err = waitFor(cctx, 250*time.Millisecond, func() (bool, error) {
		for _, t := range tenants {
			info, ok, err := q.Group(cctx, ref(t))
			if err != nil || !ok || info.State != contracts.StateCompleted {
				return false, err
			}
		}
		return true, nil
	})
	if err != nil {
		return nil, fmt.Errorf("bench: cluster phase %s: groups not completed: %w", name, err)
	}
	samples = stopSampler()
	if windows, err = stopWindows(); err != nil {
		return nil, fmt.Errorf("bench: cluster phase %s: reading the global limit's windows: %w", name, err)
	}
	var problems []error
	for _, t := range tenants {
		info, _, err := q.Group(ctx, ref(t))
		if err != nil {
			return nil, err
		}
		n := int64(perTenant)
		if info.Jobs != n || info.Done != n || info.Succeeded != n || info.Failed != 0 || info.Cancelled != 0 {
			problems = append(problems, fmt.Errorf("%s: jobs %d done %d succeeded %d failed %d cancelled %d, want %d succeeded",
				t, info.Jobs, info.Done, info.Succeeded, info.Failed, info.Cancelled, n))
		}
	}
	// stop the targets, so that the processor's records are final (a
	// redelivery would still be counted) before they are read
	if err := st.Stop(); err != nil {
		return nil, fmt.Errorf("bench: cluster phase %s: stopping the targets: %w", name, err)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	for _, t := range tenants {
		for i := range perTenant {
			switch c := rec.runs[t+"/"+jobID(i)]; {
			case c == 0:
				problems = append(problems, fmt.Errorf("%s/%s never ran", t, jobID(i)))
			case c > 1:
				res.JobsRunTwice++
			}
		}
	}
	if len(rec.runs) != int(res.JobsSubmitted) || rec.unknown > 0 {
		problems = append(problems, fmt.Errorf("the processor ran %d distinct jobs and %d unknown ones, want %d",
			len(rec.runs), rec.unknown, res.JobsSubmitted))
	}
	if len(problems) > 0 {
		if len(problems) > 10 {
			problems = append(problems[:10], fmt.Errorf("and %d more", len(problems)-10))
		}
		return nil, fmt.Errorf("bench: cluster phase %s: jobs lost or miscounted: %w", name, errors.Join(problems...))
	}

	// Figures.
	from, to, sec := t0.UnixNano(), t1.UnixNano(), int64(time.Second)
	times := make([]int64, 0, len(rec.starts))
	for _, s := range rec.starts {
		times = append(times, s.ns)
	}
	slices.Sort(times)
	starts, admits := startsCounter(times), samplesCounter(samples)
	limit, span := float64(o.Limit), o.Span.Seconds()
	res.Jobs, res.JobsStarted = admits(from, to), starts(from, to)
	res.Utilisation = r3(float64(res.Jobs) / (limit * span))
	res.UtilisationStarts = r3(float64(res.JobsStarted) / (limit * span))
	step := int64(ClusterSlideStep)
	res.GlobalMaxWindowRatioSampled = r3(float64(maxAlignedWindow(admits, from, to, sec)) / limit)
	for w, n := range windows {
		if w*sec >= from && (w+1)*sec <= to {
			res.GlobalMaxWindowRatio = max(res.GlobalMaxWindowRatio, r3(float64(n)/limit))
		}
	}
	for _, c := range alog.calls {
		if c.ns >= from && c.ns < to {
			res.AdmitCalls++
		}
	}
	if res.AdmitCalls > 0 {
		res.JobsPerAdmitCall = r3(float64(res.Jobs) / float64(res.AdmitCalls))
	}
	res.ScriptCallsPerJob = alog.scriptsPerJob(from, to, res.Jobs)
	res.GlobalMaxSlidingWindowRatio = r3(float64(maxSlidingWindow(alog.counter(), from, to, sec, step)) / limit)
	res.GlobalMaxSlidingWindowRatioSampled = r3(float64(maxSlidingWindow(admits, from, to, sec, step)) / limit)
	res.AdmittedPerS = alignedWindows(admits, from, to, sec)
	if len(res.AdmittedPerS) > 0 {
		res.GlobalMinWindowRatio = r3(float64(slices.Min(res.AdmittedPerS)) / limit)
	}
	res.GlobalMaxWindowRatioStarts = r3(float64(maxAlignedWindow(starts, from, to, sec)) / limit)
	res.GlobalMaxSlidingWindowRatioStarts = r3(float64(maxSlidingWindow(starts, from, to, sec, step)) / limit)
	j, whole, lo, hi := tenantJain(rec.starts, o.Tenants, from, to, int64(ClusterJainWindow))
	res.TenantShareJain, res.TenantShareJainSpan, res.TenantMinShare, res.TenantMaxShare = r4(j), r4(whole), r3(lo), r3(hi)

	var cmds, redisCPU int64
	var cpuMs []int64
	for i := range nodes {
		c := after[i].commands - before[i].commands
		res.PrimaryCommands = append(res.PrimaryCommands, c)
		cmds += c
		ms := (after[i].cpu - before[i].cpu).Milliseconds()
		cpuMs = append(cpuMs, ms)
		redisCPU += ms
	}
	res.PrimaryCPUMs = cpuMs
	if cmds > 0 {
		res.BusiestPrimaryShare = r3(float64(slices.Max(res.PrimaryCommands)) / float64(cmds))
	}
	if redisCPU > 0 {
		res.BusiestPrimaryCPUShare = r3(float64(slices.Max(cpuMs)) / float64(redisCPU))
	}
	if res.JobsStarted > 0 {
		perJob := func(d time.Duration) float64 { return r3(float64(d.Microseconds()) / float64(res.JobsStarted)) }
		processUs, redisUs := proc1-proc0, time.Duration(redisCPU)*time.Millisecond
		res.ProcessCPUUsPerJob, res.RedisCPUUsPerJob, res.CPUUsPerJob = perJob(processUs), perJob(redisUs), perJob(processUs+redisUs)
	}
	return res, nil
}

// placeShards fills in which primary serves each shard's slot, the
// tenants' shards and the cross-shard keys' slot (all on the one server
// without a cluster).
func placeShards(ctx context.Context, c *testenv.RedisCluster, prefix string, tenants []string, res *ClusterResult) error {
	if c == nil {
		res.PrimaryShards, res.PrimaryTenants = []int{res.Shards}, []int{len(tenants)}
		return nil
	}
	owner := func(key string) (int, error) {
		slot, err := c.KeySlot(ctx, key)
		if err != nil {
			return -1, err
		}
		return c.SlotOwner(ctx, slot)
	}
	res.PrimaryShards, res.PrimaryTenants = make([]int, res.Primaries), make([]int, res.Primaries)
	shardOwner := make([]int, res.Shards)
	for i := range res.Shards {
		o, err := owner(redisq.ShardPrefix(prefix, i) + "meta")
		if err != nil {
			return err
		}
		shardOwner[i] = o
		res.PrimaryShards[o]++
	}
	for _, t := range tenants {
		res.PrimaryTenants[shardOwner[redisq.ShardOf(t, res.Shards)]]++
	}
	g, err := owner(redisq.GlobalPrefix(prefix) + "meta")
	res.GlobalPrimary = g
	return err
}

// submitTenants submits perTenant jobs of ClusterJobType to every
// tenant's group and seals it: four producers, each taking its tenants in
// turn a batch at a time, so that every tenant's jobs arrive at the same
// pace.
func submitTenants(ctx context.Context, st *stack.Stack, tenants []string, perTenant int) error {
	const producers = 4
	base := client.New(st.Conns.JS, client.Options{Names: st.Conns.Names})
	errs := make([]error, producers)
	var wg sync.WaitGroup
	for p := range producers {
		wg.Go(func() {
			var mine []*client.Client
			for i := p; i < len(tenants); i += producers {
				mine = append(mine, base.ForTenant(tenants[i]))
			}
			jobs := make([]client.Job, 0, DefaultSubmitBatch)
			for first := 0; first < perTenant; first += DefaultSubmitBatch {
				for _, c := range mine {
					jobs = jobs[:0]
					for i := first; i < min(first+DefaultSubmitBatch, perTenant); i++ {
						jobs = append(jobs, client.Job{ID: jobID(i), Type: ClusterJobType})
					}
					if err := c.Submit(ctx, clusterGroup, jobs...); err != nil {
						errs[p] = fmt.Errorf("bench: submit %s: %w", c.Tenant(), err)
						return
					}
				}
			}
			for _, c := range mine {
				if err := c.Seal(ctx, clusterGroup, int64(perTenant)); err != nil {
					errs[p] = fmt.Errorf("bench: seal %s: %w", c.Tenant(), err)
					return
				}
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

func r3(v float64) float64 { return math.Round(v*1000) / 1000 }
func r4(v float64) float64 { return math.Round(v*10000) / 10000 }
