// Package gatewayflood floods a gateway the way a hostile or broken tenant
// can with nothing but HTTP: endless uploads of valid jobs, event streams
// held open, and reads of failures and the overview in tight loops. The
// gateway benchmark's isolation run and the chaos suite's gateway row use
// it to check that another tenant is not held back (docs/api.md#limits).
package gatewayflood

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Options shape a flood.
type Options struct {
	// Base is the gateway's base URL (http://host:port).
	Base string
	// Key is the flooding tenant's API key.
	Key string
	// Group is the flooding tenant's group whose events are streamed and
	// whose failures are read; it should exist.
	Group string
	// Uploads is the number of endless uploads at once (each POSTs valid
	// NDJSON jobs with distinct ids until the gateway cuts it off, then
	// starts again).
	Uploads int
	// Streams is the number of event streams the flood tries to hold open.
	Streams int
	// Pollers is the number of failures readers and of overview readers
	// (each), polling without pause.
	Pollers int
}

// Stats count what the flood got; safe for concurrent use.
type Stats struct {
	requests atomic.Int64
	status   [600]atomic.Int64
	errs     atomic.Int64
	sseOpen  atomic.Int64
	ssePeak  atomic.Int64
	uploaded atomic.Int64
}

// Requests is the flood's requests answered.
func (s *Stats) Requests() int64 { return s.requests.Load() }

// Status is the flood's requests answered with code.
func (s *Stats) Status(code int) int64 {
	if code <= 0 || code >= len(s.status) {
		return 0
	}
	return s.status[code].Load()
}

// StreamsPeak is the most event streams the flood held open at once.
func (s *Stats) StreamsPeak() int64 { return s.ssePeak.Load() }

func (s *Stats) count(code int) {
	s.requests.Add(1)
	if code > 0 && code < len(s.status) {
		s.status[code].Add(1)
	}
}

// String summarises the flood.
func (s *Stats) String() string {
	var parts []string
	for code := range s.status {
		if n := s.status[code].Load(); n > 0 {
			parts = append(parts, fmt.Sprintf("%d×%d", n, code))
		}
	}
	return fmt.Sprintf("%d requests answered (%s), %d client errors, at most %d event streams open, %.1f MiB uploaded",
		s.requests.Load(), strings.Join(parts, " "), s.errs.Load(), s.ssePeak.Load(), float64(s.uploaded.Load())/(1<<20))
}

// Start starts the flood; it runs until ctx is done. Wait returns once
// every request of it has ended.
func Start(ctx context.Context, o Options) (s *Stats, wait func()) {
	s = &Stats{}
	var wg sync.WaitGroup
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1024}}
	auth := func(req *http.Request) *http.Request {
		req.Header.Set("Authorization", "Bearer "+o.Key)
		return req
	}
	loop := func(one func() (int, error)) {
		wg.Go(func() {
			for ctx.Err() == nil {
				code, err := one()
				if ctx.Err() != nil {
					return
				}
				if err != nil {
					s.errs.Add(1)
					sleep(ctx, 10*time.Millisecond)
					continue
				}
				s.count(code)
			}
		})
	}
	get := func(url string) func() (int, error) {
		return func() (int, error) {
			req, _ := http.NewRequestWithContext(ctx, "GET", url, nil)
			resp, err := hc.Do(auth(req))
			if err != nil {
				return 0, err
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			return resp.StatusCode, nil
		}
	}
	for range o.Uploads {
		loop(func() (int, error) {
			req, _ := http.NewRequestWithContext(ctx, "POST", o.Base+"/v1/groups/"+o.Group+"-endless/jobs", &endless{sent: &s.uploaded})
			req.Header.Set("Content-Type", "application/x-ndjson")
			resp, err := hc.Do(auth(req))
			if err != nil {
				return 0, err
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			return resp.StatusCode, nil
		})
	}
	for range o.Pollers {
		loop(get(o.Base + "/v1/groups/" + o.Group + "/failures?limit=1000"))
		loop(get(o.Base + "/v1/overview"))
	}
	for range o.Streams {
		loop(func() (int, error) {
			req, _ := http.NewRequestWithContext(ctx, "GET", o.Base+"/v1/groups/"+o.Group+"/events", nil)
			resp, err := hc.Do(auth(req))
			if err != nil {
				return 0, err
			}
			defer resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				_, _ = io.Copy(io.Discard, resp.Body)
				// A flood, but not a busy loop of the flooding client's own CPU.
				sleep(ctx, 50*time.Millisecond)
				return resp.StatusCode, nil
			}
			n := s.sseOpen.Add(1)
			for p := s.ssePeak.Load(); n > p && !s.ssePeak.CompareAndSwap(p, n); p = s.ssePeak.Load() {
			}
			_, _ = io.Copy(io.Discard, resp.Body) // held until the flood or the gateway ends it
			s.sseOpen.Add(-1)
			return resp.StatusCode, nil
		})
	}
	return s, wg.Wait
}

func sleep(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

// endless is a never-ending NDJSON body of valid jobs with distinct ids.
type endless struct {
	n    int
	buf  []byte
	sent *atomic.Int64
}

func (e *endless) Read(p []byte) (int, error) {
	for len(e.buf) < len(p) {
		e.buf = append(e.buf, `{"jobId":"e`...)
		e.buf = strconv.AppendInt(e.buf, int64(e.n), 10)
		e.buf = append(e.buf, `","type":"sleep","payload":{"ms":1}}`+"\n"...)
		e.n++
	}
	n := copy(p, e.buf)
	e.buf = e.buf[:copy(e.buf, e.buf[n:])]
	e.sent.Add(int64(n))
	return n, nil
}
