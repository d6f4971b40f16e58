// Package devenv provides the servers `bulkaction dev` runs on when none is
// configured: an embedded NATS JetStream server, and Redis as a
// redis-server child process or, when none is installed, an in-process
// Redis-compatible server (miniredis, for trying things out only).
package devenv

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/bulkaction/bulkaction/internal/natsutil"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/redis/go-redis/v9"
)

// Redis kinds.
const (
	RedisExternal = "external"
	RedisChild    = "redis-server"
	RedisMini     = "miniredis"
)

// Env is the set of dev servers started; Close stops them.
type Env struct {
	NatsURL   string
	RedisURL  string
	RedisKind string

	nats  *server.Server
	child *exec.Cmd
	mini  *miniredis.Miniredis
}

// Options say where the dev servers live.
type Options struct {
	// Dir holds the servers' data (NATS store, Redis dump).
	Dir string
	// NatsURL / RedisURL, when set, are used instead of starting servers.
	NatsURL, RedisURL string
	// Host is the address the servers listen on: "" means 127.0.0.1, this
	// machine only; "0.0.0.0" means every interface.
	Host string
	// NatsPort and RedisPort are tried first (0 = 4222 and 6379); a busy
	// port falls back to a free one.
	NatsPort, RedisPort int
	// ForceMiniredis skips the redis-server child.
	ForceMiniredis bool
	Log            *slog.Logger
}

// Start starts what Options do not point at.
func Start(ctx context.Context, o Options) (*Env, error) {
	if o.Log == nil {
		o.Log = slog.Default()
	}
	// redis-server changes into its --dir before opening its log file, so
	// every path it gets must be absolute.
	dir, err := filepath.Abs(o.Dir)
	if err != nil {
		return nil, err
	}
	o.Dir = dir
	if o.Host == "" {
		o.Host = "127.0.0.1"
	}
	if err := os.MkdirAll(o.Dir, 0o755); err != nil {
		return nil, err
	}
	e := &Env{NatsURL: o.NatsURL, RedisURL: o.RedisURL, RedisKind: RedisExternal}
	if e.NatsURL == "" {
		port := pick(o.Host, o.NatsPort, 4222)
		s, err := natsutil.StartEmbedded(natsutil.EmbeddedOptions{Dir: filepath.Join(o.Dir, "nats"), Host: o.Host, Port: port})
		if err != nil {
			return nil, fmt.Errorf("embedded nats: %w", err)
		}
		e.nats = s
		e.NatsURL = "nats://" + net.JoinHostPort(DialHost(o.Host), strconv.Itoa(s.Addr().(*net.TCPAddr).Port))
		o.Log.Info("embedded NATS JetStream started", "url", e.NatsURL, "store", filepath.Join(o.Dir, "nats"))
	}
	if e.RedisURL == "" {
		port := pick(o.Host, o.RedisPort, 6379)
		if path, err := exec.LookPath("redis-server"); err == nil && !o.ForceMiniredis {
			if err := e.startChild(ctx, path, filepath.Join(o.Dir, "redis"), o.Host, port); err != nil {
				e.Close()
				return nil, err
			}
			o.Log.Info("redis-server started", "url", e.RedisURL, "dir", filepath.Join(o.Dir, "redis"))
		} else {
			m := miniredis.NewMiniRedis()
			if err := m.StartAddr(net.JoinHostPort(o.Host, strconv.Itoa(port))); err != nil {
				e.Close()
				return nil, fmt.Errorf("miniredis: %w", err)
			}
			e.mini, e.RedisKind = m, RedisMini
			e.RedisURL = "redis://" + net.JoinHostPort(DialHost(o.Host), strconv.Itoa(m.Server().Addr().Port)) + "/0"
			o.Log.Warn("using the in-process miniredis, for trying things out only "+
				"(no persistence, slower scripts; install redis-server 7+ or set BULKACTION_REDIS_URL for real use)", "url", e.RedisURL)
		}
	}
	return e, nil
}

// DialHost is the host to connect to a server listening on host: the
// loopback address for every interface ("", "0.0.0.0", "::").
func DialHost(host string) string {
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		return "127.0.0.1"
	}
	return host
}

// pick returns the wanted port (or def) if it is free on host, else a free
// port.
func pick(host string, want, def int) int {
	if want == 0 {
		want = def
	}
	l, err := net.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(want)))
	if err == nil {
		l.Close()
		return want
	}
	l, err = net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return want
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func (e *Env) startChild(ctx context.Context, path, dir, host string, port int) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	// AOF on, as the start-up checks ask of every Redis (conns.CheckRedis):
	// dev warns about nothing it set up itself. everysec is enough for a
	// machine's own trials; a snapshot is still written on shutdown.
	cmd := exec.Command(path, "--port", strconv.Itoa(port), "--bind", host, "--dir", dir,
		"--save", "60 1", "--appendonly", "yes", "--appendfsync", "everysec", "--logfile", filepath.Join(dir, "redis.log"))
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start redis-server: %w", err)
	}
	e.child, e.RedisKind = cmd, RedisChild
	addr := net.JoinHostPort(DialHost(host), strconv.Itoa(port))
	e.RedisURL = "redis://" + addr + "/0"
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	defer c.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		pctx, cancel := context.WithTimeout(ctx, time.Second)
		err := c.Ping(pctx).Err()
		cancel()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) || errors.Is(ctx.Err(), context.Canceled) {
			return fmt.Errorf("redis-server did not answer on port %d: %w (see %s)", port, err, filepath.Join(dir, "redis.log"))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Close stops the servers it started: redis-server saves its data on the
// way down, NATS flushes its store.
func (e *Env) Close() {
	if e.child != nil {
		_ = e.child.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = e.child.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = e.child.Process.Kill()
			<-done
		}
		e.child = nil
	}
	if e.mini != nil {
		e.mini.Close()
		e.mini = nil
	}
	if e.nats != nil {
		e.nats.Shutdown()
		e.nats.WaitForShutdown()
		e.nats = nil
	}
}
