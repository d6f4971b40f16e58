package validate

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
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
	vals, err := ReadValues(files...)
	if err != nil {
		return nil, err
	}
	if err := Lint(dir, vals); err != nil {
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
			if k["Deployment"] != 4 || k["Service"] != 4 || k["ConfigMap"] != 1 {
				t.Errorf("want 4 Deployments, 4 Services and 1 ConfigMap, got %v", k)
			}
			switch name {
			case "ha-keda-values":
				if k["ScaledObject"] != 1 || k["ServiceMonitor"] != 4 || k["PodDisruptionBudget"] != 4 || k["HorizontalPodAutoscaler"] != 0 {
					t.Errorf("want 1 ScaledObject, 4 ServiceMonitors and 4 PodDisruptionBudgets, got %v", k)
				}
			case "hpa-values":
				if k["HorizontalPodAutoscaler"] != 1 || k["ScaledObject"] != 0 {
					t.Errorf("want 1 HorizontalPodAutoscaler, got %v", k)
				}
			case "minimal-values":
				if k["PodDisruptionBudget"] != 0 || k["NetworkPolicy"] != 0 {
					t.Errorf("one replica each and no policies: want no PodDisruptionBudget or NetworkPolicy, got %v", k)
				}
			case "external-secrets-values":
				if k["Secret"] != 0 || k["ServiceAccount"] != 0 {
					t.Errorf("existing secrets and service account: want none rendered, got %v", k)
				}
			case "default":
				if k["Secret"] != 1 || k["NetworkPolicy"] != 4 || k["PodDisruptionBudget"] != 4 {
					t.Errorf("want 1 Secret, 4 NetworkPolicies and 4 PodDisruptionBudgets, got %v", k)
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
	// Set by the chart itself, or secrets that travel only in the Secret's
	// URLs (never in the ConfigMap).
	owned := []string{"BULKACTION_NATS_URL", "BULKACTION_REDIS_URL", "BULKACTION_HTTP_ADDR",
		"BULKACTION_REDIS_PASSWORD", "BULKACTION_NATS_PASSWORD", "BULKACTION_NATS_TOKEN"}
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
