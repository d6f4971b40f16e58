package validate

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/compose-spec/compose-go/v2/dotenv"
)

const composeDir = "../compose"

// composeCopy copies the compose directory and the dashboard it mounts into a temporary tree of
// the same shape, with .env made from .env.example (as the stack's instructions say), and
// returns the copy's compose directory.
func composeCopy(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	dir := filepath.Join(root, "deployments", "compose")
	copyDir(t, composeDir, dir)
	copyDir(t, "../grafana", filepath.Join(root, "deployments", "grafana"))
	b, err := os.ReadFile(filepath.Join(dir, ".env.example"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, ".env"), b, 0o600); err != nil {
		t.Fatal(err)
	}
	return dir
}

// checkComposeVariant loads and checks one variant of the stack in dir.
func checkComposeVariant(t *testing.T, dir string, files, profiles []string) error {
	t.Helper()
	envFile := filepath.Join(dir, ".env")
	p, err := LoadCompose(context.Background(), dir, envFile, files, profiles)
	if err != nil {
		return err
	}
	env, err := dotenv.Read(envFile)
	if err != nil {
		t.Fatal(err)
	}
	var raw []string
	for _, f := range files {
		b, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil {
			t.Fatal(err)
		}
		raw = append(raw, string(b))
	}
	if err := CheckCompose(p, raw, env); err != nil {
		return err
	}
	t.Logf("services: %v; disabled: %v", p.ServiceNames(), p.DisabledServiceNames())
	return nil
}

var composeVariants = map[string]struct{ files, profiles []string }{
	"single":        {[]string{"compose.yaml"}, nil},
	"cluster":       {[]string{"compose.yaml", "compose.cluster.yaml"}, []string{"cluster"}},
	"redis-cluster": {[]string{"compose.yaml", "compose.redis-cluster.yaml"}, []string{"redis-cluster"}},
	"both clusters": {[]string{"compose.yaml", "compose.cluster.yaml", "compose.redis-cluster.yaml"}, []string{"cluster", "redis-cluster"}},
}

func TestCompose(t *testing.T) {
	dir := composeCopy(t)
	for name, v := range composeVariants {
		t.Run(name, func(t *testing.T) {
			if err := checkComposeVariant(t, dir, v.files, v.profiles); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// The cluster override without its profile leaves the cluster without two of its nodes: the
// check must see it.
func TestComposeClusterNeedsProfile(t *testing.T) {
	err := checkComposeVariant(t, composeCopy(t), []string{"compose.yaml", "compose.cluster.yaml"}, nil)
	if err == nil {
		t.Fatal("the cluster override loaded without the cluster profile passed")
	}
	t.Logf("failed as expected: %.300s", err)
}

// Broken compose files are rejected.
func TestBrokenComposeFails(t *testing.T) {
	for _, tc := range []struct {
		name, file, old, new, want string
		cluster                    bool
	}{
		{"typo in a setting", "compose.yaml", "BULKACTION_LOG_FORMAT: json", "BULKACTION_LOG_FORMT: json", "BULKACTION_LOG_FORMT", false},
		{"setting the binary rejects", "compose.yaml", "BULKACTION_LOG_FORMAT: json", "BULKACTION_LOG_FORMAT: xml", "LOG_FORMAT", false},
		{"typo in the env file", ".env", "BULKACTION_GLOBAL_RPS=10000", "BULKACTION_GLOBAL_RSP=10000", "BULKACTION_GLOBAL_RSP", false},
		{"worker with a fixed name", "compose.yaml", "command: [\"worker\"]", "command: [\"worker\"]\n    container_name: worker", "scaling", false},
		{"no healthcheck", "compose.yaml", "test: [\"CMD\", \"wget\", \"-q\", \"-O\", \"/dev/null\", \"http://127.0.0.1:9090/-/ready\"]", "disable: true", "no healthcheck", false},
		{"dependency on a missing service", "compose.yaml", "      prometheus:\n        condition: service_healthy", "      prometheus:\n        condition: service_healthy\n      loki:\n        condition: service_healthy", "loki", false},
		{"password written inline", "compose.yaml", "NATS_SERVER_NAME: nats\n", "NATS_SERVER_NAME: nats\n      NATS_PASSWORD: change-me-nats\n", "NATS_PASSWORD", false},
		{"Redis may evict", "redis/redis.conf", "maxmemory-policy noeviction", "maxmemory-policy allkeys-lru", "maxmemory-policy", false},
		{"NATS message too small", "nats/nats.conf", "max_payload: 2MB", "max_payload: 512KB", "max_payload", false},
		{"NATS password differs", ".env", "BULKACTION_NATS_URL=nats://bulkaction:change-me-nats@", "BULKACTION_NATS_URL=nats://bulkaction:other@", "password", false},
		{"unscraped target", "prometheus/prometheus.yml", "names: [aggregator]", "names: [aggregatr]", "aggregator", false},
		{"unknown metric in an alert", "prometheus/alerts.yml", "bulk_action_inflight_size", "bulk_action_inflight_jobs", "bulk_action_inflight_jobs", false},
		{"missing mounted file", "compose.yaml", "./redis/redis.conf:", "./redis/redis.cnf:", "redis.cnf", false},
		{"gateway keys file missing", "compose.yaml", "BULKACTION_GATEWAY_KEYS_FILE: /etc/bulkaction/gateway/keys", "BULKACTION_GATEWAY_KEYS_FILE: /etc/bulkaction/gateway/api-keys", "api-keys", false},
		{"gateway keys file holds a key", "gateway/keys", "sha256:0d0ede40423d2af819e9e27e379c9352c2702d0350792c789a11b9f8eaf2231d *", "bak_compose-demo-key-change-me *", "not sha256:", false},
		{"gateway keys mounted as a file", "compose.yaml", "./gateway:/etc/bulkaction/gateway:ro", "./gateway/keys:/etc/bulkaction/gateway/keys:ro", "single file", false},
		{"gateway API port not published", "compose.yaml", "${GATEWAY_HOST_PORT:-8090}:8090", "${GATEWAY_HOST_PORT:-8090}:8091", "does not publish its API port", false},
		{"gateway spool read-only", "compose.yaml", "- gateway-spool:/tmp", "- gateway-spool:/tmp:ro", "SPOOL_DIR", false},
		{"unscraped gateway", "prometheus/prometheus.yml", "names: [gateway]", "names: [gatway]", "service gateway", false},
		{"gateway left out of the cluster", "compose.cluster.yaml", "  gateway: *cluster\n", "", "service gateway", true},
		{"cluster without a route", "nats/cluster.conf", "    nats-route://nats-3:6222\n", "", "routes", true},
		{"cluster with one stream replica", "compose.cluster.yaml", "BULKACTION_STREAM_REPLICAS: \"3\"", "BULKACTION_STREAM_REPLICAS: \"1\"", "STREAM_REPLICAS", true},
		{"cluster URL without a node", ".env", ",nats://bulkaction:change-me-nats@nats-3:4222", "", "nats-3", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := composeCopy(t)
			p := filepath.Join(dir, tc.file)
			b, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(string(b), tc.old) {
				t.Fatalf("%s no longer contains %q: update this test", tc.file, tc.old)
			}
			if err := os.WriteFile(p, []byte(strings.Replace(string(b), tc.old, tc.new, 1)), 0o644); err != nil {
				t.Fatal(err)
			}
			v := composeVariants["single"]
			if tc.cluster {
				v = composeVariants["cluster"]
			}
			mustFail(t, checkComposeVariant(t, dir, v.files, v.profiles), tc.want)
		})
	}
}

// With the Redis Cluster override, every target connects to the cluster's nodes with a
// hash-tagged prefix and starts only after the one-shot that creates the cluster, and the single
// Redis does not run.
func TestComposeRedisCluster(t *testing.T) {
	dir := composeCopy(t)
	v := composeVariants["redis-cluster"]
	p, err := LoadCompose(context.Background(), dir, filepath.Join(dir, ".env"), v.files, v.profiles)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := p.Services["redis"]; ok {
		t.Error("the single Redis still runs beside the cluster")
	}
	nodes := 0
	for name := range p.Services {
		if strings.HasPrefix(name, "redis-cluster-") && name != "redis-cluster-create" {
			nodes++
		}
	}
	if nodes != 6 {
		t.Errorf("%d Redis Cluster nodes, want 6 (3 primaries, 3 replicas)", nodes)
	}
	for _, target := range ServiceTargets {
		s, ok := p.Services[target]
		if !ok {
			t.Fatalf("no service %s", target)
		}
		env := serviceEnv(s)
		if got := env["BULKACTION_REDIS_CLUSTER_ADDRS"]; strings.Count(got, "redis-cluster-") != 6 {
			t.Errorf("%s: BULKACTION_REDIS_CLUSTER_ADDRS=%q, want the 6 nodes", target, got)
		}
		if got := env["BULKACTION_REDIS_PREFIX"]; got != "bulk-action:" {
			t.Errorf("%s: BULKACTION_REDIS_PREFIX=%q, want bulk-action: (no hash tag: each shard has its own)", target, got)
		}
		if got := env["BULKACTION_REDIS_SHARDS"]; got != "16" {
			t.Errorf("%s: BULKACTION_REDIS_SHARDS=%q, want 16", target, got)
		}
		if d, ok := s.DependsOn["redis-cluster-create"]; !ok || d.Condition != "service_completed_successfully" {
			t.Errorf("%s: does not wait for the cluster's creation: %v", target, s.DependsOn)
		}
		if _, ok := s.DependsOn["redis"]; ok {
			t.Errorf("%s: still waits for the single Redis", target)
		}
	}
}

// The Redis Cluster override without its profile leaves the targets without the cluster.
func TestComposeRedisClusterNeedsProfile(t *testing.T) {
	err := checkComposeVariant(t, composeCopy(t), []string{"compose.yaml", "compose.redis-cluster.yaml"}, nil)
	if err == nil {
		t.Fatal("the Redis Cluster override loaded without the redis-cluster profile passed")
	}
	t.Logf("failed as expected: %.300s", err)
}

// Broken Redis Cluster overrides are rejected.
func TestBrokenRedisClusterComposeFails(t *testing.T) {
	for _, tc := range []struct{ name, file, old, new, want string }{
		{"target left out", "compose.redis-cluster.yaml", "  gateway: *redis-cluster\n", "", `"gateway" depends on undefined service "redis"`},
		{"one shard with a prefix without a hash tag", "compose.redis-cluster.yaml", "    BULKACTION_REDIS_SHARDS: \"16\"\n", "", "hash tag"},
		{"shards with a hash-tagged prefix", "compose.redis-cluster.yaml", `BULKACTION_REDIS_PREFIX: "bulk-action:"`, `BULKACTION_REDIS_PREFIX: "{bulk-action}:"`, "no hash tag"},
		{"seed list without a node", "compose.redis-cluster.yaml", ",redis-cluster-6:6379", "", "cluster node redis-cluster-6"},
		{"node not in cluster mode", "redis/cluster.conf", "cluster-enabled yes", "cluster-enabled no", "cluster-enabled"},
		{"node state off the volume", "redis/cluster.conf", "cluster-config-file /data/nodes.conf", "cluster-config-file /tmp/nodes.conf", "cluster-config-file"},
		{"node without AOF", "redis/cluster.conf", "cluster-enabled yes", "cluster-enabled yes\nappendfsync everysec", "appendfsync"},
		{"replica without masterauth", "compose.redis-cluster.yaml", ` --masterauth \"$$REDIS_PASSWORD\"`, "", "masterauth"},
		{"node announces another name", "compose.redis-cluster.yaml", "--cluster-announce-hostname redis-cluster-2", "--cluster-announce-hostname redis-2", "announces"},
		{"node announces a bus address not its own", "compose.redis-cluster.yaml", "--cluster-announce-ip ${REDIS_CLUSTER_NET:-172.30.79}.13", "--cluster-announce-ip ${REDIS_CLUSTER_NET:-172.30.79}.23", "bus address"},
		{"no replicas", "compose.redis-cluster.yaml", "--cluster-replicas 1", "--cluster-replicas 0", "replica"},
		{"cluster created without a node", "compose.redis-cluster.yaml", " ${REDIS_CLUSTER_NET:-172.30.79}.16:6379 --cluster-replicas", " --cluster-replicas", "node redis-cluster-6"},
		{"creation before a node is healthy", "compose.redis-cluster.yaml", "      redis-cluster-6:\n        condition: service_healthy\n", "", "wait for node redis-cluster-6"},
		{"targets not waiting for the creation", "compose.redis-cluster.yaml", "    redis-cluster-create:\n      condition: service_completed_successfully\n", "", "creates the Redis Cluster"},
		{"targets off the cluster's network", "compose.redis-cluster.yaml", "  networks: [default, redis-cluster]\n", "", "shares no network"},
		{"cluster URL password differs", ".env", "REDIS_CLUSTER_URL=redis://:change-me-redis@", "REDIS_CLUSTER_URL=redis://:other@", "password"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := composeCopy(t)
			p := filepath.Join(dir, tc.file)
			b, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(string(b), tc.old) {
				t.Fatalf("%s no longer contains %q: update this test", tc.file, tc.old)
			}
			if err := os.WriteFile(p, []byte(strings.Replace(string(b), tc.old, tc.new, 1)), 0o644); err != nil {
				t.Fatal(err)
			}
			v := composeVariants["redis-cluster"]
			mustFail(t, checkComposeVariant(t, dir, v.files, v.profiles), tc.want)
		})
	}
}
