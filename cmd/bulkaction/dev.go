package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/kelseyhightower/envconfig"
	"github.com/spf13/cobra"

	"github.com/bulkaction/bulkaction/internal/config"
	"github.com/bulkaction/bulkaction/internal/demo"
	"github.com/bulkaction/bulkaction/internal/devenv"
	"github.com/bulkaction/bulkaction/internal/stack"
	"github.com/bulkaction/bulkaction/internal/telemetry"
	"github.com/bulkaction/bulkaction/pkg/client"
	"github.com/bulkaction/bulkaction/pkg/contracts"
	"github.com/bulkaction/bulkaction/pkg/processor"
	"github.com/bulkaction/bulkaction/pkg/processor/builtin"
	"github.com/bulkaction/bulkaction/services/gateway"
)

// devSettings are the BULKACTION_DEV_* variables of `bulkaction dev`.
type devSettings struct {
	// Dir holds the dev servers' data.
	Dir string `envconfig:"DEV_DIR" default:".bulkaction/dev"`
	// NatsPort and RedisPort are tried first; a busy port falls back to a
	// free one.
	NatsPort  int `envconfig:"DEV_NATS_PORT" default:"4222"`
	RedisPort int `envconfig:"DEV_REDIS_PORT" default:"6379"`
}

// Values of dev's --redis flag.
const (
	redisAuto  = "auto"
	redisChild = "redis-server"
	redisMini  = "miniredis"
)

// devOptions are dev's flags.
type devOptions struct {
	fresh, demo bool
	scale       string
	redis       string
}

func newDevCmd() *cobra.Command {
	var o devOptions
	cmd := &cobra.Command{
		Use:   "dev [--demo [--scale full|small]] [--fresh]",
		Short: "Run every target in one process on embedded servers (with --demo: a live demo workload)",
		Long: `Dev runs every target (fetcher, dispatcher, worker with the built-in
processors, aggregator) in one process, on servers it provides itself:

  NATS   an embedded NATS server with JetStream, storing under the data
         directory, unless BULKACTION_NATS_URL is set.
  Redis  BULKACTION_REDIS_URL if set; else a redis-server child process if
         one is on PATH (data under the data directory, stopped on exit);
         else an in-process Redis-compatible server (miniredis), which is
         for trying things out only. --redis picks one explicitly.

The data directory is BULKACTION_DEV_DIR (default ./.bulkaction/dev). Plain
"dev" resumes where the last run stopped: the JetStream store and the
redis-server snapshot (written on exit) are kept. --fresh wipes them first.
With miniredis nothing of Redis survives, so every run starts fresh.
"dev --demo" always starts fresh.

NATS and Redis listen on BULKACTION_DEV_NATS_PORT (default 4222) and
BULKACTION_DEV_REDIS_PORT (default 6379), or on free ports when those are
busy; metrics and health are on BULKACTION_HTTP_ADDR (default :8080, or a
free port). Dev prints the settings the other verbs (submit, status, watch,
cancel, stats) need from another terminal. Logs are text unless
BULKACTION_LOG_FORMAT is set. Ctrl-C stops everything cleanly. Here the
built-in http processor may call any host unless
BULKACTION_HTTP_ALLOWED_HOSTS is set; elsewhere it calls only the hosts
that setting lists.

--demo submits tenants of very different sizes and priorities (one of
20,000 "sleep" jobs, three of hundreds, an urgent high-priority one a few
seconds in) at a low global rate (400 jobs/s; 300 with --scale small), shows
their progress live and ends with a summary per group. It sets
BULKACTION_GLOBAL_RPS and BULKACTION_WORKER_COUNT itself unless they are set.
--scale small has a tenth of the jobs and takes about ten seconds. The demo
exits 0 only if every group COMPLETED.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runDev(cmd, o)
		},
	}
	f := cmd.Flags()
	f.BoolVar(&o.fresh, "fresh", false, "wipe the data directory's NATS and Redis data first")
	f.BoolVar(&o.demo, "demo", false, "submit the demo workload, show it live and print a summary (always fresh)")
	f.StringVar(&o.scale, "scale", demo.ScaleFull, "demo size: full (about a minute) or small (about ten seconds)")
	f.StringVar(&o.redis, "redis", redisAuto, "Redis to start when BULKACTION_REDIS_URL is not set: auto, redis-server or miniredis")
	return cmd
}

func runDev(cmd *cobra.Command, o devOptions) error {
	if cmd.Flags().Changed("scale") && !o.demo {
		return errors.New("--scale applies only with --demo")
	}
	switch o.redis {
	case redisAuto, redisChild, redisMini:
	default:
		return fmt.Errorf("--redis %q: must be %s, %s or %s", o.redis, redisAuto, redisChild, redisMini)
	}
	cfg, err := config.Load()
	if err != nil {
		return err
	}
	var ds devSettings
	if err := envconfig.Process(config.Prefix, &ds); err != nil {
		return fmt.Errorf("config: %w", err)
	}
	if !envSet("LOG_FORMAT") {
		cfg.LogFormat = "text"
	}
	var w demo.Workload
	if o.demo {
		if w, err = demo.ForScale(o.scale); err != nil {
			return err
		}
		if !envSet("GLOBAL_RPS") {
			cfg.GlobalRps = w.GlobalRps
		}
		if !envSet("WORKER_COUNT") {
			cfg.WorkerCount = w.WorkerCount
		}
		if !envSet("TYPE_RATE_LIMITS") {
			cfg.TypeRateLimits = w.TypeRateLimits
		}
		if err := cfg.Validate(); err != nil {
			return err
		}
	}
	out := cmd.OutOrStdout()
	live := o.demo && isTerminal(out)

	externalRedis, externalNats := envSet("REDIS_URL"), envSet("NATS_URL")
	useMini := false
	if !externalRedis {
		switch o.redis {
		case redisMini:
			useMini = true
		case redisChild:
			if _, err := exec.LookPath("redis-server"); err != nil {
				return errors.New("--redis redis-server: no redis-server on PATH (install Redis 7+, or use --redis miniredis)")
			}
		default:
			_, err := exec.LookPath("redis-server")
			useMini = err != nil
		}
	}
	fresh := o.fresh || o.demo || useMini
	if fresh {
		if err := wipeDevData(ds.Dir); err != nil {
			return err
		}
	}
	if err := os.MkdirAll(ds.Dir, 0o755); err != nil {
		return err
	}

	// Logs: stderr, or a file while bars redraw the terminal.
	var logOut io.Writer = cmd.ErrOrStderr()
	logFile := ""
	if live {
		logFile = filepath.Join(ds.Dir, "dev.log")
		f, err := os.Create(logFile)
		if err != nil {
			return err
		}
		defer f.Close()
		logOut = f
	}
	log, err := telemetry.NewLogger(logOut, cfg.LogFormat, cfg.LogLevel)
	if err != nil {
		return err
	}
	slog.SetDefault(log)
	if o.fresh && !o.demo {
		log.Info("data directory wiped (--fresh)", "dir", ds.Dir)
	} else if useMini && !o.demo {
		log.Info("starting fresh: miniredis keeps nothing between runs", "dir", ds.Dir)
	}

	if moved, addr := freeHTTPAddr(cfg.HTTPAddr); moved {
		log.Info("HTTP address busy; using a free port", "wanted", cfg.HTTPAddr, "addr", addr)
		cfg.HTTPAddr = addr
	}
	if moved, addr := freeHTTPAddr(cfg.GatewayAddr); moved {
		log.Info("gateway address busy; using a free port", "wanted", cfg.GatewayAddr, "addr", addr)
		cfg.GatewayAddr = addr
	}
	apiKey := ""
	if cfg.GatewayKeysFile == "" {
		if apiKey, cfg.GatewayKeysFile, err = devAPIKey(ds.Dir); err != nil {
			return err
		}
	}

	ctx := cmd.Context()
	eo := devenv.Options{Dir: ds.Dir, NatsPort: ds.NatsPort, RedisPort: ds.RedisPort, ForceMiniredis: useMini, Log: log}
	if externalNats {
		eo.NatsURL = cfg.NatsURL
	}
	if externalRedis {
		eo.RedisURL = cfg.RedisURL
	}
	env, err := devenv.Start(ctx, eo)
	if err != nil {
		return err
	}
	defer env.Close()
	cfg.NatsURL, cfg.RedisURL = env.NatsURL, env.RedisURL

	shutdownTracing, err := telemetry.SetupTracing(ctx, "bulkaction-dev")
	if err != nil {
		return err
	}
	defer func() { _ = shutdownTracing(context.WithoutCancel(ctx)) }()

	if cfg.WorkerIsolation != "none" {
		// An executor is this program started again: here, a second dev
		// environment.
		log.Warn("BULKACTION_WORKER_ISOLATION is not supported by dev: processors run in this process", "isolation", cfg.WorkerIsolation)
		cfg.WorkerIsolation = "none"
	}
	so := stack.Options{Config: cfg, Targets: stack.AllTargets, Log: log}
	if !envSet("HTTP_ALLOWED_HOSTS") {
		// For trying things out, the http processor may call any host.
		so.HTTPAnyHost = true
		log.Info("the http processor may call any host (dev only); set BULKACTION_HTTP_ALLOWED_HOSTS to restrict it")
	}
	if o.demo {
		// The demo's second job type runs like sleep, behind its own rate limit.
		mux := processor.NewMux()
		bo := builtin.Options{DefaultURL: cfg.HTTPProcessorURL, AllowedHosts: cfg.HTTPAllowedHosts, AllowAnyHost: so.HTTPAnyHost}
		builtin.Register(mux, bo)
		mux.Handle(w.SMSType, builtin.Sleep(bo))
		so.Mux = mux
	}
	st, err := stack.Start(ctx, so)
	if err != nil {
		return err
	}
	httpAddr := ""
	if st.Server != nil {
		httpAddr = reachable(st.Server.Addr())
	}
	apiAddr := ""
	if st.Gateway != nil {
		apiAddr = reachable(st.Gateway.Addr().String())
	}
	fmt.Fprint(out, devBanner(cfg, env, httpAddr, logFile, o.demo, apiAddr, apiKey))

	if !o.demo {
		select {
		case <-ctx.Done():
		case <-st.Failed():
		}
		err := st.Stop()
		fmt.Fprintln(out, "bulkaction dev stopped")
		return err
	}

	suffix := ""
	if externalRedis || externalNats {
		// Servers this run did not start keep the ids of earlier runs.
		suffix = "-" + strconv.FormatInt(time.Now().Unix()%(36*36*36*36), 36)
	}
	return runDemo(ctx, st, w, demo.Options{Out: out, Terminal: live, Suffix: suffix, Log: log})
}

// runDemo runs the demo workload w on the running stack st, stops the
// stack and prints the summary. o's Client and Queue are filled in here.
func runDemo(ctx context.Context, st *stack.Stack, w demo.Workload, o demo.Options) error {
	cfg := st.Config()
	fmt.Fprintf(o.Out, "demo (%s): %d groups, %d %s jobs, global limit %d jobs/s, %d worker slots\n\n",
		w.Scale, len(w.Groups), w.TotalJobs(), w.JobType, cfg.GlobalRps, cfg.WorkerCount)
	demoCtx, stopDemo := context.WithCancel(ctx)
	defer stopDemo()
	go func() {
		select {
		case <-st.Failed():
			stopDemo() // a failed stack ends the demo
		case <-demoCtx.Done():
		}
	}()
	o.Client = client.New(st.Conns.JS, client.Options{Names: st.Conns.Names, Limits: contracts.Limits{MaxPayloadBytes: cfg.MaxPayloadBytes}})
	o.Queue = st.Conns.Queue
	sum, runErr := demo.Run(demoCtx, w, o)
	printed := false
	if o.Terminal && runErr == nil && sum != nil && st.Gateway != nil {
		// In a terminal the system stays up after the demo, so that the
		// dashboard and the API can still be looked at.
		if err := sum.Write(o.Out); err != nil {
			return err
		}
		printed = true
		fmt.Fprintf(o.Out, "\nThe demo is over; everything keeps running (dashboard http://%s/ui/). Ctrl-C stops.\n",
			reachable(st.Gateway.Addr().String()))
		select {
		case <-ctx.Done():
		case <-st.Failed():
		}
	}
	stackErr := st.Stop()
	if sum != nil && !printed {
		if err := sum.Write(o.Out); err != nil {
			return err
		}
	}
	switch {
	case stackErr != nil:
		return fmt.Errorf("dev: %w", stackErr)
	case runErr != nil && ctx.Err() != nil && !printed:
		return exitInterrupted
	case runErr != nil:
		return runErr
	case !sum.AllCompleted():
		return errors.New("demo: not every group completed")
	}
	return nil
}

// devBanner tells where everything runs and what the other verbs need.
func devBanner(cfg *config.Config, env *devenv.Env, httpAddr, logFile string, isDemo bool, apiAddr, apiKey string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "bulkaction dev: fetcher, dispatcher, worker, aggregator and gateway are running (Ctrl-C stops)\n")
	if apiAddr != "" {
		fmt.Fprintf(&b, "  API    http://%s/v1/groups\n", apiAddr)
		fmt.Fprintf(&b, "  UI     http://%s/ui/ (dashboard)\n", apiAddr)
		if apiKey != "" {
			fmt.Fprintf(&b, "  key    %s (admin, dev only: kept in the data directory)\n", apiKey)
		}
	}
	fmt.Fprintf(&b, "  NATS   %s\n", config.RedactURL(env.NatsURL))
	note := ""
	if env.RedisKind == devenv.RedisMini {
		note = " (in-process miniredis: for trying things out only)"
	}
	fmt.Fprintf(&b, "  Redis  %s [%s]%s\n", config.RedactURL(env.RedisURL), env.RedisKind, note)
	if httpAddr != "" {
		fmt.Fprintf(&b, "  HTTP   http://%s/metrics, /healthz, /readyz\n", httpAddr)
	}
	if logFile != "" {
		fmt.Fprintf(&b, "  logs   %s\n", logFile)
	}
	// The verbs read the same settings: name every one that differs from
	// its default (the demo sets the rate itself).
	vars := []struct{ name, field, value string }{
		{"NATS_URL", "NatsURL", env.NatsURL}, {"REDIS_URL", "RedisURL", env.RedisURL},
		{"REDIS_PREFIX", "RedisPrefix", cfg.RedisPrefix}, {"SUBJECT_PREFIX", "SubjectPrefix", cfg.SubjectPrefix},
		{"GLOBAL_RPS", "GlobalRps", strconv.Itoa(cfg.GlobalRps)},
		{"RATE_LIMIT_WINDOW_MS", "RateLimitWindowMs", strconv.Itoa(cfg.RateLimitWindowMs)},
	}
	differs := false
	for _, v := range vars {
		differs = differs || v.value != defaultOf(v.field)
	}
	if differs {
		b.WriteString("For the other verbs in another terminal:\n  export")
		for i, v := range vars {
			if config.RedactURL(v.value) != v.value {
				continue // it carries credentials: the user's environment has it already
			}
			if i < 2 || v.value != defaultOf(v.field) {
				fmt.Fprintf(&b, " %s_%s=%s", config.Prefix, v.name, v.value)
			}
		}
		b.WriteString("\n")
	}
	if !isDemo {
		fmt.Fprintf(&b, "Try: echo '{\"ms\":50}' | bulkaction submit --group hello --type sleep --file - && bulkaction watch hello\n")
	}
	return b.String()
}

// reachable turns a listen address into one to browse: an unspecified
// host becomes localhost.
func reachable(addr string) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return addr
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		host = "localhost"
	}
	return net.JoinHostPort(host, port)
}

// defaultOf is the default of a config.Config field.
func defaultOf(field string) string {
	f, _ := reflect.TypeOf(config.Config{}).FieldByName(field)
	return f.Tag.Get("default")
}

// wipeDevData removes the dev servers' data (and the log) from dir, and
// nothing else, so a mistaken BULKACTION_DEV_DIR loses no other files.
func wipeDevData(dir string) error {
	for _, name := range []string{"nats", "redis", "dev.log"} {
		if err := os.RemoveAll(filepath.Join(dir, name)); err != nil {
			return fmt.Errorf("wipe %s: %w", dir, err)
		}
	}
	return nil
}

// freeHTTPAddr returns a free address on the same host when addr is busy.
func freeHTTPAddr(addr string) (moved bool, free string) {
	if addr == "" {
		return false, addr
	}
	l, err := net.Listen("tcp", addr)
	if err == nil {
		_ = l.Close()
		return false, addr
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false, addr
	}
	l, err = net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return false, addr
	}
	defer l.Close()
	return true, l.Addr().String()
}

// devAPIKey returns the dev admin API key kept in dir (made on first use)
// and the keys file listing it.
func devAPIKey(dir string) (key, keysFile string, err error) {
	keyFile := filepath.Join(dir, "dev-api-key")
	keysFile = filepath.Join(dir, "gateway-keys")
	if b, err := os.ReadFile(keyFile); err == nil && strings.HasPrefix(strings.TrimSpace(string(b)), gateway.KeyPrefix) {
		key = strings.TrimSpace(string(b))
	} else {
		if key, err = gateway.NewKey(); err != nil {
			return "", "", err
		}
		if err := os.WriteFile(keyFile, []byte(key+"\n"), 0o600); err != nil {
			return "", "", err
		}
	}
	line := "# bulkaction dev: the admin key of " + keyFile + "\n" + gateway.KeyLine(key, gateway.AdminTenant, "dev") + "\n"
	if err := os.WriteFile(keysFile, []byte(line), 0o600); err != nil {
		return "", "", err
	}
	return key, keysFile, nil
}
