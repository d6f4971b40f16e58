package demo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"
)

// Phase is one stretch of a downstream's capacity: Rps calls per second
// from From (since the start of the demo) until the next phase.
type Phase struct {
	// From is when the phase starts, since the start of the demo.
	From time.Duration
	// Rps is the capacity in calls per second (above 0).
	Rps float64
}

// Capacity is what a downstream accepts over a run: a token bucket
// refilled at the rate of the phase in force, holding at most Burst of
// that rate. The zero value has no phases: it accepts nothing.
type Capacity struct {
	// Name says what the downstream is, e.g. "hooli's partner API".
	Name string
	// Phases are in order of From; the first starts at 0.
	Phases []Phase
	// Burst is how much of its rate the bucket holds: 200 ms at 60/s is 12
	// calls at once.
	Burst time.Duration
}

// validate reports phases out of order, a first phase after 0, or a rate
// that is not above 0.
func (c Capacity) validate() error {
	if len(c.Phases) == 0 || c.Phases[0].From != 0 {
		return errors.New("demo: capacity: the first phase must start at 0")
	}
	for i, p := range c.Phases {
		if p.Rps <= 0 {
			return fmt.Errorf("demo: capacity: phase %d: rate %g/s must be above 0", i+1, p.Rps)
		}
		if i > 0 && p.From <= c.Phases[i-1].From {
			return fmt.Errorf("demo: capacity: phase %d starts at %s, not after the one before", i+1, p.From)
		}
	}
	return nil
}

// At is the capacity in calls per second at d since the start; 0 without
// phases.
func (c Capacity) At(d time.Duration) float64 {
	r := 0.0
	for _, p := range c.Phases {
		if p.From > d {
			break
		}
		r = p.Rps
	}
	return r
}

// phaseEnd is when the phase in force at d ends (0 for the last one).
func (c Capacity) phaseEnd(d time.Duration) time.Duration {
	for _, p := range c.Phases {
		if p.From > d {
			return p.From
		}
	}
	return 0
}

// refill is what the capacity refills from a to b since the start: its
// rate integrated phase by phase.
func (c Capacity) refill(a, b time.Duration) float64 {
	a = max(a, 0)
	n := 0.0
	for a < b {
		end := c.phaseEnd(a)
		if end == 0 || end > b {
			end = b
		}
		n += c.At(a) * (end - a).Seconds()
		a = end
	}
	return n
}

// String is the schedule, e.g. "60/s, 20/s from 12s, 100/s from 24s".
func (c Capacity) String() string {
	parts := make([]string, 0, len(c.Phases))
	for i, p := range c.Phases {
		s := rate(p.Rps) + "/s"
		if i > 0 {
			s += " from " + p.From.String()
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, ", ")
}

// timeFor is the least time from `from` in which the downstream can accept
// n calls: its bucket, full at `from`, then its refill phase by phase.
// It is a lower bound: the bucket holds at most Burst of the rate at
// `from`, and no more than the rate comes in after.
func (c Capacity) timeFor(from time.Duration, n float64) time.Duration {
	n -= c.bucket(from)
	t := from
	for n > 0 {
		r, end := c.At(t), c.phaseEnd(t)
		if r <= 0 {
			return 0 // no capacity: no bound
		}
		if end == 0 || r*(end-t).Seconds() >= n {
			return t - from + seconds(n/r)
		}
		n -= r * (end - t).Seconds()
		t = end
	}
	return t - from
}

// PartnerRetryAfter is the Retry-After the partner API answers a call with
// when its bucket is empty.
const PartnerRetryAfter = time.Second

// partnerLatency is how long the partner API takes to answer a call.
const partnerLatency = 3 * time.Millisecond

// Partner is the demo's partner API: an HTTP server on 127.0.0.1 (a port
// of its own) whose capacity is a token bucket that changes during the run
// (Capacity). A call it has a token for is answered 200; past it, 429 with
// "Retry-After: 1". Start one with StartPartner; Close stops it.
type Partner struct {
	capacity Capacity
	srv      *http.Server
	ln       net.Listener
	served   chan struct{}

	mu                  sync.Mutex
	start               time.Time // phases count from it
	tokens              float64
	last                time.Time
	accepted, throttled int64
}

// StartPartner starts the partner API of capacity c on a free port of
// 127.0.0.1. Its phases count from now until Begin says otherwise.
func StartPartner(c Capacity) (*Partner, error) {
	if err := c.validate(); err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("demo: partner API: %w", err)
	}
	p := newPartner(c, time.Now())
	p.ln = ln
	p.srv = &http.Server{Handler: p, ReadHeaderTimeout: 5 * time.Second}
	p.served = make(chan struct{})
	go func() {
		defer close(p.served)
		_ = p.srv.Serve(ln)
	}()
	return p, nil
}

func newPartner(c Capacity, now time.Time) *Partner {
	p := &Partner{capacity: c}
	p.begin(now)
	return p
}

// Addr is the address the partner API listens on, 127.0.0.1:<port>.
func (p *Partner) Addr() string { return p.ln.Addr().String() }

// URL is the endpoint the demo's jobs call.
func (p *Partner) URL() string { return "http://" + p.Addr() + "/v1/contacts" }

// Capacity is the partner API's capacity over the run.
func (p *Partner) Capacity() Capacity { return p.capacity }

// Begin makes the phases count from start, with a full bucket.
func (p *Partner) Begin(start time.Time) { p.begin(start) }

func (p *Partner) begin(start time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.start, p.last = start, start
	p.tokens = p.capacity.bucket(0)
}

// bucket is the most tokens the bucket holds at d since the start (at
// least 1, so that a low rate still accepts a call).
func (c Capacity) bucket(d time.Duration) float64 {
	return max(1, c.Burst.Seconds()*c.At(d))
}

// take spends a token at now if there is one: since the last call the
// bucket refilled at the rate of each phase in force, up to its size.
func (p *Partner) take(now time.Time) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if now.After(p.last) {
		d := now.Sub(p.start)
		p.tokens = min(p.capacity.bucket(d), p.tokens+p.capacity.refill(p.last.Sub(p.start), d))
		p.last = now
	}
	if p.tokens < 1 {
		p.throttled++
		return false
	}
	p.tokens--
	p.accepted++
	return true
}

// Calls counts the calls accepted and throttled so far.
func (p *Partner) Calls() (accepted, throttled int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.accepted, p.throttled
}

// ServeHTTP answers one call: 200 with a token, else 429 with a
// Retry-After.
func (p *Partner) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, io.LimitReader(r.Body, 1<<20))
	time.Sleep(partnerLatency)
	if !p.take(time.Now()) {
		w.Header().Set("Retry-After", fmt.Sprint(int(PartnerRetryAfter/time.Second)))
		http.Error(w, "rate limit exceeded", http.StatusTooManyRequests)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = io.WriteString(w, `{"ok":true}`)
}

// Close stops the server, closing open connections.
func (p *Partner) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	err := p.srv.Shutdown(ctx)
	if err != nil {
		err = p.srv.Close()
	}
	<-p.served
	return err
}
