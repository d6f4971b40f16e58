package config

import (
	"strings"
	"testing"
)

// TestLimits checks the limits whose violation used to be silently
// misread: BASE_BACKOFF_MS=0 (the queue read it as its 1s default),
// JOB_TTL/GROUP_TTL under 1s (a Redis EXPIRE of 0 s: kept forever, or
// deleted at once), MAX_MSG_SIZE beyond 64 MiB (cast to the streams'
// int32), and a DUPLICATE_WINDOW shorter than LEASE_MS (a job re-published
// after its lease expired would no longer be deduplicated). Errors name the
// variable and the limit; the values at the limit are accepted.
func TestLimits(t *testing.T) {
	for _, c := range []struct {
		env  map[string]string
		want string // "" = accepted; else the limit the error must state
	}{
		{map[string]string{"BASE_BACKOFF_MS": "0"}, "at least 1"},
		{map[string]string{"BASE_BACKOFF_MS": "1"}, ""},
		{map[string]string{"MAX_BACKOFF_MS": "0", "BASE_BACKOFF_MS": "1"}, "at least 1"},
		{map[string]string{"JOB_TTL": "500ms"}, "at least 1s"},
		{map[string]string{"JOB_TTL": "1s"}, ""},
		{map[string]string{"GROUP_TTL": "999ms"}, "at least 1s"},
		{map[string]string{"GROUP_TTL": "1s"}, ""},
		{map[string]string{"MAX_MSG_SIZE": "2147483648"}, "at most 67108864"},
		{map[string]string{"MAX_MSG_SIZE": "67108865"}, "at most 67108864"},
		{map[string]string{"MAX_MSG_SIZE": "67108864"}, ""},
		{map[string]string{"DUPLICATE_WINDOW": "10s"}, "at least LEASE_MS (30s)"},
		{map[string]string{"DUPLICATE_WINDOW": "30s"}, ""},
		{map[string]string{"DUPLICATE_WINDOW": "1m", "LEASE_MS": "60001"}, "at least LEASE_MS (1m0.001s)"},
		{map[string]string{"TENANT_MAX_QUEUED_JOBS": "-1"}, "at least 0"},
		{map[string]string{"TENANT_MAX_QUEUED_JOBS": "0", "TENANT_MAX_ACTIVE_GROUPS": "0"}, ""},
		{map[string]string{"TENANT_MAX_ACTIVE_GROUPS": "-1"}, "at least 0"},
	} {
		var names []string
		for k, v := range c.env {
			names = append(names, k+"="+v)
		}
		t.Run(strings.Join(names, ","), func(t *testing.T) {
			for k, v := range c.env {
				t.Setenv(Prefix+"_"+k, v)
			}
			_, err := Load()
			switch {
			case c.want == "" && err != nil:
				t.Errorf("rejected: %v", err)
			case c.want != "" && err == nil:
				t.Errorf("accepted")
			case c.want != "":
				var named bool
				for k := range c.env {
					named = named || strings.Contains(err.Error(), Prefix+"_"+k)
				}
				if !named || !strings.Contains(err.Error(), c.want) {
					t.Errorf("%v, want the variable and %q", err, c.want)
				}
			}
		})
	}
}
