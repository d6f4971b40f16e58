package config_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/bulkaction/bulkaction/internal/config"
	"github.com/bulkaction/bulkaction/internal/conns"
)

// TestTypeRateLimits: BULKACTION_TYPE_RATE_LIMITS takes comma-separated
// <type>=<n>/s entries, reaches the queue in jobs per rate-limit window,
// and a bad entry is an error naming the setting and the entry.
func TestTypeRateLimits(t *testing.T) {
	const name = config.Prefix + "_TYPE_RATE_LIMITS"
	for _, c := range []struct {
		value, window string
		want          map[string]int // per window
	}{
		{"", "", nil},
		{"  ", "", nil},
		{"sms=20/s", "", map[string]int{"sms": 20}},
		{"sms=20/s,email=500/s", "", map[string]int{"sms": 20, "email": 500}},
		{" sms = 20/s , email=500/s ", "", map[string]int{"sms": 20, "email": 500}},
		{"send-promotion_v2=1/s", "", map[string]int{"send-promotion_v2": 1}},
		{"sms=20/s,email=500/s", "100", map[string]int{"sms": 2, "email": 50}},
		{"sms=1/s", "60000", map[string]int{"sms": 60}},
	} {
		t.Run(c.value+"@"+c.window, func(t *testing.T) {
			t.Setenv(name, c.value)
			if c.window != "" {
				t.Setenv(config.Prefix+"_RATE_LIMIT_WINDOW_MS", c.window)
			}
			cfg, err := config.Load()
			if err != nil {
				t.Fatal(err)
			}
			got, err := cfg.TypeLimitsPerWindow()
			if err != nil || fmt.Sprint(got) != fmt.Sprint(c.want) {
				t.Fatalf("per window %v %v, want %v", got, err, c.want)
			}
			if q := conns.QueueConfig(cfg); fmt.Sprint(q.TypeLimits) != fmt.Sprint(c.want) {
				t.Fatalf("queue's TypeLimits %v, want %v", q.TypeLimits, c.want)
			}
		})
	}
	for _, c := range []struct {
		value, window string
		entry, want   string // in the error
	}{
		{"sms=0/s", "", `"sms=0/s"`, "from 1 to"},
		{"sms=-3/s", "", `"sms=-3/s"`, "from 1 to"},
		{"sms=2000000/s", "", `"sms=2000000/s"`, "from 1 to 1000000"},
		{"sms=x/s", "", `"sms=x/s"`, "whole number"},
		{"sms=2.5/s", "", `"sms=2.5/s"`, "whole number"},
		{"sms=20", "", `"sms=20"`, "want <n>/s"},
		{"sms=20/m", "", `"sms=20/m"`, "want <n>/s"},
		{"sms", "", `"sms"`, "want <type>=<n>/s"},
		{"=5/s", "", `"=5/s"`, "must match"},
		{"bad type=5/s", "", `"bad type=5/s"`, "must match"},
		{"sms:x=5/s", "", `"sms:x=5/s"`, "must match"},
		{"sms=1/s,email=2/s,sms=3/s", "", `"sms=3/s"`, "limited twice"},
		{"sms=20/s,", "", "empty entry", "<type>=<n>/s"},
		{"sms=25/s", "300", `"sms=25/s"`, "7.5 jobs per RATE_LIMIT_WINDOW_MS (300 ms)"},
	} {
		t.Run(c.value+"@"+c.window, func(t *testing.T) {
			t.Setenv(name, c.value)
			if c.window != "" {
				t.Setenv(config.Prefix+"_RATE_LIMIT_WINDOW_MS", c.window)
			}
			_, err := config.Load()
			if err == nil {
				t.Fatalf("%s=%s accepted", name, c.value)
			}
			for _, s := range []string{name, c.entry, c.want} {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not say %q", err, s)
				}
			}
		})
	}
}
