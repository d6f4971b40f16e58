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
			_, err = checkChart(dir, []string{filepath.Join(chartDir, "ci", "ha-keda-values.yaml")})
			mustFail(t, err, tc.want)
		})
	}
}
