package processor_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/bulkaction/bulkaction/pkg/processor"
)

// record returns a processor that appends name to *log and returns ret.
func record(mu *sync.Mutex, log *[]string, name string, ret error) processor.Processor {
	return processor.ProcessorFunc(func(_ context.Context, job *processor.Job) error {
		mu.Lock()
		defer mu.Unlock()
		*log = append(*log, name+":"+job.JobID)
		return ret
	})
}

func TestMuxRoutesByType(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var log []string
	errB := errors.New("b failed")
	m := processor.NewMux()
	m.Handle("a", record(&mu, &log, "a", nil))
	m.Handle("b", record(&mu, &log, "b", errB))
	m.HandleFunc("c_C-9", func(context.Context, *processor.Job) error { log = append(log, "c"); return nil })

	ctx := context.Background()
	if err := m.Process(ctx, &processor.Job{Type: "a", JobID: "1"}); err != nil {
		t.Fatalf("a: %v", err)
	}
	if err := m.Process(ctx, &processor.Job{Type: "b", JobID: "2"}); !errors.Is(err, errB) {
		t.Fatalf("b: got %v, want %v returned as is", err, errB)
	}
	if err := m.Process(ctx, &processor.Job{Type: "c_C-9", JobID: "3"}); err != nil {
		t.Fatalf("c: %v", err)
	}
	if want := []string{"a:1", "b:2", "c"}; !slices.Equal(log, want) {
		t.Fatalf("calls = %v, want %v", log, want)
	}
	if got, want := m.Types(), []string{"a", "b", "c_C-9"}; !slices.Equal(got, want) {
		t.Fatalf("Types() = %v, want %v", got, want)
	}
}

func TestMuxUnknownType(t *testing.T) {
	t.Parallel()
	m := processor.NewMux()
	m.HandleFunc("known", func(context.Context, *processor.Job) error { return nil })
	for _, typ := range []string{"unknown", "", "Known", "known.x"} {
		err := m.Process(context.Background(), &processor.Job{Type: typ})
		if !errors.Is(err, processor.ErrNoProcessor) {
			t.Errorf("type %q: got %v, want ErrNoProcessor", typ, err)
		}
		if !errors.Is(err, processor.ErrSkipRetry) {
			t.Errorf("type %q: %v is not permanent", typ, err)
		}
		if !strings.Contains(err.Error(), fmt.Sprintf("%q", typ)) {
			t.Errorf("type %q: error %q does not name the type", typ, err)
		}
		if o, _ := processor.Classify(err); o != processor.OutcomeFailed {
			t.Errorf("type %q: Classify = %v, want failed", typ, o)
		}
	}
	if err := m.Process(context.Background(), nil); !errors.Is(err, processor.ErrSkipRetry) {
		t.Errorf("nil job: got %v, want a permanent error", err)
	}
}

func TestMuxZeroValue(t *testing.T) {
	t.Parallel()
	var m processor.Mux
	if got := m.Types(); len(got) != 0 {
		t.Fatalf("Types() of an empty Mux = %v", got)
	}
	called := false
	m.HandleFunc("x", func(context.Context, *processor.Job) error { called = true; return nil })
	if err := m.Process(context.Background(), &processor.Job{Type: "x"}); err != nil || !called {
		t.Fatalf("Process = %v, called = %v", err, called)
	}
}

func TestMuxHandleAfterProcess(t *testing.T) {
	t.Parallel()
	m := processor.NewMux()
	m.Use(func(next processor.Processor) processor.Processor { return next })
	if err := m.Process(context.Background(), &processor.Job{Type: "late"}); !errors.Is(err, processor.ErrNoProcessor) {
		t.Fatalf("before registration: got %v", err)
	}
	m.HandleFunc("late", func(context.Context, *processor.Job) error { return nil })
	if err := m.Process(context.Background(), &processor.Job{Type: "late"}); err != nil {
		t.Fatalf("after registration: %v", err)
	}
}

// mustPanic runs f and fails unless it panics with a message containing want.
func mustPanic(t *testing.T, want string, f func()) {
	t.Helper()
	defer func() {
		t.Helper()
		r := recover()
		if r == nil {
			t.Errorf("no panic, want one containing %q", want)
			return
		}
		if msg := fmt.Sprint(r); !strings.Contains(msg, want) {
			t.Errorf("panic %q, want one containing %q", msg, want)
		}
	}()
	f()
}

func TestMuxHandlePanics(t *testing.T) {
	t.Parallel()
	ok := processor.ProcessorFunc(func(context.Context, *processor.Job) error { return nil })
	for _, typ := range []string{"", "a.b", "a b", "a:b", "a*", ">", "{a}", "é", strings.Repeat("x", 65)} {
		mustPanic(t, "invalid job type", func() { processor.NewMux().Handle(typ, ok) })
	}
	processor.NewMux().Handle(strings.Repeat("x", 64), ok) // the longest valid name

	mustPanic(t, "nil processor", func() { processor.NewMux().Handle("a", nil) })
	mustPanic(t, "nil ProcessorFunc", func() { processor.NewMux().Handle("a", processor.ProcessorFunc(nil)) })
	mustPanic(t, "nil ProcessorFunc", func() { processor.NewMux().HandleFunc("a", nil) })

	m := processor.NewMux()
	m.Handle("dup", ok)
	mustPanic(t, "multiple registrations", func() { m.Handle("dup", ok) })
	mustPanic(t, "multiple registrations", func() { m.HandleFunc("dup", ok) })
	if got := m.Types(); !slices.Equal(got, []string{"dup"}) {
		t.Fatalf("Types() after rejected duplicates = %v", got)
	}
}

func TestValidType(t *testing.T) {
	t.Parallel()
	for s, want := range map[string]bool{
		"a": true, "email_send-v2": true, "A9": true, strings.Repeat("z", 64): true,
		"": false, "a.b": false, "a b": false, "a/b": false, strings.Repeat("z", 65): false, "ü": false,
	} {
		if got := processor.ValidType(s); got != want {
			t.Errorf("ValidType(%q) = %v, want %v", s, got, want)
		}
	}
}

// tag returns a middleware that logs "name>" before and "<name" after the processor it wraps, and
// counts how many times it was constructed.
func tag(log *[]string, built *int, name string) processor.Middleware {
	return func(next processor.Processor) processor.Processor {
		*built++
		return processor.ProcessorFunc(func(ctx context.Context, job *processor.Job) error {
			*log = append(*log, name+">")
			err := next.Process(ctx, job)
			*log = append(*log, "<"+name)
			return err
		})
	}
}

func TestMuxMiddlewareOrder(t *testing.T) {
	t.Parallel()
	var log []string
	var built int
	m := processor.NewMux()
	m.Use(tag(&log, &built, "a"), tag(&log, &built, "b"))
	m.Use(tag(&log, &built, "c"))
	m.HandleFunc("t", func(context.Context, *processor.Job) error { log = append(log, "handler"); return nil })

	if err := m.Process(context.Background(), &processor.Job{Type: "t"}); err != nil {
		t.Fatal(err)
	}
	want := []string{"a>", "b>", "c>", "handler", "<c", "<b", "<a"}
	if !slices.Equal(log, want) {
		t.Fatalf("order = %v, want %v", log, want)
	}

	// Middlewares also see jobs of unknown types, and are built once.
	log = nil
	if err := m.Process(context.Background(), &processor.Job{Type: "nope"}); !errors.Is(err, processor.ErrNoProcessor) {
		t.Fatalf("unknown type: %v", err)
	}
	if want := []string{"a>", "b>", "c>", "<c", "<b", "<a"}; !slices.Equal(log, want) {
		t.Fatalf("unknown type order = %v, want %v", log, want)
	}
	if built != 3 {
		t.Fatalf("middlewares constructed %d times, want 3", built)
	}

	mustPanic(t, "Use called after", func() { m.Use(tag(&log, &built, "d")) })
	mustPanic(t, "nil middleware", func() { processor.NewMux().Use(nil) })
}

func TestMuxMiddlewareMayCallTypes(t *testing.T) {
	t.Parallel()
	m := processor.NewMux()
	var seen []string
	m.Use(func(next processor.Processor) processor.Processor {
		seen = m.Types() // must not deadlock while the chain is being built
		return next
	})
	m.HandleFunc("x", func(context.Context, *processor.Job) error { return nil })
	if err := m.Process(context.Background(), &processor.Job{Type: "x"}); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(seen, []string{"x"}) {
		t.Fatalf("Types() inside middleware construction = %v", seen)
	}
}

func TestMuxMiddlewareReturningNil(t *testing.T) {
	t.Parallel()
	m := processor.NewMux()
	m.Use(func(processor.Processor) processor.Processor { return nil })
	mustPanic(t, "nil processor", func() { _ = m.Process(context.Background(), &processor.Job{Type: "x"}) })
}

func TestChain(t *testing.T) {
	t.Parallel()
	var log []string
	var built int
	p := processor.Chain(tag(&log, &built, "1"), tag(&log, &built, "2"))(
		processor.ProcessorFunc(func(context.Context, *processor.Job) error { log = append(log, "p"); return nil }))
	if err := p.Process(context.Background(), &processor.Job{}); err != nil {
		t.Fatal(err)
	}
	if want := []string{"1>", "2>", "p", "<2", "<1"}; !slices.Equal(log, want) {
		t.Fatalf("order = %v, want %v", log, want)
	}
	mustPanic(t, "nil middleware", func() { processor.Chain(nil) })
}

func TestMuxConcurrent(t *testing.T) {
	t.Parallel()
	m := processor.NewMux()
	var mu sync.Mutex
	counts := map[string]int{}
	m.Use(processor.Recover())
	for _, typ := range []string{"a", "b", "c"} {
		m.HandleFunc(typ, func(_ context.Context, job *processor.Job) error {
			mu.Lock()
			counts[job.Type]++
			mu.Unlock()
			return nil
		})
	}
	var wg sync.WaitGroup
	for i := range 30 {
		wg.Go(func() {
			typ := string(rune('a' + i%3))
			if err := m.Process(context.Background(), &processor.Job{Type: typ}); err != nil {
				t.Errorf("%s: %v", typ, err)
			}
		})
	}
	wg.Wait()
	if counts["a"] != 10 || counts["b"] != 10 || counts["c"] != 10 {
		t.Fatalf("counts = %v, want 10 each", counts)
	}
}
