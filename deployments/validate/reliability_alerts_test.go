package validate

import (
	"os"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// reliabilityAlerts is the rule file of the reliability alerts (stream limits, repairs, fencing).
const reliabilityAlerts = "../compose/prometheus/reliability-alerts.yml"

// TestReliabilityAlerts checks the reliability rule file the way checkPrometheus checks the rule
// files prometheus.yml loads (strict YAML, only metrics of the system), and that each alert has a
// Prometheus duration, a severity, balanced parentheses and the metrics it is about.
func TestReliabilityAlerts(t *testing.T) {
	if err := checkRuleFile(reliabilityAlerts); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(reliabilityAlerts)
	if err != nil {
		t.Fatal(err)
	}
	var rf struct {
		Groups []struct {
			Rules []struct {
				Alert  string            `json:"alert"`
				Expr   string            `json:"expr"`
				For    string            `json:"for"`
				Labels map[string]string `json:"labels"`
			} `json:"rules"`
		} `json:"groups"`
	}
	if err := yaml.Unmarshal(raw, &rf); err != nil {
		t.Fatal(err)
	}
	exprs := map[string]string{}
	for _, g := range rf.Groups {
		for _, r := range g.Rules {
			exprs[r.Alert] = r.Expr
			if r.For != "" && !promDuration(r.For) {
				t.Errorf("%s: for %q is not a Prometheus duration", r.Alert, r.For)
			}
			if s := r.Labels["severity"]; s != "warning" && s != "critical" && s != "info" {
				t.Errorf("%s: severity %q", r.Alert, s)
			}
			if strings.Count(r.Expr, "(") != strings.Count(r.Expr, ")") || strings.Count(r.Expr, "{") != strings.Count(r.Expr, "}") ||
				strings.Count(r.Expr, "[") != strings.Count(r.Expr, "]") {
				t.Errorf("%s: unbalanced brackets in %q", r.Alert, r.Expr)
			}
		}
	}
	for alert, metrics := range map[string][]string{
		"BulkactionStreamNearlyFull":         {"bulk_action_stream_bytes", "bulk_action_stream_limit_bytes", "> 0.8"},
		"BulkactionStreamFull":               {"bulk_action_stream_bytes", "bulk_action_stream_limit_bytes"},
		"BulkactionStateLostRepaired":        {`bulk_action_groups_repaired_total{reason=~"lease|queue|inflight"}`},
		"BulkactionResultsFenced":            {"bulk_action_results_fenced_total"},
		"BulkactionSubmitReplayIncomplete":   {`bulk_action_submit_replayed_total{outcome="purged"}`},
		"BulkactionSubmitReplayDeadLettered": {`bulk_action_submit_replayed_total{outcome="dead_lettered"}`},
	} {
		e, ok := exprs[alert]
		if !ok {
			t.Errorf("alert %s missing", alert)
			continue
		}
		for _, m := range metrics {
			if !strings.Contains(e, m) {
				t.Errorf("alert %s: expr %q does not use %s", alert, e, m)
			}
		}
	}
}
