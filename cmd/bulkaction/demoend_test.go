package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/bulkaction/bulkaction/internal/demo"
	"github.com/bulkaction/bulkaction/internal/devenv"
	"github.com/bulkaction/bulkaction/internal/pipelinetest"
	"github.com/bulkaction/bulkaction/internal/testkit"
)

// TestDemoEndSignsIn: in a terminal the end of the demo named the
// dashboard without the key, unlike the banner, so it opened on the
// sign-in page. It now names the banner's own sign-in URL.
func TestDemoEndSignsIn(t *testing.T) {
	clearEnv(t)
	g := pipelinetest.StartGateway(t, nil, nil)
	b := banner{cfg: g.Config, env: &devenv.Env{NatsURL: g.Config.NatsURL, RedisURL: g.Config.RedisURL, RedisKind: devenv.RedisExternal},
		apiAddr: g.Stack.Gateway.Addr().String(), apiKey: g.Keys[pipelinetest.Admin]}
	want := b.uiURL()
	if !strings.HasSuffix(want, "/ui/#key="+b.apiKey) || !strings.Contains(b.String(), "  UI     "+want+" ") {
		t.Fatalf("the banner's dashboard URL %q does not sign in:\n%s", want, b)
	}
	w := demo.Workload{Scale: "test", JobType: "sleep", Groups: []demo.Group{
		{Tenant: "acme", ID: "end", Jobs: 3, Payload: json.RawMessage(`{"ms":1}`)},
	}}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var out syncBuffer
	done := make(chan error, 1)
	go func() { done <- runDemo(ctx, g.Stack, w, demo.Options{Out: &out, Terminal: true}, want) }()
	testkit.WaitFor(t, "the end of the demo", 30*time.Second, func() bool { return strings.Contains(out.String(), "The demo is over") })
	cancel() // Ctrl-C
	<-done
	if line := "everything keeps running (dashboard " + want + "). Ctrl-C stops."; !strings.Contains(out.String(), line) {
		t.Errorf("the end of the demo lacks %q:\n%s", line, out.String())
	}
}
