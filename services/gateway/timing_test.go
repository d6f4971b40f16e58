package gateway_test

import (
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/bulkaction/bulkaction/internal/testkit"
)

// serverTiming parses a Server-Timing header into stage → milliseconds,
// failing on an item that is not name;dur=<ms>.
func serverTiming(t *testing.T, h string) map[string]float64 {
	t.Helper()
	out := map[string]float64{}
	for item := range strings.SplitSeq(h, ",") {
		name, params, _ := strings.Cut(strings.TrimSpace(item), ";")
		v, ok := strings.CutPrefix(params, "dur=")
		ms, err := strconv.ParseFloat(v, 64)
		if name == "" || !ok || err != nil || ms < 0 {
			t.Fatalf("Server-Timing item %q of %q: want name;dur=<ms>", item, h)
		}
		out[name] = ms
	}
	return out
}

// Every answer carries the time the gateway spent in each stage of the
// request as Server-Timing, a jobs request its every stage, so an operator
// (or a load test) sees where a slow answer waited.
func TestServerTimingNamesEachStage(t *testing.T) {
	t.Parallel()
	s := newServer(t, nil)
	r := s.do("POST", "/v1/groups/timed/jobs?total=3", "acme", strings.NewReader(ndjson("t", 3, `{"ms":1}`)),
		"Content-Type: application/x-ndjson")
	if r.code != http.StatusAccepted {
		t.Fatalf("submit: %d %s", r.code, r.body)
	}
	st := serverTiming(t, r.header.Get("Server-Timing"))
	for _, name := range []string{"auth", "door", "check", "read", "room", "publish", "total"} {
		if _, ok := st[name]; !ok {
			t.Errorf("Server-Timing %q has no stage %s", r.header.Get("Server-Timing"), name)
		}
	}
	var sum float64
	for name, ms := range st {
		if name != "total" {
			sum += ms
		}
	}
	if sum > st["total"]+0.01 {
		t.Errorf("the stages add up to %.3f ms, more than the total %.3f ms", sum, st["total"])
	}

	// the group appears once ingest has taken its jobs from SUBMIT
	testkit.WaitFor(t, "the group ingested", 30*time.Second, func() bool {
		r = s.do("GET", "/v1/groups/timed", "acme", nil)
		if r.code != http.StatusOK && r.code != http.StatusNotFound {
			t.Fatalf("GET: %d %s", r.code, r.body)
		}
		return r.code == http.StatusOK
	})
	st = serverTiming(t, r.header.Get("Server-Timing"))
	for _, name := range []string{"auth", "door", "total"} {
		if _, ok := st[name]; !ok {
			t.Errorf("GET's Server-Timing %q has no stage %s", r.header.Get("Server-Timing"), name)
		}
	}
	// A request without a valid key gets the header too (its auth stage).
	r = s.do("GET", "/v1/groups/timed", "", nil)
	if st := serverTiming(t, r.header.Get("Server-Timing")); r.code != http.StatusUnauthorized || len(st) != 2 {
		t.Errorf("without a key: %d, Server-Timing %q, want 401 with auth and total", r.code, r.header.Get("Server-Timing"))
	}
}
