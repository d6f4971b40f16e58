package pipelinetest

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bulkaction/bulkaction/internal/config"
	"github.com/bulkaction/bulkaction/internal/stack"
	"github.com/bulkaction/bulkaction/internal/testenv"
	"github.com/bulkaction/bulkaction/internal/testkit"
)

// Admin is the key of [GatewayStack.Keys] that holds the admin key.
const Admin = "*"

// GatewayStack is every target, the gateway included, on the test's own
// Redis prefix and NATS server, the gateway on a free port.
type GatewayStack struct {
	Stack  *stack.Stack
	Config *config.Config
	// URL is the gateway's base URL, http://127.0.0.1:<port>.
	URL string
	// Keys holds an API key per tenant, and the admin key under [Admin].
	Keys map[string]string
}

// StartGateway starts a [GatewayStack] with a key for each of tenants and
// an admin key (in a keys file, as production reads them), short backoffs
// and leases so that retries happen within a test, and a 200 ms SSE
// heartbeat; mutate, if not nil, adjusts the settings first. The stack
// stops when the test ends.
func StartGateway(t testing.TB, tenants []string, mutate func(*config.Config)) *GatewayStack {
	t.Helper()
	return StartGatewayTargets(t, tenants, stack.AllTargets, mutate)
}

// StartGatewayTargets is StartGateway running only targets (the gateway
// among them): a test may start the others later, with the stack's
// Config, to see what the gateway does without them.
func StartGatewayTargets(t testing.TB, tenants, targets []string, mutate func(*config.Config)) *GatewayStack {
	t.Helper()
	r := testenv.Redis(t)
	natsURL, _, _ := testenv.NATS(t)
	cfg, err := config.Load()
	if err != nil {
		t.Fatal(err)
	}
	cfg.RedisURL, cfg.RedisPrefix, cfg.NatsURL = r.URL, r.Prefix, natsURL
	cfg.HTTPAddr, cfg.GatewayAddr = "", "127.0.0.1:0"
	cfg.BaseBackoffMs, cfg.MaxBackoffMs, cfg.LeaseMs = 50, 2000, 2000
	cfg.GatewaySSEHeartbeat = 200 * time.Millisecond
	cfg.LogFormat, cfg.LogLevel = "text", "warn"
	keys := map[string]string{}
	var lines strings.Builder
	for _, tn := range append(append([]string{}, tenants...), Admin) {
		b := make([]byte, 32)
		_, _ = rand.Read(b)
		k := "bak_" + hex.EncodeToString(b)
		keys[tn] = k
		sum := sha256.Sum256([]byte(k))
		lines.WriteString("sha256:" + hex.EncodeToString(sum[:]) + " " + tn + "\n")
	}
	cfg.GatewayKeysFile = filepath.Join(t.TempDir(), "keys")
	if err := os.WriteFile(cfg.GatewayKeysFile, []byte(lines.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	if mutate != nil {
		mutate(cfg)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	if testing.Verbose() {
		log = testkit.Logger(t)
	}
	st, err := stack.Start(context.Background(), stack.Options{Config: cfg, Targets: targets, Log: log})
	if err != nil {
		t.Fatalf("stack did not start: %v", err)
	}
	t.Cleanup(func() {
		if err := st.Stop(); err != nil {
			t.Errorf("stack: %v", err)
		}
	})
	return &GatewayStack{Stack: st, Config: cfg, URL: "http://" + st.Gateway.Addr().String(), Keys: keys}
}
