package demo

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/bulkaction/bulkaction/internal/config"
	"github.com/bulkaction/bulkaction/internal/stack"
	"github.com/bulkaction/bulkaction/internal/testenv"
	"github.com/bulkaction/bulkaction/pkg/client"
	"github.com/bulkaction/bulkaction/pkg/contracts"
	"github.com/bulkaction/bulkaction/pkg/processor/builtin"
)

// startDemoStack runs the targets that move jobs on a redis-server and an
// embedded NATS server of the test's own, set up as `dev --demo` sets them
// for w (its global rate, worker slots, per-type limits, the adaptive rate
// on), with the demo's processors: the http processor may call the partner
// p and no other host.
func startDemoStack(t *testing.T, w Workload, p *Partner) *stack.Stack {
	t.Helper()
	srv := testenv.NewRedisServer(t)
	natsURL, _, _ := testenv.NATS(t)
	cfg, err := config.Load()
	if err != nil {
		t.Fatal(err)
	}
	cfg.RedisURL, cfg.RedisPrefix, cfg.NatsURL, cfg.HTTPAddr = srv.URL(), "demo:", natsURL, ""
	cfg.GlobalRps, cfg.WorkerCount, cfg.TypeRateLimits = w.GlobalRps, w.WorkerCount, w.TypeRateLimits
	cfg.AdaptiveRateEnabled = true
	cfg.HTTPAllowedHosts = nil
	cfg.LogFormat, cfg.LogLevel = "text", "warn"
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	st, err := stack.Start(context.Background(), stack.Options{Config: cfg, Targets: stack.PipelineTargets,
		Mux: w.Processors(builtin.Options{}, p), Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatalf("stack did not start: %v", err)
	}
	t.Cleanup(func() {
		if err := st.Stop(); err != nil {
			t.Errorf("stack: %v", err)
		}
	})
	return st
}

// TestSmallDemoLearnsThePartner runs the small demo on real Redis, NATS and
// HTTP: hooli's jobs call the partner API over loopback, the adaptive rate
// learns its capacity as it changes, and hooli's jobs are throttled far less
// than the one 429 per job of the coin flip the demo had before. Every
// group completes, the summary reports the partner, and hooli ends no
// sooner than the partner's capacity allows.
func TestSmallDemoLearnsThePartner(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the small demo, 10 s or so")
	}
	w, err := ForScale(ScaleSmall)
	if err != nil {
		t.Fatal(err)
	}
	p, err := StartPartner(w.Partner)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	st := startDemoStack(t, w, p)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cfg := st.Config()
	var out strings.Builder
	s, err := Run(ctx, w, Options{
		Client: client.New(st.Conns.JS, client.Options{Names: st.Conns.Names, Limits: contracts.Limits{MaxPayloadBytes: cfg.MaxPayloadBytes}}),
		Queue:  st.Conns.Queue, Out: &out, Partner: p,
	})
	if err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	var sum strings.Builder
	if err := s.Write(&sum); err != nil {
		t.Fatal(err)
	}
	t.Logf("summary:%s", sum.String())
	if !s.AllCompleted() {
		t.Fatalf("not every group completed")
	}
	var hooli GroupResult
	for _, g := range s.Groups {
		if g.ID == "hooli/crm-sync" {
			hooli = g
		}
	}
	r := s.Partner
	// its http jobs' destination is the partner's host, as ingest derives it
	if r == nil || hooli.Type != "http" || r.Destination != "127.0.0.1" || hooli.Succeeded != int64(hooli.Jobs) {
		t.Fatalf("hooli %+v, partner %+v", hooli, r)
	}
	// Every job was accepted once; every 429 the partner answered is a
	// throttle of hooli's group.
	if r.Accepted < int64(hooli.Jobs) || r.Throttled != hooli.Throttles {
		t.Errorf("the partner accepted %d calls and throttled %d; hooli has %d jobs and %d throttles", r.Accepted, r.Throttled, hooli.Jobs, hooli.Throttles)
	}
	// The coin flip made about one throttle per job.
	if tpj := hooli.ThrottlesPerJob(); tpj > 0.5 {
		t.Errorf("hooli: %.2f throttles per job, want well under 1", tpj)
	}
	learned := false
	for _, rd := range r.Learned {
		learned = learned || rd.Rate > 0
	}
	if !learned {
		t.Errorf("no rate learned of the partner: %+v", r.Learned)
	}
	// The partner is the one downstream that throttles: no other job type
	// has a learned rate that would slow its groups (they are tracked, not
	// limited: rate 0).
	rates, err := st.Conns.Queue.DestinationRates(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range rates.Rates {
		if d.Destination != r.Destination && d.Rate > 0 {
			t.Errorf("a rate was learned for %s: %+v", d.Destination, d)
		}
	}
	// hooli cannot end sooner than the partner accepts its calls.
	if least := w.Partner.timeFor(hooli.SubmittedAt, float64(hooli.Succeeded)); hooli.FinishedAt < hooli.SubmittedAt+least {
		t.Errorf("hooli finished at %s, before the partner could accept its %d calls (%s)", hooli.FinishedAt, hooli.Succeeded, hooli.SubmittedAt+least)
	}
	text := sum.String()
	for _, want := range []string{"hooli/crm-sync called hooli's partner API: ", "learned rate over the second half of each phase (its capacity): ", "\nmakespan "} {
		if !strings.Contains(text, want) {
			t.Errorf("the summary lacks %q", want)
		}
	}
	if !strings.Contains(out.String(), "hooli's partner API: capacity ") {
		t.Errorf("the live view does not show the partner:\n%s", out.String())
	}
}
