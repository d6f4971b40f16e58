package demo

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bulkaction/bulkaction/pkg/processor"
	"github.com/bulkaction/bulkaction/pkg/processor/builtin"
)

// TestPartnerBucket: the partner's token bucket holds Burst of the rate in
// force, refills at that rate, and follows the phases from Begin.
func TestPartnerBucket(t *testing.T) {
	c := Capacity{Name: "p", Phases: []Phase{{From: 0, Rps: 50}, {From: time.Second, Rps: 5}, {From: 2 * time.Second, Rps: 100}}, Burst: 100 * time.Millisecond}
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	p := newPartner(c, t0)
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	takes := func(d time.Duration, n int) (ok int) {
		for range n {
			if p.take(at(d)) {
				ok++
			}
		}
		return ok
	}
	// 100 ms of 50/s: 5 calls at once, then one per 20 ms.
	if n := takes(0, 8); n != 5 {
		t.Errorf("at the start: %d of 8 calls accepted, want the bucket's 5", n)
	}
	if n := takes(20*time.Millisecond, 3); n != 1 {
		t.Errorf("20 ms later: %d accepted, want 1", n)
	}
	// Half a second refills the bucket, not beyond it.
	if n := takes(520*time.Millisecond, 10); n != 5 {
		t.Errorf("500 ms later: %d accepted, want the full bucket's 5", n)
	}
	// 5/s from 1 s: a bucket of 0.5 holds 1 call; 200 ms refill one.
	if n := takes(1200*time.Millisecond, 4); n != 1 {
		t.Errorf("in the 5/s phase: %d accepted, want 1", n)
	}
	if n := takes(1300*time.Millisecond, 2); n != 0 {
		t.Errorf("100 ms later at 5/s: %d accepted, want 0", n)
	}
	if n := takes(1500*time.Millisecond, 2); n != 1 {
		t.Errorf("200 ms after the last at 5/s: %d accepted, want 1", n)
	}
	// 100/s from 2 s: a second at that rate fills the bucket of 10.
	if n := takes(3*time.Second, 20); n != 10 {
		t.Errorf("in the 100/s phase: %d accepted, want 10", n)
	}
	acc, thr := p.Calls()
	if acc != 23 || thr != 26 {
		t.Errorf("calls: %d accepted, %d throttled, want 23 and 26", acc, thr)
	}
	// A gap across phases refills at the rate of each.
	if n := c.refill(500*time.Millisecond, 2500*time.Millisecond); n != 25+5+50 {
		t.Errorf("refill from 0.5s to 2.5s: %v, want 80", n)
	}
	// Begin starts the phases again, with a full bucket.
	p.Begin(at(10 * time.Second))
	if n := takes(10*time.Second, 8); n != 5 {
		t.Errorf("after Begin: %d of 8 accepted, want 5 (50/s again)", n)
	}
}

// TestPartnerHTTP: a real server on 127.0.0.1 answers 200 while it has a
// token, then 429 with Retry-After: 1.
func TestPartnerHTTP(t *testing.T) {
	p, err := StartPartner(Capacity{Name: "p", Phases: []Phase{{From: 0, Rps: 0.5}}, Burst: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if !strings.HasPrefix(p.Addr(), "127.0.0.1:") || p.URL() != "http://"+p.Addr()+"/v1/contacts" {
		t.Fatalf("address %q, URL %q", p.Addr(), p.URL())
	}
	var codes []int
	var after string
	for range 3 {
		resp, err := http.Post(p.URL(), "application/json", strings.NewReader(`{"contact":"x"}`))
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		codes = append(codes, resp.StatusCode)
		if resp.StatusCode == http.StatusTooManyRequests {
			after = resp.Header.Get("Retry-After")
		}
	}
	if codes[0] != http.StatusOK || codes[1] != http.StatusTooManyRequests || codes[2] != http.StatusTooManyRequests || after != "1" {
		t.Errorf("answers %v, Retry-After %q; want 200 then 429s with Retry-After 1", codes, after)
	}
	if acc, thr := p.Calls(); acc != 1 || thr != 2 {
		t.Errorf("calls %d accepted, %d throttled", acc, thr)
	}
	if err := p.Close(); err != nil {
		t.Errorf("close: %v", err)
	}
	if _, err := http.Post(p.URL(), "application/json", nil); err == nil {
		t.Error("the partner still answers after Close")
	}
}

func TestCapacity(t *testing.T) {
	w, err := ForScale(ScaleFull)
	if err != nil {
		t.Fatal(err)
	}
	c := w.Partner
	if got := c.String(); got != "60/s, 20/s from 12s, 100/s from 24s" {
		t.Errorf("String = %q", got)
	}
	if c.At(0) != 60 || c.At(12*time.Second-1) != 60 || c.At(12*time.Second) != 20 || c.At(time.Hour) != 100 {
		t.Errorf("At: %v %v %v %v", c.At(0), c.At(12*time.Second-1), c.At(12*time.Second), c.At(time.Hour))
	}
	// 12 calls in the bucket, 720 by 12 s, 240 by 24 s, 528 at 100/s.
	if d := c.timeFor(0, 1500); !near(d, 24+528.0/100) {
		t.Errorf("1500 calls from 0: %s, want 29.28s", d)
	}
	// From 20 s: 4 in the bucket at 20/s, 80 by 24 s, the rest at 100/s.
	if d := c.timeFor(20*time.Second, 100); !near(d, 4+16.0/100) {
		t.Errorf("100 calls from 20s: %s, want 4.16s", d)
	}
	if d := c.timeFor(0, 10); d != 0 {
		t.Errorf("calls the bucket holds: %s, want 0", d)
	}
	for _, bad := range []Capacity{{}, {Phases: []Phase{{From: time.Second, Rps: 1}}}, {Phases: []Phase{{Rps: 0}}},
		{Phases: []Phase{{Rps: 1}, {From: 2 * time.Second, Rps: 2}, {From: time.Second, Rps: 3}}}} {
		if _, err := StartPartner(bad); err == nil {
			t.Errorf("capacity %+v accepted", bad)
		}
	}
}

// TestProcessorsReachThePartnerAlone: with a list of allowed hosts, the
// demo's http processor may call the partner API, and no other loopback
// address: another server on 127.0.0.1 is refused before any request.
func TestProcessorsReachThePartnerAlone(t *testing.T) {
	p, err := StartPartner(Capacity{Name: "p", Phases: []Phase{{From: 0, Rps: 1}}, Burst: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	var hits atomic.Int64
	other := &http.Server{ReadHeaderTimeout: time.Second, Handler: http.HandlerFunc(func(http.ResponseWriter, *http.Request) { hits.Add(1) })}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan struct{})
	go func() { defer close(served); _ = other.Serve(ln) }()
	defer func() { _ = other.Close(); <-served }()

	w, err := ForScale(ScaleSmall)
	if err != nil {
		t.Fatal(err)
	}
	mux := w.Processors(builtin.Options{AllowedHosts: []string{"api.example.com"}}, p)
	call := func(url string) error {
		return mux.Process(context.Background(), &processor.Job{Tenant: "t", GroupID: "g", JobID: "j", Type: builtin.TypeHTTP, Payload: partnerPayload(url)})
	}
	if err := call(p.URL()); err != nil {
		t.Errorf("the partner API: %v", err)
	}
	// Its second call finds the bucket empty: a 429 with its Retry-After.
	if kind, after := processor.Classify(call(p.URL())); kind != processor.OutcomeRateLimited || after != time.Second {
		t.Errorf("past the capacity: %v after %s, want rate limited after 1s", kind, after)
	}
	err = call("http://" + ln.Addr().String() + "/")
	var he *builtin.HostError
	if kind, _ := processor.Classify(err); kind != processor.OutcomeFailed || !errors.As(err, &he) || hits.Load() != 0 {
		t.Errorf("another loopback server: %v (%v), %d requests, want refused", err, kind, hits.Load())
	}
	// The sms type runs like sleep.
	if err := mux.Process(context.Background(), &processor.Job{Type: w.SMSType, Payload: []byte(`{"ms":1}`)}); err != nil {
		t.Errorf("sms: %v", err)
	}
}
