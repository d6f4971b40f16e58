package validate

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"maps"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/compose-spec/compose-go/v2/dotenv"
	"github.com/compose-spec/compose-go/v2/loader"
	"github.com/compose-spec/compose-go/v2/types"
	natsconf "github.com/nats-io/nats-server/v2/conf"
	"sigs.k8s.io/yaml"
)

// LoadCompose loads compose files the way `docker compose --env-file envFile -f files...
// --profile profiles... config` does: the env file feeds interpolation, env_file entries are
// read into each service's environment and relative paths are resolved against dir.
func LoadCompose(ctx context.Context, dir, envFile string, files, profiles []string) (*types.Project, error) {
	env, err := dotenv.Read(envFile)
	if err != nil {
		return nil, err
	}
	var cfs []types.ConfigFile
	for _, f := range files {
		cfs = append(cfs, types.ConfigFile{Filename: filepath.Join(dir, f)})
	}
	return loader.LoadWithContext(ctx, types.ConfigDetails{WorkingDir: dir, ConfigFiles: cfs, Environment: env},
		loader.WithProfiles(profiles), func(o *loader.Options) { o.ResolvePaths = true })
}

// isTarget reports whether a service runs a bulkaction target, and which.
func isTarget(s types.ServiceConfig) (string, bool) {
	if len(s.Command) == 0 || !strings.Contains(s.Image, "bulkaction") || !slices.Contains(Targets, s.Command[0]) {
		return "", false
	}
	return s.Command[0], true
}

// serviceEnv is a service's resolved environment (unset variables are left out).
func serviceEnv(s types.ServiceConfig) map[string]string {
	env := map[string]string{}
	for k, v := range s.Environment {
		if v != nil {
			env[k] = *v
		}
	}
	return env
}

// CheckCompose checks a loaded compose project: every service is health-checked or a one-shot
// that others wait for, dependencies exist and can be waited for, every BULKACTION_* variable is
// a setting and each target's settings load, targets scale (no container name, no host port),
// bind-mounted files exist, Prometheus scrapes every target, and the NATS and Redis
// configurations give what bulkaction needs. rawFiles are the compose files' text, checked for
// credentials written inline instead of coming from the env file envVars.
func CheckCompose(p *types.Project, rawFiles []string, envVars map[string]string) error {
	var errs []error
	fail := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }

	// Credentials only from the env file.
	for k, v := range envVars {
		if v == "" || !regexp.MustCompile(`(?i)PASSWORD|SECRET|TOKEN|_URL$`).MatchString(k) {
			continue
		}
		for _, raw := range rawFiles {
			if strings.Contains(raw, v) {
				fail("the value of %s is written in a compose file: credentials come from the env file only", k)
			}
		}
	}

	oneShots := map[string]bool{}
	for _, s := range p.Services {
		for dep, d := range s.DependsOn {
			if d.Condition == types.ServiceConditionCompletedSuccessfully {
				oneShots[dep] = true
			}
		}
	}
	targets := map[string][]string{} // target → services
	var natsURLs []string
	maxMsgSize := int64(1048576)
	for name, s := range p.Services {
		where := "service " + name
		healthy := s.HealthCheck != nil && !s.HealthCheck.Disable && len(s.HealthCheck.Test) > 0
		switch {
		case healthy:
		case oneShots[name]:
			if s.Restart != "" && s.Restart != types.RestartPolicyNo {
				fail("%s: a one-shot with restart %q", where, s.Restart)
			}
		default:
			fail("%s: no healthcheck, and not a one-shot another service waits for", where)
		}
		for dep, d := range s.DependsOn {
			ds, ok := p.Services[dep]
			if !ok {
				if _, disabled := p.DisabledServices[dep]; !(disabled && !d.Required) {
					fail("%s: depends on %s, which is not a service", where, dep)
				}
				continue
			}
			if d.Condition == types.ServiceConditionHealthy && (ds.HealthCheck == nil || ds.HealthCheck.Disable) {
				fail("%s: waits for %s to be healthy, which has no healthcheck", where, dep)
			}
		}
		env := serviceEnv(s)
		if err := CheckNames(where, keys(env)); err != nil {
			errs = append(errs, err)
		}
		for _, v := range s.Volumes {
			if v.Type == types.VolumeTypeBind {
				if _, err := os.Stat(v.Source); err != nil {
					fail("%s: bind mount source %s: %v", where, p.RelativePath(v.Source), err)
				}
			}
		}
		target, ok := isTarget(s)
		if !ok {
			continue
		}
		targets[target] = append(targets[target], name)
		if err := CheckValues(where, env); err != nil {
			errs = append(errs, err)
		}
		if target == "gateway" {
			// The entry point from outside: it publishes its API port (and so runs once).
			if err := checkComposeGateway(s, env); err != nil {
				fail("%s: %v", where, err)
			}
		} else if s.ContainerName != "" || slices.ContainsFunc(s.Ports, func(pc types.ServicePortConfig) bool { return pc.Published != "" }) {
			fail("%s: a container name or a published host port keeps it from scaling", where)
		}
		if !healthy || !slices.Contains(s.HealthCheck.Test, "/usr/local/bin/healthprobe") {
			fail("%s: healthcheck must run /usr/local/bin/healthprobe (the image has no shell)", where)
		}
		grace := int64(30000)
		if v, ok := env["BULKACTION_SHUTDOWN_GRACE_PERIOD_MS"]; ok {
			grace, _ = strconv.ParseInt(v, 10, 64)
		}
		if s.StopGracePeriod == nil || time.Duration(*s.StopGracePeriod) <= time.Duration(grace)*time.Millisecond {
			fail("%s: stop_grace_period must exceed SHUTDOWN_GRACE_PERIOD_MS (%d ms)", where, grace)
		}
		if v := env["BULKACTION_MAX_MSG_SIZE"]; v != "" {
			n, _ := strconv.ParseInt(v, 10, 64)
			maxMsgSize = max(maxMsgSize, n)
		}
		natsURLs = append(natsURLs, env["BULKACTION_NATS_URL"])
		if err := checkRedisURL(p, env["BULKACTION_REDIS_URL"]); err != nil {
			fail("%s: %v", where, err)
		}
	}
	for _, t := range ServiceTargets {
		if len(targets[t]) != 1 {
			fail("target %s: want one service, found %v", t, targets[t])
		}
	}
	if err := checkPrometheus(p, targets); err != nil {
		errs = append(errs, err)
	}
	if err := checkNATS(p, natsURLs, maxMsgSize); err != nil {
		errs = append(errs, err)
	}
	if err := checkRedisCluster(p); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// checkComposeGateway checks the gateway service: it publishes its API port (BULKACTION_GATEWAY_ADDR),
// other than the metrics port; its keys file is bind-mounted from the host inside a mounted
// directory (a single-file bind mount keeps the old file when an editor replaces it, so the
// gateway would not see the change), exists and is a valid keys file; and its spool directory is
// writable under a read-only root file system.
func checkComposeGateway(s types.ServiceConfig, env map[string]string) error {
	var errs []error
	fail := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	addr := env[gatewayAddrVar]
	if addr == "" {
		addr = defaultGatewayAddr
	}
	port, err := addrPort(addr)
	if err != nil {
		fail("%s: %v", gatewayAddrVar, err)
	} else {
		if mp, err := addrPort(env["BULKACTION_HTTP_ADDR"]); err == nil && mp == port {
			fail("%s %s is the metrics port: the API needs its own", gatewayAddrVar, addr)
		}
		if !slices.ContainsFunc(s.Ports, func(pc types.ServicePortConfig) bool { return pc.Target == uint32(port) && pc.Published != "" }) {
			fail("does not publish its API port %d (%s)", port, gatewayAddrVar)
		}
	}
	kf := env[gatewayKeysFileVar]
	switch hp, ok := hostPath(s, kf); {
	case kf == "":
		fail("%s is not set: the gateway does not start without its API keys", gatewayKeysFileVar)
	case !ok:
		fail("%s %s is not in a bind mount", gatewayKeysFileVar, kf)
	case slices.ContainsFunc(s.Volumes, func(v types.ServiceVolumeConfig) bool { return v.Type == types.VolumeTypeBind && v.Target == kf }):
		fail("%s %s is bind-mounted as a single file: mount its directory, or edits that replace the file are not seen", gatewayKeysFileVar, kf)
	default:
		raw, err := os.ReadFile(hp)
		if err != nil {
			fail("%s: %v", gatewayKeysFileVar, err)
		} else if err := CheckKeysFile(string(raw)); err != nil {
			fail("%s: %v", filepath.Base(hp), err)
		}
	}
	spool := env[gatewaySpoolDirVar]
	if spool == "" {
		spool = "/tmp"
	}
	if s.ReadOnly && !slices.ContainsFunc(s.Volumes, func(v types.ServiceVolumeConfig) bool {
		_, in := under(spool+"/x", v.Target)
		return in && !v.ReadOnly
	}) && !slices.ContainsFunc(s.Tmpfs, func(t string) bool {
		_, in := under(spool+"/x", strings.SplitN(t, ":", 2)[0])
		return in
	}) {
		fail("%s %s is not on a volume or tmpfs, and the root file system is read-only: large uploads would fail", gatewaySpoolDirVar, spool)
	}
	return errors.Join(errs...)
}

// configFile returns the host path of the file a service's command names with flag (e.g. -c),
// through its bind mounts.
func configFile(s types.ServiceConfig, flag string) (string, bool) {
	i := slices.Index(s.Command, flag)
	if i < 0 || i+1 >= len(s.Command) {
		return "", false
	}
	return hostPath(s, s.Command[i+1])
}

func hostPath(s types.ServiceConfig, inContainer string) (string, bool) {
	for _, v := range s.Volumes {
		if v.Type != types.VolumeTypeBind {
			continue
		}
		if inContainer == v.Target {
			return v.Source, true
		}
		if rel, ok := strings.CutPrefix(inContainer, v.Target+"/"); ok {
			return filepath.Join(v.Source, rel), true
		}
	}
	return "", false
}

// checkRedisURL checks that the targets' Redis URL names a redis service and its password.
func checkRedisURL(p *types.Project, raw string) error {
	u, err := url.Parse(raw)
	if err != nil {
		return fmt.Errorf("BULKACTION_REDIS_URL: %w", err)
	}
	s, ok := p.Services[u.Hostname()]
	if !ok {
		return fmt.Errorf("BULKACTION_REDIS_URL: host %s is not a service", u.Hostname())
	}
	pw, _ := u.User.Password()
	if want := serviceEnv(s)["REDIS_PASSWORD"]; pw != want {
		return fmt.Errorf("BULKACTION_REDIS_URL: the password differs from service %s's REDIS_PASSWORD", u.Hostname())
	}
	conf, ok := hostPath(s, "/usr/local/etc/redis/redis.conf")
	if !ok {
		return fmt.Errorf("service %s: no redis.conf mounted", u.Hostname())
	}
	return checkRedisConf(conf)
}

// checkRedisConf checks the settings bulkaction relies on: AOF flushed on every write and no
// eviction.
func checkRedisConf(path string) error {
	got, err := readRedisConf(path, nil)
	if err != nil {
		return err
	}
	var errs []error
	for k, want := range map[string]string{"appendonly": "yes", "appendfsync": "always", "maxmemory-policy": "noeviction"} {
		if got[k] != want {
			errs = append(errs, fmt.Errorf("%s: %s is %q, want %s", filepath.Base(path), k, got[k], want))
		}
	}
	return errors.Join(errs...)
}

// checkPrometheus checks that prometheus.yml has a job per target whose DNS discovery names the
// target's service, on port 8080, and that its rule files exist.
func checkPrometheus(p *types.Project, targets map[string][]string) error {
	s, ok := p.Services["prometheus"]
	if !ok {
		return errors.New("no prometheus service")
	}
	path, ok := hostPath(s, "/etc/prometheus/prometheus.yml")
	if !ok {
		return errors.New("service prometheus: prometheus.yml not mounted")
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var cfg struct {
		RuleFiles     []string `json:"rule_files"`
		ScrapeConfigs []struct {
			JobName      string `json:"job_name"`
			DNSSDConfigs []struct {
				Names []string `json:"names"`
				Port  int      `json:"port"`
			} `json:"dns_sd_configs"`
		} `json:"scrape_configs"`
	}
	if err := yaml.Unmarshal(raw, &cfg); err != nil {
		return fmt.Errorf("prometheus.yml: %w", err)
	}
	var errs []error
	for _, rf := range cfg.RuleFiles {
		hp, ok := hostPath(s, rf)
		if !ok {
			errs = append(errs, fmt.Errorf("prometheus.yml: rule file %s is not mounted", rf))
			continue
		}
		if err := checkRuleFile(hp); err != nil {
			errs = append(errs, err)
		}
	}
	for t, services := range targets {
		for _, svc := range services {
			found := false
			for _, sc := range cfg.ScrapeConfigs {
				for _, d := range sc.DNSSDConfigs {
					if slices.Contains(d.Names, svc) && d.Port == 8080 {
						found = true
					}
				}
			}
			if !found {
				errs = append(errs, fmt.Errorf("prometheus.yml: no job discovers service %s (target %s) on port 8080", svc, t))
			}
		}
	}
	return errors.Join(errs...)
}

// checkRuleFile checks that an alerting rule file decodes and names only metrics of the system
// that exist (see KnownMetrics).
func checkRuleFile(path string) error {
	raw, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var rf struct {
		Groups []struct {
			Name  string `json:"name"`
			Rules []struct {
				Alert       string            `json:"alert"`
				Expr        string            `json:"expr"`
				For         string            `json:"for,omitempty"`
				Labels      map[string]string `json:"labels,omitempty"`
				Annotations map[string]string `json:"annotations,omitempty"`
			} `json:"rules"`
		} `json:"groups"`
	}
	if err := yaml.UnmarshalStrict(raw, &rf); err != nil {
		return fmt.Errorf("%s: %w", filepath.Base(path), err)
	}
	var errs []error
	for _, g := range rf.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" || r.Expr == "" {
				errs = append(errs, fmt.Errorf("%s: a rule without alert or expr", filepath.Base(path)))
			}
			if err := CheckMetricNames(r.Expr); err != nil {
				errs = append(errs, fmt.Errorf("%s: alert %s: %w", filepath.Base(path), r.Alert, err))
			}
		}
	}
	return errors.Join(errs...)
}

// checkNATS checks every NATS service's configuration: JetStream on file storage, a max_payload
// that holds the streams' largest message, the targets' credentials among its users, and, for a
// cluster, routes to every NATS service and as many stream replicas as nodes.
func checkNATS(p *types.Project, targetURLs []string, maxMsgSize int64) error {
	var errs []error
	fail := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	var nodes []string
	clustered := false
	routeHosts := map[string][]string{} // clustered node → its route hosts
	for name, s := range p.Services {
		path, ok := configFile(s, "-c")
		if !ok || !strings.HasPrefix(s.Image, "nats") {
			continue
		}
		nodes = append(nodes, name)
		var m map[string]any
		var err error
		withEnv(serviceEnv(s), func() { m, err = natsconf.ParseFile(path) })
		if err != nil {
			fail("service %s: %s: %v", name, filepath.Base(path), err)
			continue
		}
		where := "service " + name + ": " + filepath.Base(path)
		js, _ := m["jetstream"].(map[string]any)
		if js == nil || js["store_dir"] == nil {
			fail("%s: no jetstream block with a store_dir", where)
		}
		if mp, _ := m["max_payload"].(int64); mp < maxMsgSize {
			fail("%s: max_payload %d is below BULKACTION_MAX_MSG_SIZE %d", where, mp, maxMsgSize)
		}
		users := map[string]string{}
		if auth, ok := m["authorization"].(map[string]any); ok {
			us, _ := auth["users"].([]any)
			for _, u := range us {
				um, _ := u.(map[string]any)
				name, _ := um["user"].(string)
				pw, _ := um["password"].(string)
				users[name] = pw
			}
		}
		for _, raw := range targetURLs {
			for _, one := range strings.Split(raw, ",") {
				u, err := url.Parse(strings.TrimSpace(one))
				if err != nil {
					fail("BULKACTION_NATS_URL: %v", err)
					continue
				}
				pw, _ := u.User.Password()
				if got, ok := users[u.User.Username()]; !ok || got != pw {
					fail("%s: BULKACTION_NATS_URL's user %q and password are not among its users", where, u.User.Username())
				}
			}
		}
		if c, ok := m["cluster"].(map[string]any); ok {
			clustered = true
			routes, _ := c["routes"].([]any)
			var hosts []string
			for _, r := range routes {
				rs, _ := r.(string)
				if u, err := url.Parse(rs); err == nil {
					hosts = append(hosts, u.Hostname())
				}
			}
			routeHosts[where] = hosts
		}
	}
	if len(nodes) == 0 {
		fail("no NATS service with a -c configuration file")
	}
	slices.Sort(nodes)
	for where, hosts := range routeHosts {
		slices.Sort(hosts)
		if !slices.Equal(hosts, nodes) {
			fail("%s: routes to %v, but the NATS services are %v", where, hosts, nodes)
		}
	}
	wantReplicas := 1
	if clustered {
		wantReplicas = len(nodes)
	}
	for name, s := range p.Services {
		if _, ok := isTarget(s); !ok {
			continue
		}
		env := serviceEnv(s)
		if r := env["BULKACTION_STREAM_REPLICAS"]; r != strconv.Itoa(wantReplicas) {
			fail("service %s: BULKACTION_STREAM_REPLICAS=%q with %d NATS node(s)", name, r, len(nodes))
		}
		var hosts []string
		for _, one := range strings.Split(env["BULKACTION_NATS_URL"], ",") {
			if u, err := url.Parse(strings.TrimSpace(one)); err == nil {
				hosts = append(hosts, u.Hostname())
			}
		}
		for _, n := range nodes {
			if !slices.Contains(hosts, n) {
				fail("service %s: BULKACTION_NATS_URL does not name NATS service %s", name, n)
			}
		}
	}
	return errors.Join(errs...)
}

// withEnv runs fn with env added to the process environment (nats configuration files read
// their $VARIABLES from it).
func withEnv(env map[string]string, fn func()) {
	envMu.Lock()
	defer envMu.Unlock()
	saved := map[string]*string{}
	for k, v := range env {
		if old, ok := os.LookupEnv(k); ok {
			saved[k] = &old
		} else {
			saved[k] = nil
		}
		os.Setenv(k, v)
	}
	defer func() {
		for k, v := range saved {
			if v == nil {
				os.Unsetenv(k)
			} else {
				os.Setenv(k, *v)
			}
		}
	}()
	fn()
}

// readRedisConf reads the directives of a redis.conf file, later ones overriding earlier ones.
// An include directive is followed through the bind mounts of s (none when s is nil).
func readRedisConf(path string, s *types.ServiceConfig) (map[string]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	got := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, v, _ := strings.Cut(line, " ")
		k, v = strings.ToLower(k), strings.TrimSpace(v)
		if k == "include" && s != nil {
			hp, ok := hostPath(*s, v)
			if !ok {
				return nil, fmt.Errorf("%s: included %s is not mounted", filepath.Base(path), v)
			}
			inc, err := readRedisConf(hp, s)
			if err != nil {
				return nil, err
			}
			maps.Copy(got, inc)
			continue
		}
		got[k] = v
	}
	return got, sc.Err()
}

// redisServerArgs returns the configuration file a Redis service runs and its command-line
// options (--name value), from its command (run directly or through sh -c).
func redisServerArgs(s types.ServiceConfig) (conf string, opts map[string]string, ok bool) {
	fields := strings.Fields(strings.Join(s.Command, " "))
	i := slices.Index(fields, "redis-server")
	if i < 0 || i+1 >= len(fields) {
		return "", nil, false
	}
	opts = map[string]string{}
	for j := i + 2; j < len(fields); j++ {
		if name, ok := strings.CutPrefix(fields[j], "--"); ok && j+1 < len(fields) {
			opts[name] = strings.Trim(fields[j+1], `"'`)
			j++
		}
	}
	return fields[i+1], opts, true
}

// clusterCreateRe finds the node addresses and the replicas of redis-cli --cluster create.
var clusterCreateRe = regexp.MustCompile(`--cluster create((?:\s+[^-\s]\S*)+)\s+.*--cluster-replicas\s+(\d+)`)

// checkRedisCluster checks the Redis Cluster of the targets that set BULKACTION_REDIS_CLUSTER_ADDRS:
// its seed nodes are every node of the cluster, each a Redis service in cluster mode with the
// durability settings, requirepass and masterauth (replicas authenticate to their primary), a
// fixed address it announces for the cluster bus and its service name it announces to clients;
// the targets share a network with the nodes and wait for a one-shot that creates the cluster
// from every node, with at least one replica per primary, once they are all healthy.
func checkRedisCluster(p *types.Project) error {
	var errs []error
	fail := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	checked := map[string]bool{}
	for name, s := range p.Services {
		if _, ok := isTarget(s); !ok {
			continue
		}
		where := "service " + name
		seeds := serviceEnv(s)["BULKACTION_REDIS_CLUSTER_ADDRS"]
		if seeds == "" {
			continue
		}
		var nodes []string
		for _, a := range strings.Split(seeds, ",") {
			host, _, _ := strings.Cut(strings.TrimSpace(a), ":")
			nodes = append(nodes, host)
		}
		slices.Sort(nodes)
		// Every Redis service in cluster mode is a seed: a node left out is a node no target
		// would find again if the others were replaced.
		var clusterNodes []string
		for n, ns := range p.Services {
			if conf, _, ok := redisServerArgs(ns); ok {
				if hp, ok := hostPath(ns, conf); ok {
					if c, err := readRedisConf(hp, &ns); err == nil && c["cluster-enabled"] == "yes" {
						clusterNodes = append(clusterNodes, n)
					}
				}
			}
		}
		slices.Sort(clusterNodes)
		for _, n := range clusterNodes {
			if !slices.Contains(nodes, n) {
				fail("%s: BULKACTION_REDIS_CLUSTER_ADDRS does not name cluster node %s", where, n)
			}
		}
		addrs := map[string]string{} // a node's fixed address or name → the node
		for _, n := range nodes {
			ns, ok := p.Services[n]
			if !ok {
				fail("%s: BULKACTION_REDIS_CLUSTER_ADDRS: host %s is not a service", where, n)
				continue
			}
			addrs[n] = n
			for _, nc := range ns.Networks {
				if nc != nil && nc.Ipv4Address != "" {
					addrs[nc.Ipv4Address] = n
				}
			}
			if !slices.ContainsFunc(keys(ns.Networks), func(net string) bool { _, ok := s.Networks[net]; return ok || len(s.Networks) == 0 && net == "default" }) {
				fail("%s: shares no network with Redis Cluster node %s", where, n)
			}
			if !checked[n] {
				checked[n] = true
				if err := checkRedisClusterNode(n, ns); err != nil {
					errs = append(errs, err)
				}
			}
		}
		// The one-shot that creates the cluster.
		var creator string
		for dep, d := range s.DependsOn {
			cs, ok := p.Services[dep]
			if ok && d.Condition == types.ServiceConditionCompletedSuccessfully && strings.Contains(strings.Join(cs.Command, " "), "--cluster create") {
				creator = dep
			}
		}
		if creator == "" {
			fail("%s: does not wait for a one-shot that creates the Redis Cluster (redis-cli --cluster create)", where)
			continue
		}
		if checked["create "+creator] {
			continue
		}
		checked["create "+creator] = true
		cs := p.Services[creator]
		m := clusterCreateRe.FindStringSubmatch(strings.Join(cs.Command, " "))
		if m == nil {
			fail("service %s: no redis-cli --cluster create <nodes> --cluster-replicas N", creator)
			continue
		}
		created := map[string]bool{}
		for _, a := range strings.Fields(m[1]) {
			host := a
			if i := strings.LastIndex(a, ":"); i >= 0 {
				host = a[:i]
			}
			n, ok := addrs[host]
			if !ok {
				fail("service %s: creates the cluster from %s, which is not a seed node's name or fixed address", creator, a)
				continue
			}
			created[n] = true
		}
		replicas, _ := strconv.Atoi(m[2])
		if replicas < 1 {
			fail("service %s: --cluster-replicas %d: a primary without a replica loses its slots with its node", creator, replicas)
		}
		if len(created) < 3*(replicas+1) {
			fail("service %s: %d nodes for 3 primaries with %d replica(s) each", creator, len(created), replicas)
		}
		for _, n := range nodes {
			if !created[n] {
				fail("service %s: does not create the cluster with node %s", creator, n)
			}
			if d, ok := cs.DependsOn[n]; !ok || d.Condition != types.ServiceConditionHealthy {
				fail("service %s: does not wait for node %s to be healthy", creator, n)
			}
		}
	}
	return errors.Join(errs...)
}

// checkRedisClusterNode checks one node of a Redis Cluster: cluster mode with its configuration
// file on the data volume, the durability settings, requirepass and masterauth, the fixed
// address it announces on the cluster bus and the name it announces to clients.
func checkRedisClusterNode(name string, s types.ServiceConfig) error {
	var errs []error
	fail := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("service %s: "+format, append([]any{name}, args...)...))
	}
	conf, opts, ok := redisServerArgs(s)
	if !ok {
		return fmt.Errorf("service %s: a seed node that does not run redis-server <conf>", name)
	}
	hp, ok := hostPath(s, conf)
	if !ok {
		return fmt.Errorf("service %s: %s is not mounted", name, conf)
	}
	c, err := readRedisConf(hp, &s)
	if err != nil {
		return fmt.Errorf("service %s: %w", name, err)
	}
	maps.Copy(c, opts)
	if c["cluster-enabled"] != "yes" {
		fail("cluster-enabled is %q, want yes", c["cluster-enabled"])
	}
	if cf := c["cluster-config-file"]; !strings.HasPrefix(cf, c["dir"]+"/") && !strings.HasPrefix(cf, "/data/") {
		fail("cluster-config-file %q is not on the data volume: a restarted node would not rejoin as itself", cf)
	}
	for k, want := range map[string]string{"appendonly": "yes", "appendfsync": "always", "maxmemory-policy": "noeviction"} {
		if c[k] != want {
			fail("%s is %q, want %s", k, c[k], want)
		}
	}
	for _, k := range []string{"requirepass", "masterauth"} {
		if c[k] != "$REDIS_PASSWORD" {
			fail("%s is not REDIS_PASSWORD (replicas authenticate to their primary with masterauth)", k)
		}
	}
	if c["cluster-preferred-endpoint-type"] != "hostname" || c["cluster-announce-hostname"] != name {
		fail("announces %q (cluster-announce-hostname, preferred endpoint %q), want its service name: the targets reach it by name", c["cluster-announce-hostname"], c["cluster-preferred-endpoint-type"])
	}
	ip := c["cluster-announce-ip"]
	if !slices.ContainsFunc(keys(s.Networks), func(n string) bool { nc := s.Networks[n]; return nc != nil && nc.Ipv4Address == ip && ip != "" }) {
		fail("announces bus address %q, which is not its fixed ipv4_address: the cluster bus would lose it after a restart", ip)
	}
	return errors.Join(errs...)
}
