package testkit_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/bulkaction/bulkaction/internal/testkit"
)

func TestMain(m *testing.M) { testkit.Main(m) }

// fakeTB records what a helper reports instead of failing the test. Fatal
// and Fatalf panic with errFatal (as t.Fatal stops the goroutine);
// cleanups run only when run is called.
type fakeTB struct {
	testing.TB
	mu       sync.Mutex
	errs     []string
	logs     []string
	cleanups []func()
}

var errFatal = errors.New("fatal")

func (f *fakeTB) Helper() {}

func (f *fakeTB) record(list *[]string, s string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	*list = append(*list, s)
}

func (f *fakeTB) Error(args ...any)                 { f.record(&f.errs, fmt.Sprint(args...)) }
func (f *fakeTB) Errorf(format string, args ...any) { f.record(&f.errs, fmt.Sprintf(format, args...)) }
func (f *fakeTB) Fatal(args ...any)                 { f.Error(args...); panic(errFatal) }
func (f *fakeTB) Fatalf(format string, args ...any) { f.Errorf(format, args...); panic(errFatal) }
func (f *fakeTB) Log(args ...any)                   { f.record(&f.logs, fmt.Sprintln(args...)) }
func (f *fakeTB) Cleanup(fn func())                 { f.cleanups = append(f.cleanups, fn) }

// run runs the cleanups, last registered first.
func (f *fakeTB) run() {
	for i := len(f.cleanups) - 1; i >= 0; i-- {
		f.cleanups[i]()
	}
	f.cleanups = nil
}

func (f *fakeTB) errors() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.errs...)
}

func (f *fakeTB) logged() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.logs...)
}

// fatal calls fn and reports whether it called Fatal or Fatalf.
func fatal(fn func()) (failed bool) {
	defer func() {
		if r := recover(); r != nil {
			if r != errFatal {
				panic(r)
			}
			failed = true
		}
	}()
	fn()
	return false
}

func TestWaitFor(t *testing.T) {
	t.Parallel()
	var n atomic.Int32
	testkit.WaitFor(t, "three polls", time.Second, func() bool { return n.Add(1) == 3 })
	if got := n.Load(); got != 3 {
		t.Fatalf("cond called %d times, want 3", got)
	}
}

func TestWaitForTimesOut(t *testing.T) {
	t.Parallel()
	f := &fakeTB{TB: t}
	start := time.Now()
	if !fatal(func() { testkit.WaitFor(f, "never", 50*time.Millisecond, func() bool { return false }) }) {
		t.Fatal("WaitFor returned on a condition that never holds")
	}
	if elapsed := time.Since(start); elapsed < 50*time.Millisecond {
		t.Errorf("gave up after %s, before the 50ms timeout", elapsed)
	}
	if errs := f.errors(); len(errs) != 1 || !strings.Contains(errs[0], "waiting for never") {
		t.Errorf("errors = %q, want one naming what was waited for", errs)
	}
}

// service is a Run that returns err once it has been cancelled and lag
// has passed.
type service struct {
	lag     time.Duration
	err     error
	started chan struct{}
	done    chan struct{}
}

func newService(lag time.Duration, err error) *service {
	return &service{lag: lag, err: err, started: make(chan struct{}), done: make(chan struct{})}
}

func (s *service) Run(ctx context.Context) error {
	defer close(s.done)
	close(s.started)
	<-ctx.Done()
	time.Sleep(s.lag)
	return s.err
}

func TestStart(t *testing.T) {
	t.Parallel()
	s := newService(0, nil)
	stop := testkit.Start(t, s)
	<-s.started
	select {
	case <-s.done:
		t.Fatal("Run returned before stop")
	default:
	}
	stop()
	select {
	case <-s.done:
	default:
		t.Fatal("stop returned before Run")
	}
	stop() // a second call (and the cleanup's) does nothing
}

func TestStartStopsAtCleanup(t *testing.T) {
	t.Parallel()
	f := &fakeTB{TB: t}
	s := newService(0, nil)
	testkit.Start(f, s)
	<-s.started
	f.run()
	<-s.done
	if errs := f.errors(); len(errs) != 0 {
		t.Errorf("errors = %q, want none", errs)
	}
}

func TestStartWithinReports(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name string
		lag  time.Duration
		err  error
		want string
	}{
		{"error", 0, errors.New("boom"), "Run returned boom after cancel"},
		{"slow", 200 * time.Millisecond, nil, "did not return within 20ms"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := &fakeTB{TB: t}
			s := newService(tt.lag, tt.err)
			testkit.StartWithin(f, s, 20*time.Millisecond)()
			<-s.done
			if errs := f.errors(); len(errs) != 1 || !strings.Contains(errs[0], tt.want) {
				t.Errorf("errors = %q, want one with %q", errs, tt.want)
			}
		})
	}
}

func TestCheckLeaks(t *testing.T) {
	f := &fakeTB{TB: t}
	testkit.CheckLeaks(f)
	release := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		<-release
	}()
	f.run()
	close(release)
	<-done
	if errs := f.errors(); len(errs) != 1 || !strings.Contains(errs[0], "found unexpected goroutines") {
		t.Errorf("errors = %q, want the leaked goroutine reported", errs)
	}

	f = &fakeTB{TB: t}
	testkit.CheckLeaks(f)
	f.run()
	if errs := f.errors(); len(errs) != 0 {
		t.Errorf("errors = %q without a leak, want none", errs)
	}
}

func TestRecordSpans(t *testing.T) {
	t.Parallel()
	tp, rec := testkit.RecordSpans(t)
	_, span := tp.Tracer("testkit").Start(context.Background(), "op")
	span.End()
	if ended := rec.Ended(); len(ended) != 1 || ended[0].Name() != "op" {
		t.Fatalf("ended spans = %v, want op", ended)
	}
}

func TestLogger(t *testing.T) {
	t.Parallel()
	f := &fakeTB{TB: t}
	log := testkit.Logger(f)
	log.Info("not shown")
	log.Warn("shown", slog.Int("n", 1))
	f.run()
	log.Error("after the end")
	logs := f.logged()
	if len(logs) != 1 || !strings.Contains(logs[0], "msg=shown n=1") {
		t.Fatalf("logged %q, want the warning alone", logs)
	}
}

func TestWriterAfterTestEnds(t *testing.T) {
	t.Parallel()
	var w *testkit.Writer
	t.Run("sub", func(t *testing.T) {
		w = testkit.NewWriter(t)
		if _, err := w.Write([]byte("during")); err != nil {
			t.Fatal(err)
		}
	})
	// t.Log of the ended subtest would panic.
	if n, err := w.Write([]byte("after")); n != 5 || err != nil {
		t.Fatalf("Write = %d, %v; want 5, nil", n, err)
	}
}

func TestValue(t *testing.T) {
	t.Parallel()
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: "c"})
	c.Add(3)
	g := prometheus.NewGauge(prometheus.GaugeOpts{Name: "g"})
	g.Set(-2)
	h := prometheus.NewHistogram(prometheus.HistogramOpts{Name: "h"})
	h.Observe(1)
	h.Observe(5)
	s := prometheus.NewSummary(prometheus.SummaryOpts{Name: "s"})
	s.Observe(1)
	for _, tt := range []struct {
		m    prometheus.Metric
		want float64
	}{{c, 3}, {g, -2}, {h, 2}, {s, 1}} {
		if got := testkit.Value(t, tt.m); got != tt.want {
			t.Errorf("Value(%s) = %v, want %v", tt.m.Desc(), got, tt.want)
		}
		if got := testkit.MustValue(tt.m); got != tt.want {
			t.Errorf("MustValue(%s) = %v, want %v", tt.m.Desc(), got, tt.want)
		}
	}
}

func TestValueWithoutValue(t *testing.T) {
	t.Parallel()
	u := prometheus.NewUntypedFunc(prometheus.UntypedOpts{Name: "u"}, func() float64 { return 1 })
	f := &fakeTB{TB: t}
	if !fatal(func() { testkit.Value(f, u) }) {
		t.Error("Value of an untyped metric did not fail")
	}
	defer func() {
		if recover() == nil {
			t.Error("MustValue of an untyped metric did not panic")
		}
	}()
	testkit.MustValue(u)
}

func TestFreePortsAreDistinct(t *testing.T) {
	for range 20 {
		ports := testkit.FreePorts(t, 8)
		seen := map[int]bool{}
		for _, p := range ports {
			if p <= 0 || seen[p] {
				t.Fatalf("FreePorts gave %v: %d repeated or invalid", ports, p)
			}
			seen[p] = true
		}
	}
}
