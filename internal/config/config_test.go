package config

import (
	"strings"
	"testing"
	"time"
)

func TestDefaults(t *testing.T) {
	c, err := Load()
	if err != nil {
		t.Fatal(err)
	}
	if c.Alpha != 0 || c.GlobalRps != 10000 || c.BaseBackoffMs != 1000 || c.MaxBackoffMs != 120000 ||
		c.WorkerCount != 10 || c.JobTimeoutMs != 30000 || c.MaxRetryCount != 3 || c.ShutdownGracePeriodMs != 30000 ||
		c.AdmissionMode != "paced" || c.JobTTL != 24*time.Hour || c.GroupTTL != 7*24*time.Hour ||
		c.TenantMaxQueuedJobs != 0 || c.TenantMaxActiveGroups != 0 {
		t.Fatalf("defaults %+v", c)
	}
	if c.ReadyQueueMaxSize != 0 || c.ReadyPackJobs != 16 || c.WorkerCount*c.WorkerInstances != 10 {
		t.Fatalf("READY settings: room %d, packs of %d, %d worker slots", c.ReadyQueueMaxSize, c.ReadyPackJobs, c.WorkerCount*c.WorkerInstances)
	}
}

func TestBadValuesNameTheVariable(t *testing.T) {
	cases := map[string]string{
		"BULKACTION_GLOBAL_RPS":               "abc",
		"BULKACTION_WORKER_COUNT":             "0",
		"BULKACTION_ADMISSION_MODE":           "fifo",
		"BULKACTION_MAX_BACKOFF_MS":           "10",
		"BULKACTION_JOB_TTL":                  "soon",
		"BULKACTION_LOG_FORMAT":               "xml",
		"BULKACTION_PACING_BURST_MS":          "5000",
		"BULKACTION_TENANT_MAX_QUEUED_JOBS":   "-1",
		"BULKACTION_TENANT_MAX_ACTIVE_GROUPS": "-5",
	}
	for name, v := range cases {
		t.Run(name, func(t *testing.T) {
			t.Setenv(name, v)
			_, err := Load()
			if err == nil {
				t.Fatalf("%s=%s accepted", name, v)
			}
			short := strings.TrimPrefix(name, "BULKACTION_")
			if !strings.Contains(err.Error(), name) && !strings.Contains(err.Error(), short) {
				t.Fatalf("error does not name %s: %v", name, err)
			}
		})
	}
}

// TestClusterNeedsHashTag: REDIS_CLUSTER_ADDRS is refused with a prefix
// whose keys would spread over slots, naming the prefix and what it needs.
func TestClusterNeedsHashTag(t *testing.T) {
	for prefix, ok := range map[string]bool{"bulk-action:": false, "{}:": false, "}{x:": false, "{bulk-action}:": true, "x:{t}:": true} {
		c, err := Load()
		if err != nil {
			t.Fatal(err)
		}
		c.RedisCluster, c.RedisPrefix = "127.0.0.1:7000, 127.0.0.1:7001", prefix
		err = c.Validate()
		if ok != (err == nil) {
			t.Errorf("prefix %q: %v", prefix, err)
		}
		if err != nil && (!strings.Contains(err.Error(), "REDIS_PREFIX") || !strings.Contains(err.Error(), "hash tag")) {
			t.Errorf("prefix %q: the error %q does not name the setting and the hash tag", prefix, err)
		}
		if got := c.ClusterAddrs(); len(got) != 2 || got[1] != "127.0.0.1:7001" {
			t.Errorf("cluster addrs %q", got)
		}
	}
}
