package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/bulkaction/bulkaction/internal/config"
	"github.com/bulkaction/bulkaction/internal/stack"
	"github.com/bulkaction/bulkaction/pkg/client"
	"github.com/bulkaction/bulkaction/pkg/contracts"
	"github.com/bulkaction/bulkaction/pkg/jspub"
	"github.com/bulkaction/bulkaction/services/gateway"
)

var (
	flagGWJobs = flag.Int("gw.jobs", 1_000_000, "gateway run: jobs posted as NDJSON (and published with the SDK)")
	flagGWSubs = flag.Int("gw.subscribers", 2000, "gateway run: concurrent SSE subscribers")
	flagGWEvts = flag.Int("gw.events", 5, "gateway run: events published per subscriber's group")
)

// BenchmarkGateway prints the gateway's figures as JSON lines (run it once:
// -benchtime 1x): jobs accepted per second through POST …/jobs (NDJSON)
// against publishing the same jobs with the Go SDK, and the delay from an
// EVENTS message to its SSE delivery with many subscribers, and the
// gateway's memory per subscriber. Goals are reported, not asserted.
func BenchmarkGateway(b *testing.B) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	rep := &Reporter{W: os.Stdout}
	for b.Loop() {
		if err := runGateway(ctx, b, rep); err != nil {
			b.Fatal(err)
		}
	}
}

func runGateway(ctx context.Context, b *testing.B, rep *Reporter) error {
	env, err := StartEnv()
	if err != nil {
		return err
	}
	defer env.Close()
	cfg, err := config.Load()
	if err != nil {
		return err
	}
	cfg.RedisURL, cfg.NatsURL, cfg.HTTPAddr, cfg.GatewayAddr = env.RedisURL(PipelineDB), env.NatsURL(), "", "127.0.0.1:0"
	cfg.LogFormat, cfg.LogLevel = "text", "error"
	cfg.GatewaySSEHeartbeat = 5 * time.Second
	// The gateway's own capacity: one tenant's limits off (the isolation
	// run measures them at their defaults).
	cfg.GatewayTenantRequestRate, cfg.GatewayTenantJobRate, cfg.GatewayTenantSSEStreams = 0, 0, 0
	key, err := gateway.NewKey()
	if err != nil {
		return err
	}
	keys := gateway.StaticKeys(map[string]gateway.Principal{gateway.HashKey(key): {Tenant: "bench"}})
	// The gateway alone: the jobs stay on SUBMIT, both ways measured alike.
	st, err := stack.Start(ctx, stack.Options{Config: cfg, Targets: []string{stack.TargetGateway},
		Log: slog.New(slog.NewTextHandler(io.Discard, nil)), GatewayKeys: keys})
	if err != nil {
		return err
	}
	defer func() { _ = st.Stop() }()
	base := "http://" + st.Gateway.Addr().String()
	n := *flagGWJobs

	// 1. The SDK: the same jobs, client batches of 1,000 within the message limit.
	c := client.New(st.Conns.JS, client.Options{Names: st.Conns.Names, Tenant: "bench", BatchSize: contracts.MaxBatch})
	jobs := make([]client.Job, 0, 10_000)
	start := time.Now()
	for i := 0; i < n; i++ {
		jobs = append(jobs, client.Job{ID: fmt.Sprintf("j%07d", i), Type: "noop", Payload: json.RawMessage(`{"n":1}`)})
		if len(jobs) == cap(jobs) || i == n-1 {
			if err := c.Submit(ctx, "sdk", jobs...); err != nil {
				return err
			}
			jobs = jobs[:0]
		}
	}
	sdk := time.Since(start)
	b.Logf("SDK: %d jobs in %s", n, sdk)

	// 2. The gateway: one POST of NDJSON, streamed.
	pr, pw := io.Pipe()
	go func() {
		w := bufio.NewWriterSize(pw, 64<<10)
		for i := 0; i < n; i++ {
			fmt.Fprintf(w, `{"jobId":"j%07d","type":"noop","payload":{"n":1}}`+"\n", i)
		}
		_ = w.Flush()
		_ = pw.Close()
	}()
	req, _ := http.NewRequestWithContext(ctx, "POST", base+"/v1/groups/http/jobs", pr)
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/x-ndjson")
	start = time.Now()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	gw := time.Since(start)
	if resp.StatusCode != http.StatusAccepted {
		return fmt.Errorf("POST jobs: %d %s", resp.StatusCode, body)
	}
	b.Logf("gateway: %d jobs in %s: %s", n, gw, body)
	rep.Add("gateway_submit_jobs_per_sec", float64(n)/gw.Seconds())
	rep.Add("sdk_submit_jobs_per_sec", float64(n)/sdk.Seconds())
	rep.Add("gateway_vs_sdk_submit", sdk.Seconds()/gw.Seconds())

	// 3. SSE: one subscriber per group, events published on EVENTS.
	return sseFigures(ctx, b, rep, st, base, key)
}

func sseFigures(ctx context.Context, b *testing.B, rep *Reporter, st *stack.Stack, base, key string) error {
	subs, per := *flagGWSubs, *flagGWEvts
	names := st.Conns.Names
	js := st.Conns.JS
	event := func(g int, state contracts.GroupState, done int64) *nats.Msg {
		ev := contracts.GroupEvent{V: contracts.Version, Tenant: "bench", GroupID: fmt.Sprintf("sse%05d", g), State: state,
			Jobs: int64(per), Succeeded: done, At: time.Now().UTC()}
		data, _ := json.Marshal(ev)
		return &nats.Msg{Subject: names.Events(ev.Ref()), Data: data}
	}
	// Every group has a first event, so its stream opens at once.
	var first []*nats.Msg
	for g := 0; g < subs; g++ {
		first = append(first, event(g, contracts.StateRunning, 0))
	}
	if err := publishAll(ctx, js, first); err != nil {
		return err
	}
	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	var (
		mu     sync.Mutex
		delays []time.Duration
		open   sync.WaitGroup
		done   sync.WaitGroup
		failed atomic.Int64
	)
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: subs, MaxConnsPerHost: 0}}
	sctx, stop := context.WithCancel(ctx)
	defer stop()
	for g := 0; g < subs; g++ {
		open.Add(1)
		done.Add(1)
		go func() {
			defer done.Done()
			req, _ := http.NewRequestWithContext(sctx, "GET", fmt.Sprintf("%s/v1/groups/sse%05d/events", base, g), nil)
			req.Header.Set("Authorization", "Bearer "+key)
			resp, err := hc.Do(req)
			if err != nil || resp.StatusCode != 200 {
				failed.Add(1)
				open.Done()
				return
			}
			defer resp.Body.Close()
			sc := bufio.NewScanner(resp.Body)
			seen := 0
			for sc.Scan() {
				line := sc.Text()
				data, ok := strings.CutPrefix(line, "data: ")
				if !ok {
					continue
				}
				now := time.Now()
				seen++
				if seen == 1 {
					open.Done() // the opening event
					continue
				}
				var ev contracts.GroupEvent
				if json.Unmarshal([]byte(data), &ev) == nil {
					mu.Lock()
					delays = append(delays, now.Sub(ev.At))
					mu.Unlock()
				}
				if ev.State == contracts.StateCompleted {
					return
				}
			}
		}()
	}
	open.Wait()
	var after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&after)
	perSub := float64(int64(after.HeapInuse)-int64(before.HeapInuse)) / float64(subs)
	b.Logf("%d SSE streams open (%d failed); heap +%.1f KB per subscriber (client and server in one process)",
		subs-int(failed.Load()), failed.Load(), perSub/1024)
	// Events: per rounds of one event per group, the last COMPLETED.
	for k := 1; k <= per; k++ {
		var msgs []*nats.Msg
		state := contracts.StateRunning
		if k == per {
			state = contracts.StateCompleted
		}
		for g := 0; g < subs; g++ {
			msgs = append(msgs, event(g, state, int64(k)))
		}
		if err := publishAll(ctx, js, msgs); err != nil {
			return err
		}
		time.Sleep(200 * time.Millisecond)
	}
	done.Wait()
	slices.Sort(delays)
	if len(delays) == 0 {
		return fmt.Errorf("no SSE event arrived")
	}
	q := func(p float64) time.Duration { return delays[min(len(delays)-1, int(p*float64(len(delays))))] }
	b.Logf("%d events delivered to %d subscribers: delay p50 %s p99 %s max %s", len(delays), subs, q(0.5), q(0.99), delays[len(delays)-1])
	rep.Add("sse_subscribers", float64(subs))
	rep.Add("sse_delay_p50_ms", float64(q(0.5).Microseconds())/1000)
	rep.Add("sse_delay_p99_ms", float64(q(0.99).Microseconds())/1000)
	rep.Add("sse_heap_bytes_per_subscriber", perSub)
	rep.Add("sse_events_delivered", float64(len(delays)))
	return nil
}

func publishAll(ctx context.Context, js jetstream.JetStream, msgs []*nats.Msg) error {
	for i, err := range jspub.PublishWindow(ctx, js, msgs, 1000) {
		if err != nil {
			return fmt.Errorf("publish %s: %w", msgs[i].Subject, err)
		}
	}
	return nil
}
