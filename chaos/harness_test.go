package chaos

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"

	"github.com/bulkaction/bulkaction/internal/natsutil"
	"github.com/bulkaction/bulkaction/internal/testenv"
	"github.com/bulkaction/bulkaction/internal/testkit"
	"github.com/bulkaction/bulkaction/pkg/client"
	"github.com/bulkaction/bulkaction/pkg/contracts"
	"github.com/bulkaction/bulkaction/pkg/redisq"
	"github.com/bulkaction/bulkaction/services/gateway"
)

// binaries are the programs the suite runs as processes: the real
// bulkaction binary and the suite's helper (NATS nodes, the crash worker).
type binaries struct {
	bulkaction string
	node       string
}

var (
	buildOnce sync.Once
	built     binaries
	buildErr  error
)

// buildBinaries builds bin/bulkaction and chaosnode once per test binary
// into a temporary directory (plain go build: no race detector in the
// processes under test, whatever flags the suite runs with).
func buildBinaries(t *testing.T) binaries {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "bulkaction-chaos-bin-")
		if err != nil {
			buildErr = err
			return
		}
		goBin := filepath.Join(os.Getenv("GOROOT"), "bin", "go")
		if _, err := os.Stat(goBin); err != nil {
			goBin = "go"
		}
		cmd := exec.Command(goBin, "build", "-o", dir+string(os.PathSeparator), "../cmd/bulkaction", "./chaosnode")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		out, err := cmd.CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
			return
		}
		built = binaries{bulkaction: filepath.Join(dir, "bulkaction"), node: filepath.Join(dir, "chaosnode")}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return built
}

// ---------------------------------------------------------------- redis

// redisProc is a redis-server child process with AOF always, in a
// directory of its own, that can be killed, stopped and restarted on the
// same port and directory.
type redisProc struct {
	port int
	dir  string
	// wrap runs the server under another command (faketime -f +5m).
	wrap []string
	// extra arguments for the next start only (T10's restore).
	extra []string

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
}

func newRedis(t *testing.T, dir string) *redisProc {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	r := &redisProc{port: testkit.FreePort(t), dir: dir}
	if err := r.start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.kill)
	return r
}

func (r *redisProc) url() string { return "redis://127.0.0.1:" + strconv.Itoa(r.port) + "/0" }

func (r *redisProc) start() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cmd != nil {
		return nil
	}
	args := []string{"redis-server",
		"--port", strconv.Itoa(r.port), "--bind", "127.0.0.1",
		"--dir", r.dir, "--logfile", filepath.Join(r.dir, "redis.log"),
		"--appendonly", "yes", "--appendfsync", "always", "--save", "",
		"--maxmemory-policy", "noeviction",
		"--slowlog-log-slower-than", "10000", "--slowlog-max-len", "1000",
	}
	args = append(args, r.extra...)
	r.extra = nil
	args = append(append([]string{}, r.wrap...), args...)
	cmd := exec.Command(args[0], args[1:]...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start redis-server: %w", err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	r.cmd, r.done = cmd, done
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:" + strconv.Itoa(r.port), MaxRetries: -1})
	defer c.Close()
	deadline := time.Now().Add(60 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := c.Ping(ctx).Err()
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-done:
			return fmt.Errorf("redis-server exited at start (log %s)", filepath.Join(r.dir, "redis.log"))
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("redis-server on port %d not answering: %w", r.port, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (r *redisProc) signal(sig syscall.Signal) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cmd != nil {
		_ = syscall.Kill(-r.cmd.Process.Pid, sig)
	}
}

// stopWith sends sig and waits for the exit.
func (r *redisProc) stopWith(sig syscall.Signal) {
	r.mu.Lock()
	cmd, done := r.cmd, r.done
	r.cmd = nil
	r.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGCONT)
	_ = syscall.Kill(-cmd.Process.Pid, sig)
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-done
	}
}

func (r *redisProc) kill() { r.stopWith(syscall.SIGKILL) }

// ---------------------------------------------------------------- nats

// natsNode is one NATS server process (chaosnode nats).
type natsNode struct {
	bin         string
	name        string
	port        int
	clusterPort int
	routes      string
	dir         string
	log         string

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
}

func (n *natsNode) url() string { return "nats://127.0.0.1:" + strconv.Itoa(n.port) }

func (n *natsNode) start() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cmd != nil {
		return nil
	}
	args := []string{"nats", "-port", strconv.Itoa(n.port), "-dir", n.dir}
	if n.clusterPort > 0 {
		args = append(args, "-name", n.name, "-cluster-port", strconv.Itoa(n.clusterPort), "-routes", n.routes)
	}
	cmd := exec.Command(n.bin, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	logf, err := os.OpenFile(n.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	cmd.Stderr = logf
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	ready := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if strings.HasPrefix(sc.Text(), "ready") {
				close(ready)
				break
			}
		}
		for sc.Scan() {
		}
	}()
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); logf.Close(); close(done) }()
	n.cmd, n.done = cmd, done
	select {
	case <-ready:
		return nil
	case <-done:
		n.cmd = nil
		return fmt.Errorf("nats node %s exited at start (log %s)", n.name, n.log)
	case <-time.After(60 * time.Second):
		return fmt.Errorf("nats node %s not ready", n.name)
	}
}

func (n *natsNode) kill() {
	n.mu.Lock()
	cmd, done := n.cmd, n.done
	n.cmd = nil
	n.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Kill()
	<-done
}

// ---------------------------------------------------------------- services

// svc is one service process, restarted by its supervisor whenever it
// exits until the environment shuts down. Exits the suite did not cause
// are counted as crashes.
type svc struct {
	name string
	args []string
	env  []string
	bin  string
	log  string
	wrap []string // e.g. faketime -f +5m

	mu       sync.Mutex
	cmd      *exec.Cmd
	killing  bool
	stopping bool
	held     bool // stopped on purpose (hold) until release
	kills    int
	crashes  int
	starts   int
	exits    []string
	stopped  chan struct{}
}

func (s *svc) run(restartDelay time.Duration) {
	defer close(s.stopped)
	for {
		s.mu.Lock()
		if s.stopping {
			s.mu.Unlock()
			return
		}
		if s.held {
			s.mu.Unlock()
			time.Sleep(50 * time.Millisecond)
			continue
		}
		argv := append(append(append([]string{}, s.wrap...), s.bin), s.args...)
		cmd := exec.Command(argv[0], argv[1:]...)
		cmd.Env = s.env
		// Its own process group: a wrapper (faketime) and its child die together.
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
		logf, err := os.OpenFile(s.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err == nil {
			fmt.Fprintf(logf, "=== chaos: start %s at %s\n", s.name, time.Now().Format(time.RFC3339Nano))
			cmd.Stdout, cmd.Stderr = logf, logf
		}
		err = cmd.Start()
		if err != nil {
			s.mu.Unlock()
			if logf != nil {
				logf.Close()
			}
			time.Sleep(restartDelay)
			continue
		}
		s.cmd = cmd
		s.starts++
		s.mu.Unlock()
		werr := cmd.Wait()
		if logf != nil {
			fmt.Fprintf(logf, "=== chaos: %s exited: %v at %s\n", s.name, werr, time.Now().Format(time.RFC3339Nano))
			logf.Close()
		}
		s.mu.Lock()
		s.cmd = nil
		switch {
		case s.stopping, s.held:
		case s.killing:
			s.kills++
		default:
			s.crashes++
			s.exits = append(s.exits, fmt.Sprint(werr))
		}
		s.killing = false
		stopping := s.stopping
		s.mu.Unlock()
		if stopping {
			return
		}
		time.Sleep(restartDelay)
	}
}

// kill9 kills the running process with SIGKILL (the supervisor restarts
// it). It reports whether a process was running.
func (s *svc) kill9() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil || s.killing {
		return false
	}
	s.killing = true
	_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
	return true
}

// hold stops the process as SIGTERM does and keeps it down until release.
func (s *svc) hold() {
	s.mu.Lock()
	s.held = true
	cmd := s.cmd
	s.mu.Unlock()
	if cmd != nil {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
	}
	for {
		s.mu.Lock()
		down := s.cmd == nil
		s.mu.Unlock()
		if down {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// release lets the supervisor start the process again after hold.
func (s *svc) release() {
	s.mu.Lock()
	s.held = false
	s.mu.Unlock()
}

// shutdown stops the supervisor and the process (SIGTERM, then SIGKILL).
func (s *svc) shutdown() {
	s.mu.Lock()
	s.stopping = true
	cmd := s.cmd
	s.mu.Unlock()
	if cmd != nil {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
	}
	select {
	case <-s.stopped:
	case <-time.After(10 * time.Second):
		s.mu.Lock()
		if s.cmd != nil {
			_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
		}
		s.mu.Unlock()
		<-s.stopped
	}
}

// ---------------------------------------------------------------- env

// envOptions shape one scenario's installation.
type envOptions struct {
	// Fetchers, Dispatchers, Workers and Aggregators are the instances of
	// each target; zero means 2, 2, 3, 2.
	Fetchers, Dispatchers, Workers, Aggregators int
	// CrashWorker runs the workers as chaosnode worker (with the crash type).
	CrashWorker bool
	// NATSNodes is 1 (default) or 3 (a cluster; streams get 3 replicas).
	NATSNodes int
	// Settings are extra BULKACTION_* settings (name without the prefix).
	Settings map[string]string
	// Wrap maps a service name ("worker-1") to a command it runs under.
	Wrap map[string][]string
	// RedisWrap runs redis-server under a command.
	RedisWrap []string
	// RestartDelay is how long a dead service stays down; zero means 500ms.
	RestartDelay time.Duration
	// GatewayTenants, when set, runs a gateway (gateway-1) with an API key
	// for each of these tenants (env.gatewayKeys).
	GatewayTenants []string
	// RedisCluster runs a Redis Cluster of three primaries, each with a
	// replica (env.cluster), in place of the one redis-server; the prefix
	// gets a hash tag.
	RedisCluster bool
	// RedisShards, above 1, spreads the tenants over that many logical
	// shards (REDIS_SHARDS, docs/ARCHITECTURE.md §11.1) on such a Redis
	// Cluster (it implies RedisCluster): the prefix carries no hash tag,
	// each shard's keys carry their own ({s<i>}) and the cross-shard keys
	// {g}.
	RedisShards int
}

// env is one scenario's installation: redis-server, NATS node(s) and the
// service processes, plus the suite's own clients.
type env struct {
	t       *testing.T
	dir     string
	bins    binaries
	redis   *redisProc            // nil with RedisCluster
	cluster *testenv.RedisCluster // with RedisCluster
	nats    []*natsNode
	svcs    []*svc
	opts    envOptions
	prefix  string
	names   contracts.Names
	// keys are the installation's keys; with shards, the cross-shard ones
	// (a tenant's are tenantKeys').
	keys   redisq.Keys
	shards int // logical shards, 1 without RedisShards

	rdb        redis.UniversalClient
	nc         *nats.Conn
	js         jetstream.JetStream
	client     *client.Client
	slowestKey string // T8: the first key of the longest script call in SLOWLOG

	gatewayURL  string            // http://127.0.0.1:port of gateway-1, with GatewayTenants
	gatewayKeys map[string]string // tenant → API key
}

func defaultInt(v, d int) int {
	if v == 0 {
		return d
	}
	return v
}

// newEnv starts a fresh installation for one scenario; everything stops
// when the test ends.
func newEnv(t *testing.T, name string, opts envOptions) *env {
	t.Helper()
	bins := buildBinaries(t)
	dir := filepath.Join(runDir(t), name)
	_ = os.RemoveAll(dir)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if opts.RedisShards > 1 {
		opts.RedisCluster = true
	}
	e := &env{t: t, dir: dir, bins: bins, opts: opts, prefix: "chaos:", keys: redisq.NewKeys("chaos:"), shards: 1}
	if opts.RedisCluster {
		c, err := testenv.StartRedisClusterWithReplicas(filepath.Join(dir, "redis"), 3)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Stop)
		e.cluster = c
		e.prefix = "{chaos}:"
		e.keys = redisq.NewKeys(e.prefix)
		if opts.RedisShards > 1 {
			e.shards = opts.RedisShards
			e.prefix = "chaos:"
			e.keys = redisq.NewKeys(redisq.GlobalPrefix(e.prefix))
		}
	} else {
		e.redis = &redisProc{port: testkit.FreePort(t), dir: filepath.Join(dir, "redis"), wrap: opts.RedisWrap}
		if err := os.MkdirAll(e.redis.dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := e.redis.start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(e.redis.kill)
	}

	nodes := defaultInt(opts.NATSNodes, 1)
	picked := testkit.FreePorts(t, 2*nodes)
	ports, cports := picked[:nodes], picked[nodes:]
	for i := 0; i < nodes; i++ {
		n := &natsNode{bin: bins.node, name: fmt.Sprintf("n%d", i+1), port: ports[i],
			dir: filepath.Join(dir, fmt.Sprintf("nats-%d", i+1)), log: filepath.Join(dir, fmt.Sprintf("nats-%d.log", i+1))}
		if nodes > 1 {
			n.clusterPort = cports[i]
			var routes []string
			for j := 0; j < nodes; j++ {
				if j != i {
					routes = append(routes, "nats://127.0.0.1:"+strconv.Itoa(cports[j]))
				}
			}
			n.routes = strings.Join(routes, ",")
		}
		e.nats = append(e.nats, n)
	}
	var wg sync.WaitGroup
	errs := make([]error, nodes)
	for i, n := range e.nats {
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = n.start() }()
	}
	wg.Wait()
	for _, n := range e.nats {
		t.Cleanup(n.kill)
	}
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}

	if e.cluster != nil {
		e.rdb = redis.NewClusterClient(&redis.ClusterOptions{Addrs: e.cluster.Addrs(), PoolSize: 16,
			ReadTimeout: 10 * time.Second, WriteTimeout: 10 * time.Second, MaxRedirects: 16,
			ClusterStateReloadInterval: time.Second})
	} else {
		e.rdb = redis.NewClient(&redis.Options{Addr: "127.0.0.1:" + strconv.Itoa(e.redis.port), PoolSize: 16,
			ReadTimeout: 10 * time.Second, WriteTimeout: 10 * time.Second})
	}
	t.Cleanup(func() { _ = e.rdb.Close() })
	nc, err := nats.Connect(e.natsURL(), nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond),
		nats.Name("chaos-suite"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	e.nc = nc
	e.js, err = jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	settings := natsutil.StreamSettings{Replicas: nodes}
	if v := opts.Settings["MAX_MSG_SIZE"]; v != "" {
		n, _ := strconv.Atoi(v)
		settings.MaxMsgSize = int32(n)
	}
	if v := opts.Settings["STREAM_DLQ_MAX_MSGS_PER_SUBJECT"]; v != "" {
		settings.DLQMaxMsgsPerSubject, _ = strconv.ParseInt(v, 10, 64)
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err = natsutil.EnsureStreams(ctx, e.js, e.names, settings)
		cancel()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("streams: %v", err)
		}
		time.Sleep(500 * time.Millisecond)
	}
	e.client = client.New(e.js, client.Options{BatchSize: 500})

	env := e.serviceEnv(nodes)
	counts := []struct {
		target string
		n      int
	}{
		{"fetcher", defaultInt(opts.Fetchers, 2)},
		{"dispatcher", defaultInt(opts.Dispatchers, 2)},
		{"worker", defaultInt(opts.Workers, 3)},
		{"aggregator", defaultInt(opts.Aggregators, 2)},
	}
	delay := opts.RestartDelay
	if delay == 0 {
		delay = 500 * time.Millisecond
	}
	if len(opts.GatewayTenants) > 0 {
		counts = append(counts, struct {
			target string
			n      int
		}{"gateway", 1})
		env = append(slices.Clone(env), e.gatewayEnv(opts.GatewayTenants)...)
	}
	for _, c := range counts {
		for i := 1; i <= c.n; i++ {
			name := fmt.Sprintf("%s-%d", c.target, i)
			s := &svc{name: name, bin: bins.bulkaction, args: []string{c.target}, env: env,
				log: filepath.Join(dir, name+".log"), wrap: opts.Wrap[name], stopped: make(chan struct{})}
			if c.target == "worker" {
				// Each worker's restarts share its state directory, as a
				// pod's containers share an emptyDir.
				s.env = append(slices.Clone(env), "BULKACTION_WORKER_STATE_DIR="+filepath.Join(dir, name+"-state"))
				if opts.CrashWorker {
					s.bin, s.args = bins.node, []string{"worker"}
				}
			}
			e.svcs = append(e.svcs, s)
			go s.run(delay)
		}
	}
	t.Cleanup(e.shutdown)
	return e
}

// gatewayEnv writes a keys file with a key per tenant and returns the
// gateway's settings; the keys are in e.gatewayKeys.
func (e *env) gatewayEnv(tenants []string) []string {
	e.gatewayKeys = map[string]string{}
	var lines []string
	for _, tenant := range tenants {
		key, err := gateway.NewKey()
		if err != nil {
			e.t.Fatal(err)
		}
		e.gatewayKeys[tenant] = key
		lines = append(lines, gateway.KeyLine(key, tenant, tenant))
	}
	file := filepath.Join(e.dir, "gateway-keys")
	if err := os.WriteFile(file, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
		e.t.Fatal(err)
	}
	addr := "127.0.0.1:" + strconv.Itoa(testkit.FreePort(e.t))
	e.gatewayURL = "http://" + addr
	return []string{"BULKACTION_GATEWAY_ADDR=" + addr, "BULKACTION_GATEWAY_KEYS_FILE=" + file}
}

// tenantKeys are the keys of tenant's groups and jobs: e.keys, or with
// shards those of the tenant's shard.
func (e *env) tenantKeys(tenant string) redisq.Keys {
	if e.shards <= 1 {
		return e.keys
	}
	return redisq.NewKeys(redisq.ShardPrefix(e.prefix, redisq.ShardOf(tenant, e.shards)))
}

// keyPrefix splits a key of the installation into the prefix of its keys
// (with shards, its shard's or the cross-shard one) and the rest.
func (e *env) keyPrefix(key string) (prefix, rest string) {
	rest = strings.TrimPrefix(key, e.prefix)
	if e.shards > 1 && strings.HasPrefix(rest, "{") {
		if i := strings.Index(rest, "}:"); i > 0 {
			return e.prefix + rest[:i+2], rest[i+2:]
		}
	}
	return e.prefix, rest
}

func (e *env) natsURL() string {
	urls := make([]string, len(e.nats))
	for i, n := range e.nats {
		urls[i] = n.url()
	}
	return strings.Join(urls, ",")
}

// serviceEnv is the environment of every service process: the test's
// servers, no HTTP listener, and timings short enough for recovery from a
// kill to happen within a test (leases of 3 s, backoffs of 100 ms to 2 s,
// stuck groups repaired after 20 s).
func (e *env) serviceEnv(nodes int) []string {
	redisURL := ""
	if e.cluster != nil {
		redisURL = "redis://" + e.cluster.Addrs()[0] + "/0"
	} else {
		redisURL = e.redis.url()
	}
	set := map[string]string{
		"REDIS_URL":                redisURL,
		"REDIS_PREFIX":             e.prefix,
		"NATS_URL":                 e.natsURL(),
		"HTTP_ADDR":                "",
		"LOG_FORMAT":               "text",
		"LOG_LEVEL":                "warn",
		"LEASE_MS":                 "3000",
		"BASE_BACKOFF_MS":          "100",
		"MAX_BACKOFF_MS":           "2000",
		"JOB_TIMEOUT_MS":           "2000",
		"STUCK_AFTER":              "20s",
		"CLAIM_TTL":                "6s",
		"WORKER_COUNT":             "10",
		"WORKER_INSTANCES":         "3",
		"SHUTDOWN_GRACE_PERIOD_MS": "2000",
		"STREAM_REPLICAS":          strconv.Itoa(nodes),
	}
	if e.cluster != nil {
		set["REDIS_CLUSTER_ADDRS"] = strings.Join(e.cluster.Addrs(), ",")
	}
	if e.shards > 1 {
		set["REDIS_SHARDS"] = strconv.Itoa(e.shards)
	}
	for k, v := range e.opts.Settings {
		set[k] = v
	}
	var out []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "BULKACTION_") && !strings.HasPrefix(kv, "OTEL_") {
			out = append(out, kv)
		}
	}
	for k, v := range set {
		out = append(out, "BULKACTION_"+k+"="+v)
	}
	return out
}

func (e *env) shutdown() {
	var wg sync.WaitGroup
	for _, s := range e.svcs {
		wg.Add(1)
		go func() { defer wg.Done(); s.shutdown() }()
	}
	wg.Wait()
}

// services returns the service processes whose name starts with prefix.
func (e *env) services(prefix string) []*svc {
	var out []*svc
	for _, s := range e.svcs {
		if strings.HasPrefix(s.name, prefix) {
			out = append(out, s)
		}
	}
	return out
}

// crashes sums the unexpected exits of the services and describes them.
func (e *env) crashes() (int, string) {
	n := 0
	var parts []string
	for _, s := range e.svcs {
		s.mu.Lock()
		if s.crashes > 0 {
			n += s.crashes
			parts = append(parts, fmt.Sprintf("%s×%d (%s)", s.name, s.crashes, s.exits[len(s.exits)-1]))
		}
		s.mu.Unlock()
	}
	return n, strings.Join(parts, ", ")
}

// sleepRand sleeps a random duration in [lo, hi) or until ctx ends.
func sleepRand(ctx context.Context, lo, hi time.Duration) bool {
	d := lo + time.Duration(rand.Int64N(int64(hi-lo)+1))
	select {
	case <-ctx.Done():
		return false
	case <-time.After(d):
		return true
	}
}

var (
	runDirOnce sync.Once
	runDirPath string
)

// runDir holds the logs and data of the run: $BULKACTION_CHAOS_DIR, or a
// temporary directory kept when the suite fails.
func runDir(t *testing.T) string {
	runDirOnce.Do(func() {
		if d := os.Getenv("BULKACTION_CHAOS_DIR"); d != "" {
			runDirPath = d
			return
		}
		d, err := os.MkdirTemp("", "bulkaction-chaos-")
		if err != nil {
			panic(err)
		}
		runDirPath = d
	})
	return runDirPath
}
