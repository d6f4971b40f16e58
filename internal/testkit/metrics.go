package testkit

import (
	"fmt"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// Value returns the value of a counter or gauge, or the sample count of a
// histogram (or summary), failing t if m cannot be read.
func Value(t testing.TB, m prometheus.Metric) float64 {
	t.Helper()
	v, err := metricValue(m)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// MustValue is [Value] for callers without a testing.TB: it panics if m
// cannot be read.
func MustValue(m prometheus.Metric) float64 {
	v, err := metricValue(m)
	if err != nil {
		panic(err)
	}
	return v
}

func metricValue(m prometheus.Metric) (float64, error) {
	var pb dto.Metric
	if err := m.Write(&pb); err != nil {
		return 0, err
	}
	switch {
	case pb.Counter != nil:
		return pb.GetCounter().GetValue(), nil
	case pb.Gauge != nil:
		return pb.GetGauge().GetValue(), nil
	case pb.Histogram != nil:
		return float64(pb.GetHistogram().GetSampleCount()), nil
	case pb.Summary != nil:
		return float64(pb.GetSummary().GetSampleCount()), nil
	}
	return 0, fmt.Errorf("testkit: metric %s has no value", m.Desc())
}
