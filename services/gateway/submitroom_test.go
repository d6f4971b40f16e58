package gateway_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/bulkaction/bulkaction/internal/config"
	"github.com/bulkaction/bulkaction/internal/natsutil"
	"github.com/bulkaction/bulkaction/internal/pipelinetest"
	"github.com/bulkaction/bulkaction/internal/stack"
	"github.com/bulkaction/bulkaction/internal/testkit"
)

// A jobs request larger than its tenant's room on SUBMIT is refused whole,
// naming the limit, and nothing of it reaches SUBMIT; requests within the
// room go through, the tenant's and the others'.
func TestSubmitRoomRefusesRequestLargerThanTenantShare(t *testing.T) {
	t.Parallel()
	const room = 256 << 10
	s := newServer(t, func(c *config.Config) {
		c.MaxMsgSize, c.MaxPayloadBytes, c.GatewayTenantSubmitBytes = 64<<10, 16<<10, room
	})
	ctx := context.Background()
	js, names := s.st.Conns.JS, s.st.Conns.Names
	before, err := natsutil.LastSeq(ctx, js, names.StreamSubmit())
	if err != nil {
		t.Fatal(err)
	}
	pad := `{"pad":"` + strings.Repeat("x", 1000) + `"}`
	r := s.do("POST", "/v1/groups/huge/jobs", "acme", strings.NewReader(ndjson("h", 400, pad)), "Content-Type: application/x-ndjson")
	if r.code != http.StatusRequestEntityTooLarge {
		t.Fatalf("a request of 400 KB with a room of 256 KiB: %d %s", r.code, r.body)
	}
	p := r.problem(t)
	if len(p.Errors) != 1 || p.Errors[0].Field != "gateway.submitBytes" || !strings.Contains(p.Errors[0].Limit, "262144") {
		t.Errorf("problem %+v, want one naming gateway.submitBytes and its limit", p)
	}
	if after, err := natsutil.LastSeq(ctx, js, names.StreamSubmit()); err != nil || after != before {
		t.Fatalf("SUBMIT's last sequence %d → %d (%v): the refused request was published", before, after, err)
	}
	s.submit("acme", "fits", "?total=100", ndjson("f", 100, pad))
	s.submit("hooli", "other", "?total=100", ndjson("o", 100, pad))
	s.waitState("acme", "fits", "COMPLETED")
	// Its room is free again once the fetchers applied them: at once, or
	// once a request reads their ack floor again (one read is reused for
	// 250 ms), refused for the room until then.
	testkit.WaitFor(t, "acme's room free again", 30*time.Second, func() bool {
		r := s.do("POST", "/v1/groups/again/jobs?total=200", "acme", strings.NewReader(ndjson("a", 200, pad)), "Content-Type: application/x-ndjson")
		if r.code == http.StatusTooManyRequests && strings.Contains(string(r.body), "gateway.submitBytes") {
			return false
		}
		if r.code != http.StatusAccepted {
			t.Fatalf("submit again: %d %s", r.code, r.body)
		}
		return true
	})
}

// A tenant whose submissions fill its room on SUBMIT while the fetchers do
// not apply them (none runs here) gets 429 naming the limit, with
// Retry-After, and nothing of the refused request is published; another
// tenant still submits; once a fetcher applies the backlog the tenant's
// room is free again.
func TestSubmitRoomFullRefusesUntilApplied(t *testing.T) {
	t.Parallel()
	const room = 256 << 10
	g := pipelinetest.StartGatewayTargets(t, tenants, []string{stack.TargetGateway}, func(c *config.Config) {
		c.MaxMsgSize, c.MaxPayloadBytes, c.GatewayTenantSubmitBytes = 64<<10, 16<<10, room
	})
	s := &server{t: t, st: g.Stack, base: g.URL, keys: g.Keys, cfg: g.Config, httpc: &http.Client{Timeout: 2 * time.Minute}}
	ctx := context.Background()
	js, names := s.st.Conns.JS, s.st.Conns.Names
	pad := `{"pad":"` + strings.Repeat("x", 1000) + `"}`
	s.submit("acme", "a1", "", ndjson("a", 100, pad)) // about 100 KB each
	s.submit("acme", "a2", "", ndjson("b", 100, pad))
	before, err := natsutil.LastSeq(ctx, js, names.StreamSubmit())
	if err != nil {
		t.Fatal(err)
	}
	r := s.do("POST", "/v1/groups/a3/jobs", "acme", strings.NewReader(ndjson("c", 100, pad)), "Content-Type: application/x-ndjson")
	if r.code != http.StatusTooManyRequests {
		t.Fatalf("a third request of 100 KB with 200 KB not applied in a room of 256 KiB: %d %s", r.code, r.body)
	}
	p := r.problem(t)
	if len(p.Errors) != 1 || p.Errors[0].Field != "gateway.submitBytes" || r.header.Get("Retry-After") == "" {
		t.Errorf("problem %+v, Retry-After %q: want one naming gateway.submitBytes", p, r.header.Get("Retry-After"))
	}
	if after, err := natsutil.LastSeq(ctx, js, names.StreamSubmit()); err != nil || after != before {
		t.Fatalf("SUBMIT's last sequence %d → %d (%v): the refused request was published", before, after, err)
	}
	s.submit("hooli", "h1", "", ndjson("h", 100, pad))

	f, err := stack.Start(ctx, stack.Options{Config: g.Config, Targets: []string{stack.TargetFetcher},
		Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = f.Stop() })
	testkit.WaitFor(t, "acme's room once a fetcher applied its backlog", 30*time.Second, func() bool {
		r := s.do("POST", "/v1/groups/a3/jobs", "acme", strings.NewReader(ndjson("c", 100, pad)), "Content-Type: application/x-ndjson")
		return r.code == http.StatusAccepted
	})
}
