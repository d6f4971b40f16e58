package gateway_test

import (
	"fmt"
	"io"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bulkaction/bulkaction/internal/config"
)

// jobsBody streams n NDJSON jobs of about size bytes each through a pipe,
// then the line tail (may be ""), without holding the body in memory.
func jobsBody(n, size int, tail string) io.Reader {
	pr, pw := io.Pipe()
	go func() {
		pad := strings.Repeat("x", size)
		for i := 0; i < n; i++ {
			if _, err := fmt.Fprintf(pw, `{"jobId":"big-%d","type":"noop","payload":{"pad":"%s"}}`+"\n", i, pad); err != nil {
				return
			}
		}
		_, _ = io.WriteString(pw, tail)
		_ = pw.Close()
	}()
	return pr
}

// heapPeak samples the heap in use until stop is called and returns the
// highest reading above the one at the start.
func heapPeak() (stop func() uint64) {
	var ms runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms)
	base := ms.HeapInuse
	var peak atomic.Uint64
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(5 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				var m runtime.MemStats
				runtime.ReadMemStats(&m)
				if m.HeapInuse > base && m.HeapInuse-base > peak.Load() {
					peak.Store(m.HeapInuse - base)
				}
			}
		}
	}()
	return func() uint64 {
		close(done)
		wg.Wait()
		return peak.Load()
	}
}

// TestLargeBodyMemoryBounded: a 200 MB NDJSON body whose last line is
// malformed is read whole with the heap growing by a bounded amount (the
// encoded messages go to a temporary file past the memory spool), is
// rejected naming its last line, and publishes nothing.
func TestLargeBodyMemoryBounded(t *testing.T) {
	s := newServer(t, nil) // not parallel: the heap is measured
	const n, size = 2100, 100_000
	stop := heapPeak()
	start := time.Now()
	r := s.do("POST", "/v1/groups/huge/jobs", "acme", jobsBody(n, size, `{"jobId":"last",`+"\n"),
		"Content-Type: application/x-ndjson")
	took := time.Since(start)
	peak := stop()
	t.Logf("%d MB body read in %s; heap peak +%d MB", n*size>>20, took.Round(time.Millisecond), peak>>20)
	if r.code != http.StatusBadRequest {
		t.Fatalf("%d %s", r.code, r.body)
	}
	p := r.problem(t)
	if len(p.Errors) != 1 || p.Errors[0].Line != n+1 {
		t.Errorf("errors %+v, want line %d", p.Errors, n+1)
	}
	if peak > 96<<20 {
		t.Errorf("heap grew by %d MB reading a 200 MB body (bound: 96 MB)", peak>>20)
	}
	if r := s.do("GET", "/v1/groups/huge", "acme", nil); r.code != http.StatusNotFound {
		t.Errorf("the rejected body created its group: %d", r.code)
	}
}

// TestSpooledBodyIsPublishedWhole: a body larger than the memory spool goes
// through the temporary file and every job of it is accepted and run.
func TestSpooledBodyIsPublishedWhole(t *testing.T) {
	t.Parallel()
	s := newServer(t, func(c *config.Config) {})
	s.st.Gateway.SetMemorySpool(64 << 10)
	const n = 3000
	r := s.do("POST", "/v1/groups/spooled/jobs?total=3000", "acme", jobsBody(n, 2000, ""), "Content-Type: application/x-ndjson")
	if r.code != http.StatusAccepted {
		t.Fatalf("%d %s", r.code, r.body)
	}
	v := s.waitState("acme", "spooled", "COMPLETED")
	if v.Succeeded != n {
		t.Errorf("succeeded %d of %d", v.Succeeded, n)
	}
}
