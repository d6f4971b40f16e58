package validate

import (
	"path/filepath"
	"regexp"
	"slices"
	"testing"
)

// Metric names and settings written in the deployment files and the operations guide exist.
func TestNamesInDocsAndDeployments(t *testing.T) {
	settingRE := regexp.MustCompile(`BULKACTION_[A-Z0-9_]*[A-Z0-9]`)
	// JetStream streams and the tenants key-value bucket, not settings
	streams := []string{"BULKACTION_SUBMIT", "BULKACTION_READY", "BULKACTION_RESULT", "BULKACTION_EVENTS", "BULKACTION_DLQ", "BULKACTION_TENANTS"}
	var files []string
	for _, g := range []string{"../../docs/operations.md", "../helm/bulkaction/*.yaml", "../helm/bulkaction/templates/*", "../helm/bulkaction/ci/*.yaml", "../compose/*.yaml", "../compose/.env.example", "../compose/prometheus/*.yml"} {
		m, err := filepath.Glob(g)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, m...)
	}
	if !slices.Contains(files, "../../docs/operations.md") {
		t.Fatal("docs/operations.md is missing")
	}
	for _, f := range files {
		text := readFile(t, f)
		if err := CheckMetricNames(text); err != nil {
			t.Errorf("%s: %v", f, err)
		}
		names := slices.DeleteFunc(settingRE.FindAllString(text, -1), func(n string) bool { return slices.Contains(streams, n) })
		if err := CheckNames(f, names); err != nil {
			t.Error(err)
		}
	}
}
