package conns_test

import (
	"bytes"
	"context"
	"fmt"
	"log"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/redis/go-redis/v9"

	"github.com/bulkaction/bulkaction/internal/config"
	"github.com/bulkaction/bulkaction/internal/conns"
	"github.com/bulkaction/bulkaction/internal/testenv"
	"github.com/bulkaction/bulkaction/internal/testkit"
)

// logCapture collects what slog, the log package and go-redis print.
type logCapture struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (c *logCapture) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.buf.Write(p)
}

func (c *logCapture) Printf(_ context.Context, format string, v ...any) {
	_, _ = fmt.Fprintf(c, format+"\n", v...)
}

func (c *logCapture) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.buf.String()
}

// captureLogs sends the process's logs to a buffer until the test ends.
// Tests that use it must not be parallel.
func captureLogs(t *testing.T) *logCapture {
	c := &logCapture{}
	oldSlog := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(c, &slog.HandlerOptions{Level: slog.LevelDebug})))
	log.SetOutput(c)
	redis.SetLogger(c)
	t.Cleanup(func() {
		slog.SetDefault(oldSlog)
		log.SetOutput(os.Stderr)
		redis.SetLogger(stderrRedisLogger{log.New(os.Stderr, "redis: ", log.LstdFlags|log.Lshortfile)})
	})
	return c
}

type stderrRedisLogger struct{ l *log.Logger }

func (l stderrRedisLogger) Printf(_ context.Context, format string, v ...any) {
	_ = l.l.Output(2, fmt.Sprintf(format, v...))
}

// TestConnectErrorsAndLogsHideSecrets connects with URLs and settings that
// hold a unique password or token — to a closed port, with an unparsable
// URL, and to servers that reject the credentials — and checks that neither
// the error nor anything logged holds the secret, while the error still
// names the server (its redacted URL).
func TestConnectErrorsAndLogsHideSecrets(t *testing.T) {
	logs := captureLogs(t)
	closed := strconv.Itoa(testkit.FreePort(t))
	pw, token := secret(t, "urlpw"), secret(t, "urltoken")
	p := newPKI(t)
	redisPW := secret(t, "realpw")
	raddr := startTLSRedis(t, p, "--requirepass", redisPW)
	nurl := startTLSNats(t, p, func(o *server.Options) {
		o.Users = []*server.User{{Username: "bulk", Password: secret(t, "realpw")}}
	})
	tlsRedis := func(c *config.Config) {
		c.RedisTLSCAFile, c.RedisTLSCertFile, c.RedisTLSKeyFile = p.CAFile, p.ClientCert, p.ClientKey
	}
	tlsNats := func(c *config.Config) {
		c.NatsTLSCAFile, c.NatsTLSCertFile, c.NatsTLSKeyFile = p.CAFile, p.ClientCert, p.ClientKey
	}
	openNats := "nats://127.0.0.1:" + closed // never reached when Redis fails first
	for _, c := range []struct {
		name string
		set  func(*config.Config)
		// want is what the error must hold: the server, redacted.
		want string
	}{
		{"redis closed port", func(c *config.Config) {
			c.RedisURL = "redis://alice:" + pw + "@127.0.0.1:" + closed + "/0"
		}, "redis://alice:xxxxx@127.0.0.1:" + closed},
		{"redis unparsable URL", func(c *config.Config) {
			c.RedisURL = "redis://alice:" + pw + "@127.0.0.1:port/0"
		}, "BULKACTION_REDIS_URL=redis://alice:xxxxx@"},
		{"redis password setting, closed port", func(c *config.Config) {
			c.RedisURL, c.RedisPassword = "redis://127.0.0.1:"+closed+"/0", pw
		}, "redis://127.0.0.1:" + closed},
		{"redis rejects the password", func(c *config.Config) {
			c.RedisURL = "rediss://:" + pw + "@" + raddr + "/0"
			tlsRedis(c)
		}, "rediss://:xxxxx@" + raddr},
		{"nats closed port", func(c *config.Config) {
			c.NatsURL = "nats://alice:" + pw + "@127.0.0.1:" + closed
		}, "nats://alice:xxxxx@127.0.0.1:" + closed},
		{"nats token in the URL, closed port", func(c *config.Config) {
			c.NatsURL = "nats://" + token + "@127.0.0.1:" + closed
		}, "nats://xxxxx@127.0.0.1:" + closed},
		{"nats unparsable URL", func(c *config.Config) {
			c.NatsURL = "nats://alice:" + pw + "@127.0.0.1:port"
		}, "nats://alice:xxxxx@127.0.0.1:port"},
		{"nats rejects the password", func(c *config.Config) {
			c.NatsURL, c.NatsUser, c.NatsPassword = nurl, "bulk", pw
			tlsNats(c)
		}, nurl},
		{"nats rejects the token", func(c *config.Config) {
			c.NatsURL, c.NatsToken = nurl, token
			tlsNats(c)
		}, nurl},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg, err := config.Load()
			if err != nil {
				t.Fatal(err)
			}
			cfg.StreamStorage = "memory"
			cfg.NatsURL = openNats
			if strings.HasPrefix(c.name, "nats") {
				// Redis must work for Connect to reach NATS.
				cfg.RedisURL, cfg.RedisPassword = "rediss://"+raddr+"/0", redisPW
				tlsRedis(cfg)
			}
			c.set(cfg)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			conn, err := conns.Connect(ctx, cfg, "test", nil)
			if err == nil {
				conn.Close()
				t.Fatal("Connect succeeded")
			}
			mustNotLeak(t, "Connect error", err.Error(), pw, token)
			if !strings.Contains(err.Error(), c.want) {
				t.Errorf("error does not name the server as %q: %v", c.want, err)
			}
		})
	}
	mustNotLeak(t, "logs", logs.String(), pw, token)
}

// TestCheckRedisWarnsWithoutAOF: a server without AOF, or with an evicting
// maxmemory-policy, is named at start; one with AOF and noeviction is not.
func TestCheckRedisWarnsWithoutAOF(t *testing.T) {
	srv := testenv.NewRedisServer(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	ctx := context.Background()
	ws := conns.CheckRedis(ctx, rdb)
	if len(ws) != 1 || !strings.Contains(ws[0], "without AOF") {
		t.Fatalf("no persistence: warnings %q, want one about AOF", ws)
	}
	for _, kv := range [][2]string{{"appendonly", "yes"}, {"maxmemory-policy", "allkeys-lru"}} {
		if err := rdb.ConfigSet(ctx, kv[0], kv[1]).Err(); err != nil {
			t.Fatal(err)
		}
	}
	ws = conns.CheckRedis(ctx, rdb)
	if len(ws) != 1 || !strings.Contains(ws[0], "allkeys-lru") {
		t.Fatalf("AOF and allkeys-lru: warnings %q, want one naming the policy", ws)
	}
	if err := rdb.ConfigSet(ctx, "maxmemory-policy", "noeviction").Err(); err != nil {
		t.Fatal(err)
	}
	if ws = conns.CheckRedis(ctx, rdb); len(ws) != 0 {
		t.Fatalf("AOF and noeviction: warnings %q, want none", ws)
	}
}
