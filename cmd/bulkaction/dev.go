package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"maps"
	"net"
	"net/url"
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
	"github.com/bulkaction/bulkaction/pkg/processor/builtin"
	"github.com/bulkaction/bulkaction/services/gateway"
)

// devSettings are the BULKACTION_DEV_* variables of `bulkaction dev`.
type devSettings struct {
	// Dir holds the dev servers' data.
	Dir string `envconfig:"DEV_DIR" default:".bulkaction/dev"`
	// Host is the address every dev server listens on (--host).
	Host string `envconfig:"DEV_HOST" default:"127.0.0.1"`
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
	host        string
}

func newDevCmd() *cobra.Command {
	var o devOptions
	cmd := &cobra.Command{
		Use:   "dev [--demo [--scale full|small]] [--fresh]",
		Short: "Run every target in one process on embedded servers (with --demo: a live demo workload)",
		Long: `Dev runs every target (fetcher, dispatcher, worker with the built-in
processors, aggregator, gateway) in one process, on servers it provides
itself:

  NATS   an embedded NATS server with JetStream, storing under the data
         directory, unless BULKACTION_NATS_URL is set.
  Redis  BULKACTION_REDIS_URL if set; else a redis-server child process if
         one is on PATH (data under the data directory, stopped on exit);
         else an in-process Redis-compatible server (miniredis), which is
         for trying things out only. --redis picks one explicitly.

The data directory is BULKACTION_DEV_DIR (default ./.bulkaction/dev). Plain
"dev" resumes where the last run stopped: the JetStream store and the
redis-server data are kept. With miniredis nothing of Redis survives, and
"dev --demo" always starts its data anew. The gateway's keys file there
(gateway-keys: the dev admin key, and the keys "bulkaction gateway key
--append" adds) is kept too. --fresh wipes the data and the keys first (a
new admin key).

Everything listens on 127.0.0.1, this machine only, unless --host (or
BULKACTION_DEV_HOST) says otherwise (0.0.0.0: every interface), or
BULKACTION_HTTP_ADDR or BULKACTION_GATEWAY_ADDR is set. NATS, Redis,
metrics and the gateway take the ports BULKACTION_DEV_NATS_PORT (4222),
BULKACTION_DEV_REDIS_PORT (6379), BULKACTION_HTTP_ADDR (8080) and
BULKACTION_GATEWAY_ADDR (8090) name, or free ones when those are busy; a
later run takes the ports of the last one again while they are free, so
what it printed stays true. The banner ends with one export line, all that
the other verbs need in another terminal (the servers, the API's URL and
its admin key), and the dashboard's URL, which signs in with that key.
Logs are text unless BULKACTION_LOG_FORMAT is set. Ctrl-C stops everything
cleanly. Here the built-in http processor may call any host unless
BULKACTION_HTTP_ALLOWED_HOSTS is set; elsewhere it calls only the hosts
that setting lists.

--demo submits tenants of very different sizes and priorities (one of
20,000 "sleep" jobs, three of hundreds, an urgent high-priority one a few
seconds in, and hooli's 1,500 "http" jobs calling a partner API this
process serves on a port of 127.0.0.1, whose capacity changes during the
run) at a low global rate (400 jobs/s; 300 with --scale small), shows
their progress live and ends with a summary per group, and of the rate the
adaptive rate learned of the partner beside its capacity. It sets
BULKACTION_GLOBAL_RPS, BULKACTION_WORKER_COUNT, BULKACTION_TYPE_RATE_LIMITS
and BULKACTION_ADAPTIVE_RATE_ENABLED (true) itself unless they are set.
Its logs go to dev.log in the data directory (warnings and errors to stderr
as well when the output is not a terminal).
The full scale takes ` + demo.FullDuration + `; --scale small has a tenth of the jobs
and takes ` + demo.SmallDuration + `. The demo exits 0 only if every group COMPLETED.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runDev(cmd, o)
		},
	}
	f := cmd.Flags()
	f.BoolVar(&o.fresh, "fresh", false, "wipe the data directory's NATS and Redis data and its API keys first")
	f.BoolVar(&o.demo, "demo", false, "submit the demo workload, show it live and print a summary (always fresh)")
	f.StringVar(&o.scale, "scale", demo.ScaleFull, "demo size: full ("+demo.FullDuration+") or small ("+demo.SmallDuration+")")
	f.StringVar(&o.host, "host", "", "address every server of dev listens on: 127.0.0.1 is this machine only, 0.0.0.0 every interface (default $BULKACTION_DEV_HOST, else 127.0.0.1)")
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
		if !envSet("ADAPTIVE_RATE_ENABLED") {
			// hooli's partner API throttles: the adaptive rate learns its
			// capacity (its jobs are the only "http" ones).
			cfg.AdaptiveRateEnabled = true
		}
		if err := cfg.Validate(); err != nil {
			return err
		}
	}
	out := cmd.OutOrStdout()
	live := o.demo && isTerminal(out)
	host := ds.Host
	if cmd.Flags().Changed("host") {
		host = o.host
	}
	if host == "" {
		return errors.New("--host: empty (127.0.0.1 is this machine only, 0.0.0.0 every interface)")
	}

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
		// The keys go only with --fresh: the demo and miniredis start
		// their data anew, but the keys handed out stay valid.
		if err := wipeDevData(ds.Dir, o.fresh); err != nil {
			return err
		}
	}
	if err := os.MkdirAll(ds.Dir, 0o755); err != nil {
		return err
	}

	// Logs: stderr; with --demo a file, so that they do not mix with the
	// demo's view: while bars redraw the terminal everything goes there,
	// and with plain lines (piped output) warnings and errors also go to
	// stderr.
	logFile := ""
	var log *slog.Logger
	if o.demo {
		logFile = filepath.Join(ds.Dir, "dev.log")
		f, err := os.Create(logFile)
		if err != nil {
			return err
		}
		defer f.Close()
		if log, err = demoLogger(f, cmd.ErrOrStderr(), live, cfg.LogFormat, cfg.LogLevel); err != nil {
			return err
		}
	} else if log, err = telemetry.NewLogger(cmd.ErrOrStderr(), cfg.LogFormat, cfg.LogLevel); err != nil {
		return err
	}
	slog.SetDefault(log)
	if o.fresh && !o.demo {
		log.Info("data directory wiped (--fresh)", "dir", ds.Dir)
	} else if useMini && !o.demo {
		log.Info("starting fresh: miniredis keeps nothing between runs", "dir", ds.Dir)
	}

	// Every server listens on host unless its address is set; each takes
	// the port of the last run again when it is free, so that what the
	// last banner printed still holds.
	last := readDevAddrs(ds.Dir, log)
	want := map[string]string{
		"nats":  net.JoinHostPort(host, strconv.Itoa(ds.NatsPort)),
		"redis": net.JoinHostPort(host, strconv.Itoa(ds.RedisPort)),
	}
	if cfg.HTTPAddr != "" {
		want["http"] = onHost(host, cfg.HTTPAddr, envSet("HTTP_ADDR"))
		cfg.HTTPAddr = last.pick("http", want["http"], log)
	}
	if cfg.GatewayAddr != "" {
		want["gateway"] = onHost(host, cfg.GatewayAddr, envSet("GATEWAY_ADDR"))
		cfg.GatewayAddr = last.pick("gateway", want["gateway"], log)
	}
	apiKey := ""
	if cfg.GatewayKeysFile == "" {
		if apiKey, cfg.GatewayKeysFile, err = devAPIKey(ds.Dir); err != nil {
			return err
		}
	}

	ctx := cmd.Context()
	eo := devenv.Options{Dir: ds.Dir, Host: host, ForceMiniredis: useMini, Log: log}
	if externalNats {
		eo.NatsURL = cfg.NatsURL
	} else {
		eo.NatsPort = portOf(last.pick("nats", want["nats"], log))
	}
	if externalRedis {
		eo.RedisURL = cfg.RedisURL
	} else {
		eo.RedisPort = portOf(last.pick("redis", want["redis"], log))
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
	var partner *demo.Partner
	if o.demo {
		// hooli's partner API, on a port of 127.0.0.1 of its own: the http
		// processor may call it (that address alone, not the rest of
		// 127.0.0.1, when BULKACTION_HTTP_ALLOWED_HOSTS restricts it). The
		// demo's second job type runs like sleep, behind its own rate limit.
		if partner, err = demo.StartPartner(w.Partner); err != nil {
			return err
		}
		defer partner.Close()
		bo := builtin.Options{DefaultURL: cfg.HTTPProcessorURL, AllowedHosts: cfg.HTTPAllowedHosts, AllowAnyHost: so.HTTPAnyHost}
		so.Mux = w.Processors(bo, partner)
	}
	st, err := stack.Start(ctx, so)
	if err != nil {
		return err
	}
	b := banner{cfg: cfg, env: env, logFile: logFile, demo: o.demo, apiKey: apiKey, listenHost: host, externalNats: externalNats}
	got := devAddrs{}
	if !externalNats {
		got["nats"] = devAddr{Want: want["nats"], Got: net.JoinHostPort(host, strconv.Itoa(portOf(hostPortOf(env.NatsURL))))}
	}
	if !externalRedis {
		got["redis"] = devAddr{Want: want["redis"], Got: net.JoinHostPort(host, strconv.Itoa(portOf(hostPortOf(env.RedisURL))))}
	}
	if st.Server != nil {
		b.httpAddr = st.Server.Addr()
		got["http"] = devAddr{Want: want["http"], Got: b.httpAddr}
	}
	if st.Gateway != nil {
		b.apiAddr = st.Gateway.Addr().String()
		got["gateway"] = devAddr{Want: want["gateway"], Got: b.apiAddr}
	}
	last.save(ds.Dir, got, log)
	fmt.Fprint(out, b.String())

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
	return runDemo(ctx, st, w, demo.Options{Out: out, Terminal: live, Suffix: suffix, Log: log, Partner: partner}, b.uiURL())
}

// runDemo runs the demo workload w on the running stack st, stops the
// stack and prints the summary. o's Client and Queue are filled in here.
// uiURL is the dashboard's address the end of the demo names (the
// banner's, signing in with dev's key).
func runDemo(ctx context.Context, st *stack.Stack, w demo.Workload, o demo.Options, uiURL string) error {
	cfg := st.Config()
	fmt.Fprintf(o.Out, "demo (%s): %d groups, %d jobs, global limit %d jobs/s, %d worker slots\n",
		w.Scale, len(w.Groups), w.TotalJobs(), cfg.GlobalRps, cfg.WorkerCount)
	if o.Partner != nil {
		adaptive := "the adaptive rate learns it"
		if !cfg.AdaptiveRateEnabled {
			adaptive = "the adaptive rate is off (BULKACTION_ADAPTIVE_RATE_ENABLED)"
		}
		c := o.Partner.Capacity()
		fmt.Fprintf(o.Out, "%s (http://%s) accepts %s, and answers 429 (Retry-After: %d) past that; %s\n",
			c.Name, o.Partner.Addr(), c, int(demo.PartnerRetryAfter/time.Second), adaptive)
	}
	fmt.Fprintln(o.Out)
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
	if o.Terminal && runErr == nil && sum != nil && uiURL != "" {
		// In a terminal the system stays up after the demo, so that the
		// dashboard and the API can still be looked at.
		if err := sum.Write(o.Out); err != nil {
			return err
		}
		printed = true
		fmt.Fprintf(o.Out, "\nThe demo is over; everything keeps running (dashboard %s). Ctrl-C stops.\n", uiURL)
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

// banner tells where everything runs and what the other verbs need.
type banner struct {
	cfg *config.Config
	env *devenv.Env
	// httpAddr and apiAddr are the listen addresses of metrics and of the
	// gateway ("" = not running).
	httpAddr, apiAddr string
	// apiKey is dev's admin key ("" = the keys file is the user's).
	apiKey  string
	logFile string
	demo    bool
	// listenHost is what NATS and Redis listen on when dev started them
	// (externalNats: NATS is the user's).
	listenHost   string
	externalNats bool
}

// uiURL is the dashboard's address ("" without a gateway). With dev's own
// key it signs in by itself: a fragment never reaches the server; the
// dashboard signs in with it and takes it out of the address bar.
func (d banner) uiURL() string {
	if d.apiAddr == "" {
		return ""
	}
	u := "http://" + browsable(d.apiAddr) + "/ui/"
	if d.apiKey != "" {
		u += "#key=" + d.apiKey
	}
	return u
}

func (d banner) String() string {
	var b strings.Builder
	cfg, env := d.cfg, d.env
	fmt.Fprintf(&b, "bulkaction dev: fetcher, dispatcher, worker, aggregator and gateway are running (Ctrl-C stops)\n")
	apiURL := ""
	if d.apiAddr != "" {
		apiURL = "http://" + browsable(d.apiAddr)
		fmt.Fprintf(&b, "  API    %s/v1/groups%s\n", apiURL, everyInterface(d.apiAddr))
		if d.apiKey != "" {
			fmt.Fprintf(&b, "  UI     %s (dashboard, signs in with the key)\n", d.uiURL())
			fmt.Fprintf(&b, "  key    %s (admin, dev only: kept in the data directory)\n", d.apiKey)
		} else {
			fmt.Fprintf(&b, "  UI     %s (dashboard)\n", d.uiURL())
		}
	}
	ownNote := everyInterface(net.JoinHostPort(d.listenHost, "0"))
	note := ""
	if !d.externalNats {
		note = ownNote
	}
	fmt.Fprintf(&b, "  NATS   %s%s\n", config.RedactURL(env.NatsURL), note)
	note = ""
	if env.RedisKind == devenv.RedisMini {
		note = " (in-process miniredis: for trying things out only)"
	}
	if env.RedisKind != devenv.RedisExternal {
		note += ownNote
	}
	fmt.Fprintf(&b, "  Redis  %s [%s]%s\n", config.RedactURL(env.RedisURL), env.RedisKind, note)
	if d.httpAddr != "" {
		fmt.Fprintf(&b, "  HTTP   http://%s/metrics, /healthz, /readyz%s\n", browsable(d.httpAddr), everyInterface(d.httpAddr))
	}
	if d.logFile != "" {
		fmt.Fprintf(&b, "  logs   %s\n", d.logFile)
	}
	// One line for another terminal: the servers, the API and its key,
	// and every setting the verbs read that differs from its default (the
	// demo sets the rate itself).
	b.WriteString("For the other verbs in another terminal:\n  export")
	for _, v := range []struct{ name, value string }{{"NATS_URL", env.NatsURL}, {"REDIS_URL", env.RedisURL}} {
		if config.RedactURL(v.value) == v.value { // else the user's environment has it already
			fmt.Fprintf(&b, " %s_%s=%s", config.Prefix, v.name, v.value)
		}
	}
	if apiURL != "" && d.apiKey != "" {
		fmt.Fprintf(&b, " %s=%s %s=%s", apiEnv, apiURL, apiKeyEnv, d.apiKey)
	}
	for _, v := range []struct{ name, field, value string }{
		{"REDIS_PREFIX", "RedisPrefix", cfg.RedisPrefix}, {"SUBJECT_PREFIX", "SubjectPrefix", cfg.SubjectPrefix},
		{"GLOBAL_RPS", "GlobalRps", strconv.Itoa(cfg.GlobalRps)},
		{"RATE_LIMIT_WINDOW_MS", "RateLimitWindowMs", strconv.Itoa(cfg.RateLimitWindowMs)},
	} {
		if v.value != defaultOf(v.field) {
			fmt.Fprintf(&b, " %s_%s=%s", config.Prefix, v.name, v.value)
		}
	}
	b.WriteString("\n")
	if !d.demo {
		fmt.Fprintf(&b, "Try: echo '{\"ms\":50}' | bulkaction submit --group hello --type sleep --file - && bulkaction watch hello\n")
	}
	return b.String()
}

// browsable turns a listen address into one to connect to: every
// interface becomes 127.0.0.1.
func browsable(addr string) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return addr
	}
	return net.JoinHostPort(devenv.DialHost(host), port)
}

// everyInterface notes a listen address that is not this machine's alone.
func everyInterface(addr string) string {
	host, _, err := net.SplitHostPort(addr)
	if ip := net.ParseIP(host); err == nil && (host == "" || (ip != nil && ip.IsUnspecified())) {
		return " (listening on every interface)"
	}
	return ""
}

// demoLogger logs to file and, when the demo prints plain lines (piped
// output) rather than redrawn bars, warnings and errors to stderr too.
func demoLogger(file, stderr io.Writer, live bool, format, level string) (*slog.Logger, error) {
	toFile, err := telemetry.NewLogger(file, format, level)
	if err != nil || live {
		return toFile, err
	}
	errLevel := "warn"
	if strings.EqualFold(strings.TrimSpace(level), "error") {
		errLevel = "error"
	}
	toErr, err := telemetry.NewLogger(stderr, format, errLevel)
	if err != nil {
		return nil, err
	}
	return slog.New(slog.NewMultiHandler(toFile.Handler(), toErr.Handler())), nil
}

// defaultOf is the default of a config.Config field.
func defaultOf(field string) string {
	f, _ := reflect.TypeOf(config.Config{}).FieldByName(field)
	return f.Tag.Get("default")
}

// wipeDevData removes the dev servers' data (and the log) from dir, with
// keys also the API keys, and nothing else, so a mistaken
// BULKACTION_DEV_DIR loses no other files.
func wipeDevData(dir string, keys bool) error {
	names := []string{"nats", "redis", "dev.log"}
	if keys {
		names = append(names, devKeyFile, devKeysFile)
	}
	for _, name := range names {
		if err := os.RemoveAll(filepath.Join(dir, name)); err != nil {
			return fmt.Errorf("wipe %s: %w", dir, err)
		}
	}
	return nil
}

// Files of the data directory besides the servers' data.
const (
	devKeyFile   = "dev-api-key"  // dev's admin key
	devKeysFile  = "gateway-keys" // the gateway's keys file
	devAddrsFile = "addresses.json"
)

// devAddr is where one server of a dev run listened.
type devAddr struct {
	Want string `json:"want"` // the address asked for
	Got  string `json:"got"`  // the address taken (another when Want was busy)
}

// devAddrs are the addresses of the last dev run by server (nats, redis,
// http, gateway), kept in the data directory.
type devAddrs map[string]devAddr

func readDevAddrs(dir string, log *slog.Logger) devAddrs {
	a := devAddrs{}
	b, err := os.ReadFile(filepath.Join(dir, devAddrsFile))
	if err == nil {
		err = json.Unmarshal(b, &a)
	}
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		log.Info("the last run's addresses are unreadable; taking the configured ones", "file", filepath.Join(dir, devAddrsFile), "err", err)
	}
	return a
}

// save records got over the last run's addresses.
func (a devAddrs) save(dir string, got devAddrs, log *slog.Logger) {
	all := maps.Clone(a)
	maps.Copy(all, got)
	b, _ := json.MarshalIndent(all, "", "  ")
	if err := os.WriteFile(filepath.Join(dir, devAddrsFile), append(b, '\n'), 0o644); err != nil {
		log.Info("the addresses of this run are not kept", "err", err)
	}
}

// pick returns the address server name listens on: the one the last run
// took for the same wanted address if it is free, else want if it is
// free, else a free port on want's host.
func (a devAddrs) pick(name, want string, log *slog.Logger) string {
	cands := []string{want}
	if l, ok := a[name]; ok && l.Want == want && l.Got != "" && l.Got != want {
		cands = []string{l.Got, want}
	}
	for _, c := range cands {
		if l, err := net.Listen("tcp", c); err == nil {
			_ = l.Close()
			if c != want {
				log.Info(name+" takes the address of the last run", "wanted", want, "addr", c)
			}
			return c
		}
	}
	host, _, err := net.SplitHostPort(want)
	if err != nil {
		return want
	}
	l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return want
	}
	defer l.Close()
	addr := net.JoinHostPort(host, strconv.Itoa(l.Addr().(*net.TCPAddr).Port))
	log.Info(name+" address busy; using a free port", "wanted", want, "addr", addr)
	return addr
}

// onHost is addr on host unless addr was set explicitly.
func onHost(host, addr string, set bool) string {
	_, port, err := net.SplitHostPort(addr)
	if set || err != nil {
		return addr
	}
	return net.JoinHostPort(host, port)
}

// hostPortOf is the host:port of a URL.
func hostPortOf(u string) string {
	if p, err := url.Parse(u); err == nil {
		return p.Host
	}
	return ""
}

// portOf is the port of host:port (0 if none).
func portOf(addr string) int {
	_, p, _ := net.SplitHostPort(addr)
	n, _ := strconv.Atoi(p)
	return n
}

// devAPIKey returns the dev admin API key kept in dir (made on first use)
// and the keys file listing it. The keys file is kept as it is, with the
// keys added to it (bulkaction gateway key --append); the admin key's line
// is added when it is missing.
func devAPIKey(dir string) (key, keysFile string, err error) {
	keyFile := filepath.Join(dir, devKeyFile)
	keysFile = filepath.Join(dir, devKeysFile)
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
	b, err := os.ReadFile(keysFile)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		line := "# bulkaction dev: the admin key of " + keyFile + "\n" + gateway.KeyLine(key, gateway.AdminTenant, "dev") + "\n"
		return key, keysFile, os.WriteFile(keysFile, []byte(line), 0o600)
	case err != nil:
		return "", "", err
	}
	keys, err := gateway.ParseKeys(bytes.NewReader(b))
	if err != nil {
		return "", "", fmt.Errorf("%s: %w: correct it, or start anew with --fresh", keysFile, err)
	}
	if p, ok := keys[gateway.HashKey(key)]; !ok || !p.Admin {
		if err := appendKeyLine(keysFile, gateway.KeyLine(key, gateway.AdminTenant, "dev")); err != nil {
			return "", "", err
		}
	}
	return key, keysFile, nil
}
