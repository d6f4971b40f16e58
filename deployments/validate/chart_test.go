package validate

import (
	"encoding/json"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
)

const chartDir = "../helm/bulkaction"

// valueSets are the values the chart is checked with: its defaults and every ci/*.yaml.
func valueSets(t *testing.T) map[string][]string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(chartDir, "ci", "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 3 {
		t.Fatalf("want at least 3 ci values files, found %v", files)
	}
	sets := map[string][]string{"default": nil}
	for _, f := range files {
		sets[strings.TrimSuffix(filepath.Base(f), ".yaml")] = []string{f}
	}
	return sets
}

// checkChart lints, renders, decodes and cross-checks the chart at dir with the values files.
func checkChart(dir string, files []string) ([]Object, error) {
	// Lint coalesces the values it is given in place (a null that removes a default is gone
	// after it), so it gets a copy of its own.
	lintVals, err := ReadValues(files...)
	if err != nil {
		return nil, err
	}
	if err := Lint(dir, lintVals); err != nil {
		return nil, err
	}
	vals, err := ReadValues(files...)
	if err != nil {
		return nil, err
	}
	ms, err := Render(dir, vals)
	if err != nil {
		return nil, err
	}
	objs, err := Decode(ms)
	if err != nil {
		return nil, err
	}
	all, err := ReadValues(append([]string{filepath.Join(dir, "values.yaml")}, files...)...)
	if err != nil {
		return nil, err
	}
	return objs, Check(objs, checkOptions(all))
}

// checkOptions declares the Secrets and service account the values say exist outside the chart.
func checkOptions(vals map[string]any) CheckOptions {
	opt := CheckOptions{Namespace: Release.Namespace, ExternalSecrets: map[string][]string{}}
	for _, conn := range []string{"nats", "redis"} {
		c, _ := vals[conn].(map[string]any)
		if name, _ := c["existingSecret"].(string); name != "" {
			key, _ := c["existingSecretKey"].(string)
			opt.ExternalSecrets[name] = append(opt.ExternalSecrets[name], key)
		}
	}
	if g, _ := vals["gateway"].(map[string]any); g != nil {
		if name, _ := g["existingKeysSecret"].(string); name != "" {
			key, _ := g["existingKeysSecretKey"].(string)
			opt.ExternalSecrets[name] = append(opt.ExternalSecrets[name], key)
		}
	}
	if sa, _ := vals["serviceAccount"].(map[string]any); sa["create"] == false {
		if name, _ := sa["name"].(string); name != "" {
			opt.ExternalServiceAccounts = append(opt.ExternalServiceAccounts, name)
		}
	}
	return opt
}

func kinds(objs []Object) map[string]int {
	out := map[string]int{}
	for _, o := range objs {
		out[o.Kind]++
	}
	return out
}

func TestChart(t *testing.T) {
	for name, files := range valueSets(t) {
		t.Run(name, func(t *testing.T) {
			objs, err := checkChart(chartDir, files)
			if err != nil {
				t.Fatal(err)
			}
			k := kinds(objs)
			t.Logf("%d objects: %v", len(objs), k)
			// One Deployment and one (metrics) Service per target, and the gateway's API Service.
			if k["Deployment"] != 5 || k["Service"] != 6 || k["ConfigMap"] != 1 {
				t.Errorf("want 5 Deployments, 6 Services and 1 ConfigMap, got %v", k)
			}
			checkEveryTarget(t, objs)
			switch name {
			case "ha-keda-values":
				if k["ScaledObject"] != 1 || k["ServiceMonitor"] != 5 || k["PodDisruptionBudget"] != 5 || k["HorizontalPodAutoscaler"] != 0 {
					t.Errorf("want 1 ScaledObject, 5 ServiceMonitors and 5 PodDisruptionBudgets, got %v", k)
				}
			case "gateway-values":
				if k["Ingress"] != 1 || k["HorizontalPodAutoscaler"] != 1 || k["ServiceMonitor"] != 5 || k["Secret"] != 2 {
					t.Errorf("want the gateway's Ingress, HorizontalPodAutoscaler and keys Secret, and 5 ServiceMonitors, got %v", k)
				}
				checkGatewayIngress(t, objs)
			case "hpa-values":
				if k["HorizontalPodAutoscaler"] != 1 || k["ScaledObject"] != 0 {
					t.Errorf("want 1 HorizontalPodAutoscaler, got %v", k)
				}
			case "minimal-values":
				if k["PodDisruptionBudget"] != 0 || k["NetworkPolicy"] != 0 || k["Ingress"] != 0 {
					t.Errorf("one replica each and no policies: want no PodDisruptionBudget or NetworkPolicy, got %v", k)
				}
			case "external-secrets-values":
				if k["Secret"] != 0 || k["ServiceAccount"] != 0 {
					t.Errorf("existing secrets and service account: want none rendered, got %v", k)
				}
			case "redis-cluster-values":
				checkRedisClusterValues(t, objs)
			case "default":
				if k["Secret"] != 2 || k["NetworkPolicy"] != 5 || k["PodDisruptionBudget"] != 5 || k["Ingress"] != 0 {
					t.Errorf("want 2 Secrets (connections, gateway keys), 5 NetworkPolicies, 5 PodDisruptionBudgets and no Ingress, got %v", k)
				}
			}
		})
	}
}

// The schema lists every setting the chart does not own, with the JSON type of its Go field,
// and rejects any other key: a setting added to the binary, renamed or retyped shows up here.
func TestSchemaConfigMatchesSettings(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join(chartDir, "values.schema.json"))
	if err != nil {
		t.Fatal(err)
	}
	var schema struct {
		Properties struct {
			Config struct {
				AdditionalProperties *bool `json:"additionalProperties"`
				Properties           map[string]struct {
					Type string `json:"type"`
				} `json:"properties"`
			} `json:"config"`
		} `json:"properties"`
	}
	if err := json.Unmarshal(raw, &schema); err != nil {
		t.Fatal(err)
	}
	cfg := schema.Properties.Config
	if cfg.AdditionalProperties == nil || *cfg.AdditionalProperties {
		t.Error("config: additionalProperties must be false")
	}
	// Set by the chart itself (REDIS_CLUSTER_ADDRS from redis.cluster.addrs), or secrets that
	// travel only in the Secret's URLs (never in the ConfigMap).
	// The gateway's address, keys file and spool directory are set by the chart on the gateway's
	// pods (the port, the mounted keys Secret, the spool emptyDir).
	owned := []string{"BULKACTION_NATS_URL", "BULKACTION_REDIS_URL", "BULKACTION_REDIS_CLUSTER_ADDRS", "BULKACTION_HTTP_ADDR",
		"BULKACTION_REDIS_PASSWORD", "BULKACTION_NATS_PASSWORD", "BULKACTION_NATS_TOKEN",
		"BULKACTION_GATEWAY_ADDR", "BULKACTION_GATEWAY_KEYS_FILE", "BULKACTION_GATEWAY_SPOOL_DIR"}
	for name, s := range Settings() {
		p, ok := cfg.Properties[name]
		if slices.Contains(owned, name) {
			if ok {
				t.Errorf("config.%s: set by the chart itself or a secret, must not be in the schema", name)
			}
			continue
		}
		if !ok {
			t.Errorf("config.%s: a setting missing from values.schema.json", name)
			continue
		}
		want := map[reflect.Kind]string{reflect.Int: "integer", reflect.Bool: "boolean", reflect.Float64: "number"}[s.Kind]
		if want == "" || s.Duration {
			want = "string"
		}
		if p.Type != want {
			t.Errorf("config.%s: schema type %s, want %s", name, p.Type, want)
		}
	}
	for name := range cfg.Properties {
		if _, ok := Settings()[name]; !ok {
			t.Errorf("config.%s: in values.schema.json but not a setting", name)
		}
	}
}

// Every object of the schema is closed: additionalProperties is false, or a schema for the
// values of a free map (labels, annotations, extra env).
func TestSchemaIsClosed(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join(chartDir, "values.schema.json"))
	if err != nil {
		t.Fatal(err)
	}
	var schema any
	if err := json.Unmarshal(raw, &schema); err != nil {
		t.Fatal(err)
	}
	var walk func(path string, v any)
	walk = func(path string, v any) {
		switch v := v.(type) {
		case map[string]any:
			if v["type"] == "object" {
				ap, ok := v["additionalProperties"]
				if !ok {
					t.Errorf("%s: object without additionalProperties", path)
				} else if b, isBool := ap.(bool); isBool && b {
					t.Errorf("%s: additionalProperties: true", path)
				}
			}
			for k, c := range v {
				walk(path+"/"+k, c)
			}
		case []any:
			for i, c := range v {
				walk(path+"/"+strings.Repeat("", i), c)
			}
		}
	}
	walk("#", schema)
}

// checkEveryTarget asserts that every target runs in a Deployment of its own whose container's
// first argument is the target.
func checkEveryTarget(t *testing.T, objs []Object) {
	t.Helper()
	got := map[string]int{}
	for _, o := range objs {
		if d, ok := o.Obj.(*appsv1.Deployment); ok {
			for _, c := range d.Spec.Template.Spec.Containers {
				if len(c.Args) > 0 {
					got[c.Args[0]]++
				}
			}
		}
	}
	for _, target := range ServiceTargets {
		if got[target] != 1 {
			t.Errorf("target %s: %d Deployments, want 1", target, got[target])
		}
	}
}

// checkGatewayIngress asserts what ci/gateway-values.yaml asks of the Ingress: its class, host and
// TLS Secret, and a backend on the gateway's API Service port, which targets the container's
// API port named in BULKACTION_GATEWAY_ADDR (9000 there).
func checkGatewayIngress(t *testing.T, objs []Object) {
	t.Helper()
	var ing *networkingv1.Ingress
	svcs := map[string]*corev1.Service{}
	for _, o := range objs {
		switch v := o.Obj.(type) {
		case *networkingv1.Ingress:
			ing = v
		case *corev1.Service:
			svcs[v.Name] = v
		}
	}
	if ing == nil {
		t.Fatal("no Ingress rendered")
	}
	if ing.Spec.IngressClassName == nil || *ing.Spec.IngressClassName != "nginx" {
		t.Errorf("ingressClassName %v, want nginx", ing.Spec.IngressClassName)
	}
	if len(ing.Spec.TLS) != 1 || ing.Spec.TLS[0].SecretName != "bulkaction-gateway-tls" || !slices.Equal(ing.Spec.TLS[0].Hosts, []string{"bulkaction.example.com"}) {
		t.Errorf("tls %+v, want bulkaction-gateway-tls for bulkaction.example.com", ing.Spec.TLS)
	}
	if len(ing.Spec.Rules) != 1 || ing.Spec.Rules[0].Host != "bulkaction.example.com" || ing.Spec.Rules[0].HTTP == nil {
		t.Fatalf("rules %+v, want one for bulkaction.example.com", ing.Spec.Rules)
	}
	b := ing.Spec.Rules[0].HTTP.Paths[0].Backend.Service
	svc := svcs[b.Name]
	if svc == nil || svc.Spec.PublishNotReadyAddresses {
		t.Fatalf("backend Service %s: not rendered, or publishes not-ready pods", b.Name)
	}
	if len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].Name != b.Port.Name || svc.Spec.Ports[0].Port != 80 || svc.Spec.Ports[0].TargetPort.String() != "http-api" {
		t.Errorf("backend %s:%s: Service ports %+v, want port 80 to http-api", b.Name, b.Port.Name, svc.Spec.Ports)
	}
	if ing.Annotations["nginx.ingress.kubernetes.io/proxy-buffering"] != "off" {
		t.Errorf("annotations %v: the values' annotations are missing", ing.Annotations)
	}
}

// checkRedisClusterValues asserts what ci/redis-cluster-values.yaml asks: every target reads
// BULKACTION_REDIS_CLUSTER_ADDRS (the seed nodes, comma-separated), the prefix and the number of
// shards from the ConfigMap, still takes BULKACTION_REDIS_URL (the credentials) from the Secret, and may reach
// the nodes' client port.
func checkRedisClusterValues(t *testing.T, objs []Object) {
	t.Helper()
	const want = "redis-cluster-0.redis-cluster-headless.redis.svc:6379,redis-cluster-1.redis-cluster-headless.redis.svc:6379,redis-cluster-2.redis-cluster-headless.redis.svc:6379"
	cms := map[string]*corev1.ConfigMap{}
	for _, o := range objs {
		if cm, ok := o.Obj.(*corev1.ConfigMap); ok {
			cms[cm.Name] = cm
		}
	}
	deployments := 0
	for _, o := range objs {
		switch v := o.Obj.(type) {
		case *appsv1.Deployment:
			deployments++
			for _, c := range v.Spec.Template.Spec.Containers {
				env := map[string]string{}
				for _, ef := range c.EnvFrom {
					if ef.ConfigMapRef != nil && cms[ef.ConfigMapRef.Name] != nil {
						maps.Copy(env, cms[ef.ConfigMapRef.Name].Data)
					}
				}
				if got := env["BULKACTION_REDIS_CLUSTER_ADDRS"]; got != want {
					t.Errorf("Deployment %s: BULKACTION_REDIS_CLUSTER_ADDRS=%q, want %q", v.Name, got, want)
				}
				if got := env["BULKACTION_REDIS_PREFIX"]; got != "bulk-action:" {
					t.Errorf("Deployment %s: BULKACTION_REDIS_PREFIX=%q, want bulk-action:", v.Name, got)
				}
				if got := env["BULKACTION_REDIS_SHARDS"]; got != "16" {
					t.Errorf("Deployment %s: BULKACTION_REDIS_SHARDS=%q, want 16", v.Name, got)
				}
				if !slices.ContainsFunc(c.Env, func(e corev1.EnvVar) bool {
					return e.Name == "BULKACTION_REDIS_URL" && e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil
				}) {
					t.Errorf("Deployment %s: BULKACTION_REDIS_URL does not come from a Secret", v.Name)
				}
			}
		case *networkingv1.NetworkPolicy:
			if !slices.ContainsFunc(v.Spec.Egress, func(r networkingv1.NetworkPolicyEgressRule) bool {
				return slices.ContainsFunc(r.Ports, func(p networkingv1.NetworkPolicyPort) bool { return p.Port != nil && p.Port.IntValue() == 6379 })
			}) {
				t.Errorf("NetworkPolicy %s: no egress to the Redis Cluster's client port 6379", v.Name)
			}
		}
	}
	if deployments != 5 {
		t.Errorf("%d Deployments, want 5", deployments)
	}
}
