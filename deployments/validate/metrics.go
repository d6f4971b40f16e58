package validate

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
)

// telemetryDir holds the sources that define the system's metrics, relative to this module.
const telemetryDir = "../../internal/telemetry"

var (
	defRE    = regexp.MustCompile(`(?:fqName|gauge)\("([a-z_]+)"`)
	metricRE = regexp.MustCompile(`bulk_action_[a-z_]+`)
)

// KnownMetrics returns the names of the system's metrics, read from the sources of
// internal/telemetry (prometheus.BuildFQName(Namespace, "", name) for each name defined there);
// histograms also get their _bucket, _sum and _count series.
func KnownMetrics() (map[string]bool, error) {
	files, err := filepath.Glob(filepath.Join(telemetryDir, "*.go"))
	if err != nil {
		return nil, err
	}
	out := map[string]bool{}
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		for _, m := range defRE.FindAllStringSubmatch(string(b), -1) {
			name := "bulk_action_" + m[1]
			out[name] = true
			for _, s := range []string{"_bucket", "_sum", "_count"} {
				out[name+s] = true
			}
		}
	}
	if len(out) < 20 {
		return nil, fmt.Errorf("found only %d metric names in %s: has the way metrics are defined changed?", len(out), telemetryDir)
	}
	return out, nil
}

// CheckMetricNames returns an error naming every bulk_action_* name in text that is not a metric
// of the system.
func CheckMetricNames(text string) error {
	known, err := KnownMetrics()
	if err != nil {
		return err
	}
	bad := map[string]bool{}
	for _, m := range metricRE.FindAllString(text, -1) {
		if !known[m] {
			bad[m] = true
		}
	}
	if len(bad) == 0 {
		return nil
	}
	names := keys(bad)
	sort.Strings(names)
	return errors.New(strings.Join(names, ", ") + ": not a metric of the system (internal/telemetry)")
}
