package setting_test

import (
	"testing"
	"time"

	"github.com/bulkaction/bulkaction/internal/setting"
)

func TestDefaultSetsOnlyZeroFields(t *testing.T) {
	n, d, s := 0, 5*time.Second, ""
	setting.Default(&n, 3)
	setting.Default(&d, time.Minute)
	setting.Default(&s, "fetcher")
	if n != 3 || d != 5*time.Second || s != "fetcher" {
		t.Fatalf("got %d, %s, %q; want 3 (the default), 5s (kept), \"fetcher\" (the default)", n, d, s)
	}
	n = -1
	setting.Default(&n, 3)
	if n != -1 {
		t.Fatalf("a negative value became %d: only the zero value takes the default", n)
	}
}

func TestCheckReportsTheFirstRuleBroken(t *testing.T) {
	if err := setting.Check("fetcher", setting.NotNegative("MaxIdle", time.Second), setting.AtLeast("BatchSize", 1, 1)); err != nil {
		t.Fatalf("rules that hold: %v", err)
	}
	err := setting.Check("worker",
		setting.AtLeast("Concurrency", 4, 1),
		setting.AtLeast("AckWait", 500*time.Millisecond, time.Second),
		setting.NotNegative("JobTimeout", -time.Second))
	if err == nil || err.Error() != "worker: AckWait 500ms: must be at least 1s" {
		t.Fatalf("err %v, want the AckWait rule's, naming the component, the field, its value and the rule", err)
	}
	err = setting.Check("dispatcher", setting.NotNegative("BatchSize", -2))
	if err == nil || err.Error() != "dispatcher: BatchSize -2: must not be negative" {
		t.Fatalf("err %v", err)
	}
}
