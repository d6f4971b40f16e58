package worker

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/bulkaction/bulkaction/pkg/processor"
)

// TestDestReporterBatches: outcomes are counted per destination between
// reports, with the longest Retry-After, and a take starts afresh.
func TestDestReporterBatches(t *testing.T) {
	r := newDestReporter()
	for range 5 {
		r.add("mail", false, 0)
	}
	r.add("mail", true, 2*time.Second)
	r.add("mail", true, time.Second)
	r.add("sms", true, 0)
	got := map[string]string{}
	for _, o := range r.take() {
		got[o.Destination] = fmt.Sprintf("%d/%d/%s", o.Accepted, o.Throttled, o.RetryAfter)
	}
	if got["mail"] != "5/2/2s" || got["sms"] != "0/1/0s" || len(got) != 2 {
		t.Fatalf("took %v", got)
	}
	if o := r.take(); o != nil {
		t.Fatalf("second take %v, want nothing", o)
	}
}

func TestIsTimeout(t *testing.T) {
	if !isTimeout(fmt.Errorf("builtin: http: %w", context.DeadlineExceeded)) || isTimeout(errors.New("boom")) ||
		isTimeout(nil) || isTimeout(processor.RateLimited(time.Second, errors.New("429"))) {
		t.Fatal("isTimeout misjudges")
	}
}
