package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bulkaction/bulkaction/internal/config"
	"github.com/bulkaction/bulkaction/internal/gatewayflood"
	"github.com/bulkaction/bulkaction/internal/stack"
	"github.com/bulkaction/bulkaction/services/gateway"
)

var (
	flagIsoPhase   = flag.Duration("iso.phase", 10*time.Second, "isolation run: how long the well-behaved tenant is measured, alone and during the flood")
	flagIsoRate    = flag.Int("iso.requests", 40, "isolation run: the well-behaved tenant's requests per second (within its request rate)")
	flagIsoJobs    = flag.Int("iso.jobs", 500, "isolation run: jobs per request of the well-behaved tenant")
	flagIsoUploads = flag.Int("iso.uploads", 8, "isolation run: the flooding tenant's endless uploads at once")
	flagIsoSSE     = flag.Int("iso.sse", 500, "isolation run: event streams the flooding tenant tries to hold open")
	flagIsoPollers = flag.Int("iso.pollers", 4, "isolation run: the flooding tenant's failures and overview pollers (each)")
	flagIsoJunk    = flag.Int("iso.junk", 200, "isolation run: failed jobs of 200 KiB the flooding tenant keeps, read by its failures pollers")
)

// BenchmarkGatewayIsolation prints, as JSON lines, how well one tenant is
// shielded at the gateway from another that floods it: a well-behaved
// tenant submits paced requests alone, then while the other tenant sends
// endless uploads, holds hundreds of event streams open and polls its
// failures (large payloads) and the overview in loops. The gateway runs in
// a process of its own (the built binary) with the default limits, so its
// peak memory is its own. Goals (reported, not asserted): throughput ratio
// at least 0.8, p99 ratio at most 2, peak RSS at most 512 MiB.
func BenchmarkGatewayIsolation(b *testing.B) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	rep := &Reporter{W: os.Stdout}
	for b.Loop() {
		if err := runIsolation(ctx, b, rep); err != nil {
			b.Fatal(err)
		}
	}
}

// tenantKey is an API key and its tenant.
type tenantKey struct{ tenant, key string }

func runIsolation(ctx context.Context, b *testing.B, rep *Reporter) error {
	env, err := StartEnv()
	if err != nil {
		return err
	}
	defer env.Close()
	dir := b.TempDir()
	bin, err := buildBulkaction(dir)
	if err != nil {
		return err
	}
	good, flood := tenantKey{tenant: "good"}, tenantKey{tenant: "flood"}
	var lines []string
	for _, k := range []*tenantKey{&good, &flood} {
		if k.key, err = gateway.NewKey(); err != nil {
			return err
		}
		lines = append(lines, gateway.KeyLine(k.key, k.tenant, k.tenant))
	}
	keysFile := filepath.Join(dir, "keys")
	if err := os.WriteFile(keysFile, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
		return err
	}
	gw, err := startGatewayProcess(ctx, bin, env, keysFile, dir)
	if err != nil {
		return err
	}
	defer gw.stop()
	base := gw.base

	// The flooding tenant's failures: jobs whose 200 KiB payload the sleep
	// processor refuses (an unknown field), run by a pipeline started for
	// this and stopped before anything is measured.
	if err := seedFailures(ctx, b, env, base, flood, *flagIsoJunk); err != nil {
		return err
	}
	b.Logf("flooding tenant holds %d failed jobs of 200 KiB", *flagIsoJunk)

	pid := gw.cmd.Process.Pid
	cpu0, host0 := pidCPU(pid), readHostCPU()
	alone, err := paceTenant(ctx, base, good, "alone", *flagIsoPhase)
	if err != nil {
		return err
	}
	cpuAlone, hostAlone := pidCPU(pid)-cpu0, readHostCPU().since(host0)
	b.Logf("alone: %s; gateway CPU %.2f s", alone, cpuAlone)
	b.Logf("alone: %s", alone.stageText())
	b.Logf("alone: %s", alone.worstText())

	resetPeakRSS(pid)
	fl, err := startFloodProcess(ctx, gatewayflood.Options{Base: base, Key: flood.key, Group: "junk",
		Uploads: *flagIsoUploads, Streams: *flagIsoSSE, Pollers: *flagIsoPollers})
	if err != nil {
		return err
	}
	time.Sleep(2 * time.Second) // the flood at full strength
	cpu1, host1, client1 := pidCPU(pid), readHostCPU(), pidCPU(fl.cmd.Process.Pid)
	during, err := paceTenant(ctx, base, good, "flood", *flagIsoPhase)
	cpuFlood, hostFlood, cpuClient := pidCPU(pid)-cpu1, readHostCPU().since(host1), pidCPU(fl.cmd.Process.Pid)-client1
	rss := peakRSS(pid)
	fs, ferr := fl.stop()
	if err != nil {
		return err
	}
	if ferr != nil {
		return ferr
	}
	b.Logf("during the flood: %s; gateway CPU %.2f s", during, cpuFlood)
	b.Logf("during the flood: %s", during.stageText())
	b.Logf("during the flood: %s", during.worstText())
	b.Logf("flood: %s", fs.Text)
	b.Logf("gateway peak RSS %.1f MiB", float64(rss)/(1<<20))
	if alone.accepted == 0 || during.accepted == 0 {
		return errors.New("the well-behaved tenant got nothing accepted")
	}
	rep.Add("isolation_alone_jobs_per_sec", alone.jobsPerSec())
	rep.Add("isolation_flood_jobs_per_sec", during.jobsPerSec())
	rep.Add("isolation_throughput_ratio", during.jobsPerSec()/alone.jobsPerSec())
	rep.Add("isolation_alone_p99_ms", ms(alone.quantile(0.99)))
	rep.Add("isolation_flood_p99_ms", ms(during.quantile(0.99)))
	rep.Add("isolation_p99_ratio", float64(during.quantile(0.99))/float64(max(alone.quantile(0.99), time.Microsecond)))
	rep.Add("isolation_good_refused", float64(alone.refused+during.refused))
	rep.Add("isolation_flood_gateway_peak_rss_mib", float64(rss)/(1<<20))
	rep.Add("isolation_alone_gateway_cpu_s", cpuAlone)
	rep.Add("isolation_flood_gateway_cpu_s", cpuFlood)
	// The flooding client runs on this machine too (a real one would not):
	// its CPU, and the machine's busy share in each phase, tell how much of
	// the p99 ratio is the CPU the flood's own client takes.
	rep.Add("isolation_flood_client_cpu_s", cpuClient)
	rep.Add("isolation_alone_host_busy_share", hostAlone)
	rep.Add("isolation_flood_host_busy_share", hostFlood)
	rep.Add("isolation_flood_requests", float64(fs.Requests))
	rep.Add("isolation_flood_refused_429", float64(fs.Refused429))
	rep.Add("isolation_flood_refused_413", float64(fs.Refused413))
	rep.Add("isolation_flood_sse_open_peak", float64(fs.StreamsPeak))
	return nil
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// floodEnv carries a flood's options to the process that runs it.
const floodEnv = "BULKACTION_BENCH_FLOOD"

// floodSummary is what the flood process reports when it stops.
type floodSummary struct {
	Requests, Refused429, Refused413, StreamsPeak int64
	Text                                          string
}

// TestIsolationFloodProcess is the flooding tenant of the isolation run,
// in a process of its own (the test binary run again) so that its
// goroutines do not share a Go scheduler with the well-behaved tenant and
// the embedded NATS server: it floods until its standard input closes,
// then prints a floodSummary. It does nothing in an ordinary test run.
func TestIsolationFloodProcess(t *testing.T) {
	conf := os.Getenv(floodEnv)
	if conf == "" {
		return
	}
	var o gatewayflood.Options
	if err := json.Unmarshal([]byte(conf), &o); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	st, wait := gatewayflood.Start(ctx, o)
	_, _ = io.Copy(io.Discard, os.Stdin)
	cancel()
	wait()
	_ = json.NewEncoder(os.Stdout).Encode(floodSummary{Requests: st.Requests(), Refused429: st.Status(http.StatusTooManyRequests),
		Refused413: st.Status(http.StatusRequestEntityTooLarge), StreamsPeak: st.StreamsPeak(), Text: st.String()})
}

// floodProcess is a running TestIsolationFloodProcess.
type floodProcess struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	out   bytes.Buffer
}

func startFloodProcess(ctx context.Context, o gatewayflood.Options) (*floodProcess, error) {
	conf, _ := json.Marshal(o)
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestIsolationFloodProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), floodEnv+"="+string(conf))
	f := &floodProcess{cmd: cmd}
	var err error
	if f.stdin, err = cmd.StdinPipe(); err != nil {
		return nil, err
	}
	cmd.Stdout, cmd.Stderr = &f.out, &f.out
	return f, cmd.Start()
}

// stop ends the flood and returns its summary.
func (f *floodProcess) stop() (floodSummary, error) {
	_ = f.stdin.Close()
	err := f.cmd.Wait()
	var s floodSummary
	for line := range strings.SplitSeq(f.out.String(), "\n") {
		if strings.HasPrefix(line, "{") && json.Unmarshal([]byte(line), &s) == nil {
			return s, nil
		}
	}
	return s, fmt.Errorf("flood process: %v: %s", err, f.out.String())
}

// buildBulkaction builds the bulkaction binary into dir.
func buildBulkaction(dir string) (string, error) {
	goBin := filepath.Join(os.Getenv("GOROOT"), "bin", "go")
	if _, err := os.Stat(goBin); err != nil {
		goBin = "go"
	}
	// Built in the main module (the bench module lists only what it imports).
	cmd := exec.Command(goBin, "build", "-o", dir+string(os.PathSeparator), "./cmd/bulkaction")
	cmd.Dir = ".."
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build: %v\n%s", err, out)
	}
	return filepath.Join(dir, "bulkaction"), nil
}

type gatewayProcess struct {
	cmd  *exec.Cmd
	base string
	done chan struct{}
}

func (g *gatewayProcess) stop() {
	_ = g.cmd.Process.Signal(os.Interrupt)
	select {
	case <-g.done:
	case <-time.After(10 * time.Second):
		_ = g.cmd.Process.Kill()
		<-g.done
	}
}

// startGatewayProcess runs `bulkaction gateway` on a free port with the
// default limits and waits until it answers.
func startGatewayProcess(ctx context.Context, bin string, env *Env, keysFile, dir string) (*gatewayProcess, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	addr := l.Addr().String()
	_ = l.Close()
	cmd := exec.Command(bin, "gateway")
	cmd.Env = append(os.Environ(),
		"BULKACTION_REDIS_URL="+env.RedisURL(PipelineDB), "BULKACTION_NATS_URL="+env.NatsURL(),
		"BULKACTION_GATEWAY_ADDR="+addr, "BULKACTION_GATEWAY_KEYS_FILE="+keysFile, "BULKACTION_HTTP_ADDR=",
		"BULKACTION_GATEWAY_SPOOL_DIR="+dir, "BULKACTION_LOG_LEVEL=error")
	logf, err := os.Create(filepath.Join(dir, "gateway.log"))
	if err != nil {
		return nil, err
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	g := &gatewayProcess{cmd: cmd, base: "http://" + addr, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); _ = logf.Close(); close(g.done) }()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-g.done:
			out, _ := os.ReadFile(filepath.Join(dir, "gateway.log"))
			return nil, fmt.Errorf("gateway exited: %s", out)
		case <-ctx.Done():
			g.stop()
			return nil, ctx.Err()
		default:
		}
		if resp, err := http.Get(g.base + "/v1/openapi.json"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return g, nil
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	g.stop()
	return nil, errors.New("gateway did not answer within 30s")
}

// seedFailures posts n jobs with a 200 KiB payload the sleep processor
// refuses, runs a pipeline until they all failed, and stops it.
func seedFailures(ctx context.Context, b *testing.B, env *Env, base string, k tenantKey, n int) error {
	cfg, err := config.Load()
	if err != nil {
		return err
	}
	cfg.RedisURL, cfg.NatsURL, cfg.HTTPAddr, cfg.GatewayAddr = env.RedisURL(PipelineDB), env.NatsURL(), "", ""
	cfg.LogFormat, cfg.LogLevel = "text", "error"
	st, err := stack.Start(ctx, stack.Options{Config: cfg,
		Targets: []string{stack.TargetFetcher, stack.TargetDispatcher, stack.TargetWorker, stack.TargetAggregator},
		Log:     slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		return err
	}
	defer func() { _ = st.Stop() }()
	pad := strings.Repeat("x", 200<<10)
	for i := 0; i < n; i += 4 { // four jobs per request, within the message limit
		var body bytes.Buffer
		for j := i; j < min(i+4, n); j++ {
			fmt.Fprintf(&body, `{"jobId":"junk%05d","type":"sleep","payload":{"pad":%q}}`+"\n", j, pad)
		}
		code, msg, err := post(ctx, http.DefaultClient, base+"/v1/groups/junk/jobs", k.key, &body)
		if err != nil {
			return err
		}
		if code == http.StatusTooManyRequests {
			time.Sleep(200 * time.Millisecond)
			i -= 4
			continue
		}
		if code != http.StatusAccepted {
			return fmt.Errorf("seed junk: %d %s", code, msg)
		}
	}
	deadline := time.Now().Add(3 * time.Minute)
	for time.Now().Before(deadline) {
		req, _ := http.NewRequestWithContext(ctx, "GET", base+"/v1/groups/junk", nil)
		req.Header.Set("Authorization", "Bearer "+k.key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		var g struct {
			Failed int64 `json:"failed"`
		}
		err = json.NewDecoder(resp.Body).Decode(&g)
		resp.Body.Close()
		if err == nil && g.Failed == int64(n) {
			return nil
		}
		time.Sleep(500 * time.Millisecond)
	}
	return fmt.Errorf("the %d junk jobs did not all fail within 3 minutes", n)
}

func post(ctx context.Context, hc *http.Client, url, key string, body io.Reader) (int, string, error) {
	code, msg, _, err := postTimed(ctx, hc, url, key, body)
	return code, msg, err
}

// postTimed is post that also returns the answer's Server-Timing header.
func postTimed(ctx context.Context, hc *http.Client, url, key string, body io.Reader) (int, string, string, error) {
	req, err := http.NewRequestWithContext(ctx, "POST", url, body)
	if err != nil {
		return 0, "", "", err
	}
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/x-ndjson")
	resp, err := hc.Do(req)
	if err != nil {
		return 0, "", "", err
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	return resp.StatusCode, string(msg), resp.Header.Get("Server-Timing"), nil
}

// paced is one phase of the well-behaved tenant.
type paced struct {
	took      time.Duration
	accepted  int64 // jobs
	refused   int64 // requests answered other than 202
	first     string
	latencies []time.Duration
	// stages are the gateway's Server-Timing stages of the accepted
	// requests, and "outside" each one's time to its answer beyond the
	// gateway's total (the network, the connection's queue, the answer's
	// sending and what runs after it).
	stages map[string][]time.Duration
	// worst is the slowest answer to a request sent in each second of
	// the phase: a p99 made of one burst shows as a few slow seconds.
	worst []time.Duration
}

// worstText is the slowest answer of each second of the phase.
func (p *paced) worstText() string {
	parts := make([]string, len(p.worst))
	for i, d := range p.worst {
		parts[i] = strconv.FormatFloat(ms(d), 'f', 1, 64)
	}
	return "slowest answer per second (ms): " + strings.Join(parts, " ")
}

// addTiming records one answer's Server-Timing and its latency.
func (p *paced) addTiming(header string, lat time.Duration) {
	if header == "" {
		return
	}
	if p.stages == nil {
		p.stages = map[string][]time.Duration{}
	}
	for item := range strings.SplitSeq(header, ",") {
		name, params, _ := strings.Cut(strings.TrimSpace(item), ";")
		v, ok := strings.CutPrefix(strings.TrimSpace(params), "dur=")
		f, err := strconv.ParseFloat(v, 64)
		if !ok || err != nil {
			continue
		}
		d := time.Duration(f * float64(time.Millisecond))
		p.stages[name] = append(p.stages[name], d)
		if name == "total" {
			p.stages["outside"] = append(p.stages["outside"], lat-d)
		}
	}
}

// stageText is each stage's p50 and p99, in the order of the request.
func (p *paced) stageText() string {
	var parts []string
	for _, name := range []string{"auth", "door", "check", "read", "room", "publish", "total", "outside"} {
		ds := p.stages[name]
		if len(ds) == 0 {
			continue
		}
		slices.Sort(ds)
		parts = append(parts, fmt.Sprintf("%s %s/%s", name, ds[len(ds)/2].Round(10*time.Microsecond),
			ds[min(len(ds)-1, int(0.99*float64(len(ds))))].Round(10*time.Microsecond)))
	}
	return "stages p50/p99: " + strings.Join(parts, ", ")
}

func (p *paced) jobsPerSec() float64 { return float64(p.accepted) / p.took.Seconds() }

func (p *paced) quantile(q float64) time.Duration {
	if len(p.latencies) == 0 {
		return 0
	}
	return p.latencies[min(len(p.latencies)-1, int(q*float64(len(p.latencies))))]
}

func (p *paced) String() string {
	s := fmt.Sprintf("%d jobs in %s (%.0f/s), %d requests, %d refused, p50 %s p99 %s max %s",
		p.accepted, p.took.Round(time.Millisecond), p.jobsPerSec(), len(p.latencies), p.refused,
		p.quantile(0.5), p.quantile(0.99), p.quantile(1))
	if p.first != "" {
		s += " (first refusal: " + p.first + ")"
	}
	return s
}

// paceTenant sends the well-behaved tenant's requests (iso.jobs jobs each)
// at iso.requests per second for d, each in its own group's stream of ids,
// and measures each request's time to its answer.
func paceTenant(ctx context.Context, base string, k tenantKey, phase string, d time.Duration) (*paced, error) {
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	defer hc.CloseIdleConnections()
	interval := time.Second / time.Duration(*flagIsoRate)
	var (
		mu  sync.Mutex
		res = &paced{}
		wg  sync.WaitGroup
		bad atomic.Value
	)
	start := time.Now()
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for i := 0; time.Since(start) < d; i++ {
		<-tick.C
		wg.Go(func() {
			var body bytes.Buffer
			for j := 0; j < *flagIsoJobs; j++ {
				fmt.Fprintf(&body, `{"jobId":"r%06d-%04d","type":"sleep","payload":{"ms":1}}`+"\n", i, j)
			}
			t0 := time.Now()
			code, msg, timing, err := postTimed(ctx, hc, base+"/v1/groups/"+phase+"/jobs", k.key, &body)
			lat := time.Since(t0)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err != nil:
				bad.Store(err)
			case code == http.StatusAccepted:
				res.accepted += int64(*flagIsoJobs)
				res.addTiming(timing, lat)
			default:
				res.refused++
				if res.refused == 1 {
					res.first = fmt.Sprintf("%d %s", code, msg)
					bad.Store(fmt.Errorf("%s: first refusal %s", phase, res.first))
				}
			}
			res.latencies = append(res.latencies, lat)
			sec := int(t0.Sub(start) / time.Second)
			for len(res.worst) <= sec {
				res.worst = append(res.worst, 0)
			}
			res.worst[sec] = max(res.worst[sec], lat)
		})
	}
	wg.Wait()
	res.took = time.Since(start)
	slices.Sort(res.latencies)
	if err, ok := bad.Load().(error); ok && res.accepted == 0 {
		return nil, err
	}
	return res, nil
}

// hostCPU is the machine's CPU time from /proc/stat, in clock ticks.
type hostCPU struct{ busy, total float64 }

func readHostCPU() hostCPU {
	data, err := os.ReadFile("/proc/stat")
	if err != nil {
		return hostCPU{}
	}
	line, _, _ := strings.Cut(string(data), "\n")
	var h hostCPU
	for i, f := range strings.Fields(line)[1:] {
		v, _ := strconv.ParseFloat(f, 64)
		h.total += v
		if i != 3 && i != 4 { // idle and iowait
			h.busy += v
		}
	}
	return h
}

// since is the busy share of the machine's CPU time since h0 (0 to 1).
func (h hostCPU) since(h0 hostCPU) float64 {
	if h.total <= h0.total {
		return 0
	}
	return (h.busy - h0.busy) / (h.total - h0.total)
}

// resetPeakRSS resets the high-water mark of the process's resident memory.
func resetPeakRSS(pid int) {
	_ = os.WriteFile("/proc/"+strconv.Itoa(pid)+"/clear_refs", []byte("5"), 0)
}

// peakRSS is the most resident memory the process had since its start or
// its last resetPeakRSS (VmHWM), -1 when unknown.
func peakRSS(pid int) int64 {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return -1
	}
	for line := range strings.SplitSeq(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb << 10
		}
	}
	return -1
}
