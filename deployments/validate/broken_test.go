package validate

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// copyDir copies the directory src to dst.
func copyDir(t *testing.T, src, dst string) {
	t.Helper()
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		if d.IsDir() {
			return os.MkdirAll(filepath.Join(dst, rel), 0o755)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dst, rel), b, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// mustFail asserts that err is not nil and mentions want.
func mustFail(t *testing.T, err error, want string) {
	t.Helper()
	if err == nil {
		t.Fatal("the validation passed; it should have failed")
	}
	if !strings.Contains(err.Error(), want) {
		t.Fatalf("failed, but not for the expected reason (want %q in the error):\n%v", want, err)
	}
	t.Logf("failed as expected: %.300s", err)
}

// Broken values are rejected: by values.schema.json, or by the checks of the rendered manifests.
func TestBrokenValuesFail(t *testing.T) {
	for _, tc := range []struct{ name, values, want string }{
		{"typo in a key", "targets:\n  worker:\n    replica: 3\n", "replica"},
		{"wrong type", "targets:\n  worker:\n    replicas: three\n", "replicas"},
		{"typo in a setting", "config:\n  BULKACTION_GLOBAL_RSP: 500\n", "BULKACTION_GLOBAL_RSP"},
		{"setting of the wrong type", "config:\n  BULKACTION_GLOBAL_RPS: fast\n", "BULKACTION_GLOBAL_RPS"},
		{"setting the chart owns", "config:\n  BULKACTION_NATS_URL: nats://x:4222\n", "BULKACTION_NATS_URL"},
		{"setting the binary rejects", "config:\n  BULKACTION_MAX_PAYLOAD_BYTES: 2000000\n", "MAX_PAYLOAD_BYTES"},
		{"typo in an env variable", "env:\n  BULKACTION_LOG_LEVL: debug\n", "BULKACTION_LOG_LEVL"},
		{"typo in a target's env variable", "targets:\n  worker:\n    env:\n      BULKACTION_WORKER_TYPE: http\n", "BULKACTION_WORKER_TYPE"},
		{"unknown autoscaling provider", "targets:\n  worker:\n    autoscaling:\n      provider: cpu\n", "provider"},
		{"too few worker instances", "config:\n  BULKACTION_WORKER_INSTANCES: 1\n", "WORKER_INSTANCES"},
		{"a key instead of its hash", "gateway:\n  keys:\n    - {hash: bak_compose-demo-key-change-me, tenant: acme}\n", "hash"},
		{"a key for a bad tenant", "gateway:\n  keys:\n    - {hash: \"sha256:" + strings.Repeat("a", 64) + "\", tenant: \"acme corp\"}\n", "tenant"},
		{"gateway setting the chart owns", "config:\n  BULKACTION_GATEWAY_KEYS_FILE: /keys\n", "BULKACTION_GATEWAY_KEYS_FILE"},
		{"gateway setting the binary rejects", "config:\n  BULKACTION_GATEWAY_IDEMPOTENCY_TTL: 500ms\n", "GATEWAY_IDEMPOTENCY_TTL"},
		{"gateway keys file overridden", "targets:\n  gateway:\n    env:\n      BULKACTION_GATEWAY_KEYS_FILE: /tmp/keys\n", "set twice"},
		{"gateway API on the metrics port", "gateway:\n  port: 8080\n", "same port"},
		{"Redis Cluster without a hash-tagged prefix", "redis:\n  cluster:\n    addrs: [redis-0:6379]\n", "hash tag"},
		{"Redis Cluster seed without a port", "redis:\n  cluster:\n    addrs: [redis-0]\n", "addrs"},
		{"Redis Cluster set by hand", "config:\n  BULKACTION_REDIS_CLUSTER_ADDRS: redis-0:6379\n", "BULKACTION_REDIS_CLUSTER_ADDRS"},
		{"ingress TLS without a Secret", "gateway:\n  ingress:\n    enabled: true\n    tls:\n      enabled: true\n", "secretName"},
		{"gateway autoscaled without a CPU request", "targets:\n  gateway:\n    resources: {requests: {cpu: null}}\n    autoscaling:\n      enabled: true\n", "requests.cpu"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := filepath.Join(t.TempDir(), "values.yaml")
			if err := os.WriteFile(f, []byte(tc.values), 0o644); err != nil {
				t.Fatal(err)
			}
			_, err := checkChart(chartDir, []string{f})
			mustFail(t, err, tc.want)
		})
	}
}

// A typo in a template is caught: an unknown field or a duplicate key by the strict decoding,
// a dangling reference by the cross-checks, a missing value by the strict rendering.
func TestBrokenTemplatesFail(t *testing.T) {
	for _, tc := range []struct{ name, file, old, new, want string }{
		{"misspelt field", "deployment.yaml", "containerPort:", "containerPorts:", "containerPorts"},
		{"duplicate key", "deployment.yaml", "imagePullPolicy: {{ $.Values.image.pullPolicy }}",
			"imagePullPolicy: {{ $.Values.image.pullPolicy }}\n          imagePullPolicy: Always", "imagePullPolicy"},
		{"service port to nowhere", "service.yaml", "targetPort: http", "targetPort: metrics", "metrics"},
		{"probe port to nowhere", "deployment.yaml", "path: /readyz\n              port: http", "path: /readyz\n              port: 9090", "9090"},
		{"selector of every pod", "deployment.yaml", "matchLabels:\n      {{- include \"bulkaction.targetSelectorLabels\" $ctx | nindent 6 }}",
			"matchLabels:\n      {{- include \"bulkaction.selectorLabels\" $ | nindent 6 }}", "also matches"},
		{"misspelt value", "deployment.yaml", "replicas: {{ $t.replicas }}", "replicas: {{ $t.replica }}", "replica"},
		{"misspelt setting", "configmap.yaml", "\ndata:\n", "\ndata:\n  BULKACTION_GLOBAL_RSP: \"1\"\n", "BULKACTION_GLOBAL_RSP"},
		{"kind without a Deployment", "worker-autoscaling.yaml", "name: {{ include \"bulkaction.targetName\" $ctx }}\n  minReplicaCount",
			"name: bulkaction-wrker\n  minReplicaCount", "bulkaction-wrker"},
		{"gateway keys mounted with subPath", "deployment.yaml", "mountPath: {{ include \"bulkaction.gatewayKeysDir\" $ }}",
			"mountPath: {{ include \"bulkaction.gatewayKeysFile\" $ }}\n              subPath: keys", "subPath"},
		{"gateway keys file outside the mount", "deployment.yaml", "value: {{ include \"bulkaction.gatewayKeysFile\" $ | quote }}",
			"value: /etc/bulkaction/keys", "not inside any volume mount"},
		{"gateway keys file not in the Secret", "deployment.yaml", "                path: keys\n", "                path: api-keys\n", "not among the items"},
		{"gateway keys Secret with a bad line", "gateway-secret.yaml", "{{- range .Values.gateway.keys }}", "bak_not-a-hash acme\n    {{- range .Values.gateway.keys }}", "line 3"},
		{"gateway spool on the read-only root", "deployment.yaml", "            - name: gateway-spool\n              mountPath:",
			"            - name: gateway-spool\n              readOnly: true\n              mountPath:", "SPOOL_DIR"},
		{"gateway API Service to the metrics port", "gateway-service.yaml", "targetPort: http-api", "targetPort: http", "no Service sends the API port"},
		{"gateway API Service to unready pods", "gateway-service.yaml", "  type: {{ $g.service.type }}", "  type: {{ $g.service.type }}\n  publishNotReadyAddresses: true", "no Service sends the API port"},
		{"gateway API port closed by its NetworkPolicy", "networkpolicy.yaml", "- port: http-api", "- port: http", "let nothing in to the API port"},
		{"gateway not scraped", "servicemonitor.yaml", "{{- if $t.enabled }}", "{{- if and $t.enabled (ne $target \"gateway\") }}", "no ServiceMonitor scrapes"},
		{"ingress to the metrics port", "gateway-ingress.yaml", "name: {{ include \"bulkaction.gatewayAPIServiceName\" . }}\n                port:\n                  name: http-api",
			"name: {{ include \"bulkaction.targetName\" (dict \"root\" . \"target\" \"gateway\") }}\n                port:\n                  name: http", "must not be exposed"},
		{"ingress to a port the Service lacks", "gateway-ingress.yaml", "                  name: http-api", "                  number: 8090", "not a port of Service"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "bulkaction")
			copyDir(t, chartDir, dir)
			p := filepath.Join(dir, "templates", tc.file)
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
			// The gateway's options (Ingress, keys, ServiceMonitors) on top of the HA values.
			_, err = checkChart(dir, []string{filepath.Join(chartDir, "ci", "ha-keda-values.yaml"), filepath.Join(chartDir, "ci", "gateway-values.yaml")})
			mustFail(t, err, tc.want)
		})
	}
}
