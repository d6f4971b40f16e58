package main

import (
	"context"
	"strings"
	"testing"

	"github.com/bulkaction/bulkaction/pkg/contracts"
	"github.com/bulkaction/bulkaction/pkg/redisq"
)

// `callback secret` says whether a tenant has a secret and never shows it;
// --rotate prints a new one once, and the previous one keeps signing.
// `callback retry` refuses a group without a callback and one not ended;
// `submit --callback-url` refuses a malformed URL, naming the flag.
func TestCallbackVerbs(t *testing.T) {
	s := startSystem(t, false)
	ctx := context.Background()
	out, _, err := run(ctx, "", "callback", "secret", "--tenant", "acme")
	if err != nil || !strings.Contains(out, "tenant acme has no callback secret") {
		t.Fatalf("before any secret: %q, %v", out, err)
	}
	first, _, err := run(ctx, "", "callback", "secret", "--tenant", "acme", "--rotate")
	first = strings.TrimSpace(first)
	if err != nil || !strings.HasPrefix(first, "whsec_") {
		t.Fatalf("--rotate: %q, %v", first, err)
	}
	second, _, err := run(ctx, "", "callback", "secret", "--tenant", "acme", "--rotate")
	second = strings.TrimSpace(second)
	if err != nil || second == first {
		t.Fatalf("second --rotate: %q, %v", second, err)
	}
	out, _, err = run(ctx, "", "callback", "secret", "--tenant", "acme")
	if err != nil || !strings.Contains(out, "has a callback secret since") || !strings.Contains(out, "previous one also signs until") ||
		strings.Contains(out, first) || strings.Contains(out, second) {
		t.Errorf("after two rotations: %q, %v", out, err)
	}
	sec, err := s.queue.CallbackSecretsOf(ctx, "acme")
	if err != nil || sec.Current != second || sec.Previous != first {
		t.Errorf("secrets in Redis: current is the last printed %v, previous the first %v (%v)", sec.Current == second, sec.Previous == first, err)
	}

	if _, _, err := run(ctx, "", "callback", "retry", "--tenant", "acme", "nope"); err == nil || !strings.Contains(err.Error(), "no callback delivery") {
		t.Errorf("retry of an unknown group: %v", err)
	}
	g := contracts.Group("acme", "open")
	if _, err := s.queue.Enqueue(ctx, redisq.Job{Group: g, ID: "1", Type: "t", CallbackURL: "https://hooks.example.com/x"}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := run(ctx, "", "callback", "retry", "--tenant", "acme", "open"); err == nil || !strings.Contains(err.Error(), "has not ended") {
		t.Errorf("retry of a running group: %v", err)
	}
	out, _, err = run(ctx, "", "status", "--tenant", "acme", "open")
	if err != nil || !strings.Contains(out, "https://hooks.example.com/x, when the group ends") {
		t.Errorf("status of a group with a callback: %q, %v", out, err)
	}
	_, _, err = run(ctx, "", "submit", "--tenant", "acme", "--group", "bad", "--type", "noop", "--file", "-", "--callback-url", "ftp://x/y")
	if err == nil || !strings.Contains(err.Error(), "--callback-url") || !strings.Contains(err.Error(), "callbackUrl") {
		t.Errorf("submit with a bad --callback-url: %v", err)
	}
}

// TestCallbackVerbsOverAPI: with --api, `callback secret` reads and
// rotates the tenant's secret through the gateway with the tenant's key
// (printed once, as without --api), and `callback retry` answers the
// gateway's refusals.
func TestCallbackVerbsOverAPI(t *testing.T) {
	api, _ := startGateway(t)
	ctx := context.Background()
	out, _, err := run(ctx, "", "callback", "secret", "--api", api)
	if err != nil || !strings.Contains(out, "tenant acme has no callback secret") {
		t.Fatalf("before any secret: %q, %v", out, err)
	}
	secret, errOut, err := run(ctx, "", "callback", "secret", "--api", api, "--rotate")
	if secret = strings.TrimSpace(secret); err != nil || !strings.HasPrefix(secret, "whsec_") || !strings.Contains(errOut, "new callback secret of tenant acme") {
		t.Fatalf("--rotate: %q %q, %v", secret, errOut, err)
	}
	out, _, err = run(ctx, "", "callback", "secret", "--api", api)
	if err != nil || !strings.Contains(out, "tenant acme has a callback secret since") || strings.Contains(out, secret) {
		t.Errorf("after a rotation: %q, %v", out, err)
	}
	if _, _, err := run(ctx, "", "callback", "retry", "--api", api, "nope"); err == nil || !strings.Contains(err.Error(), "no callback") {
		t.Errorf("retry of an unknown group: %v", err)
	}
}
