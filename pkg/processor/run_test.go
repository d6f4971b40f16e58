package processor_test

import (
	"context"
	"errors"
	"io"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/bulkaction/bulkaction/pkg/processor"
)

func panicky(context.Context, *processor.Job) error {
	panic("processor exploded")
}

func TestRunRecoversPanic(t *testing.T) {
	t.Parallel()
	err := processor.Run(context.Background(), processor.ProcessorFunc(panicky), &processor.Job{Type: "x"})
	var pe *processor.PanicError
	if !errors.As(err, &pe) {
		t.Fatalf("Run = %v (%T), want *PanicError", err, err)
	}
	if pe.Value != "processor exploded" {
		t.Errorf("Value = %v", pe.Value)
	}
	if !strings.Contains(pe.Error(), "processor exploded") {
		t.Errorf("Error() = %q does not include the value", pe.Error())
	}
	if !strings.Contains(string(pe.Stack), "processor_test.panicky") {
		t.Errorf("Stack does not show the panicking function:\n%s", pe.Stack)
	}
	if o, _ := processor.Classify(err); o != processor.OutcomeFailed {
		t.Errorf("Classify = %v, want failed", o)
	}
}

func TestRunPassesThrough(t *testing.T) {
	t.Parallel()
	want := errors.New("plain")
	job := &processor.Job{Type: "x", JobID: "j"}
	got := processor.Run(context.Background(), processor.ProcessorFunc(func(_ context.Context, j *processor.Job) error {
		if j != job {
			t.Error("Run did not pass the job")
		}
		return want
	}), job)
	if got != want {
		t.Fatalf("Run = %v, want %v unchanged", got, want)
	}
	if err := processor.Run(context.Background(), processor.ProcessorFunc(func(context.Context, *processor.Job) error { return nil }), job); err != nil {
		t.Fatalf("Run = %v, want nil", err)
	}
	if err := processor.Run(context.Background(), nil, job); !errors.Is(err, processor.ErrNoProcessor) || !errors.Is(err, processor.ErrSkipRetry) {
		t.Fatalf("Run(nil processor) = %v, want a permanent ErrNoProcessor", err)
	}
}

func TestRunPanicValues(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name  string
		value any
		check func(*processor.PanicError) bool
	}{
		{"error value", io.ErrClosedPipe, func(pe *processor.PanicError) bool { return errors.Is(pe, io.ErrClosedPipe) }},
		{"nil", nil, func(pe *processor.PanicError) bool {
			var pn *runtime.PanicNilError
			return errors.As(pe, &pn)
		}},
		{"runtime error", nil, func(pe *processor.PanicError) bool {
			var re runtime.Error
			return errors.As(pe, &re) && strings.Contains(pe.Error(), "index out of range")
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p := processor.ProcessorFunc(func(context.Context, *processor.Job) error {
				if tt.name == "runtime error" {
					var s []int
					_ = s[3]
				}
				panic(tt.value)
			})
			var pe *processor.PanicError
			if err := processor.Run(context.Background(), p, &processor.Job{}); !errors.As(err, &pe) {
				t.Fatalf("Run = %v, want *PanicError", err)
			}
			if !tt.check(pe) {
				t.Fatalf("PanicError %v (%T) does not carry the value", pe, pe.Value)
			}
		})
	}
}

// TestWorkerSurvivesPanic runs jobs the way the worker does (a pool of goroutines calling Run on a
// Mux) and checks that one panicking job fails while every other job still runs.
func TestWorkerSurvivesPanic(t *testing.T) {
	t.Parallel()
	m := processor.NewMux()
	var mu sync.Mutex
	done := map[string]bool{}
	m.HandleFunc("ok", func(_ context.Context, job *processor.Job) error {
		mu.Lock()
		done[job.JobID] = true
		mu.Unlock()
		return nil
	})
	m.HandleFunc("bad", panicky)

	jobs := make(chan *processor.Job)
	type result struct {
		job *processor.Job
		err error
	}
	results := make(chan result)
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() {
			for job := range jobs {
				results <- result{job, processor.Run(context.Background(), m, job)}
			}
		})
	}
	go func() {
		for _, id := range []string{"1", "2", "3", "4", "5", "6"} {
			typ := "ok"
			if id == "2" || id == "5" {
				typ = "bad"
			}
			jobs <- &processor.Job{Type: typ, JobID: id}
		}
		close(jobs)
		wg.Wait()
		close(results)
	}()
	failed := 0
	for r := range results {
		o, _ := processor.Classify(r.err)
		switch r.job.Type {
		case "bad":
			if o != processor.OutcomeFailed {
				t.Errorf("job %s: outcome %v, want failed", r.job.JobID, o)
			}
			failed++
		case "ok":
			if o != processor.OutcomeSuccess {
				t.Errorf("job %s: outcome %v (%v), want success", r.job.JobID, o, r.err)
			}
		}
	}
	if failed != 2 || len(done) != 4 {
		t.Fatalf("failed = %d, succeeded = %v; want 2 failed and jobs 1 3 4 6 done", failed, done)
	}
}

func TestRecoverMiddleware(t *testing.T) {
	t.Parallel()
	m := processor.NewMux()
	var order []string
	m.Use(processor.Recover(), func(next processor.Processor) processor.Processor {
		return processor.ProcessorFunc(func(ctx context.Context, job *processor.Job) error {
			order = append(order, "inner")
			return next.Process(ctx, job)
		})
	})
	m.HandleFunc("bad", panicky)
	err := m.Process(context.Background(), &processor.Job{Type: "bad"})
	var pe *processor.PanicError
	if !errors.As(err, &pe) || pe.Value != "processor exploded" {
		t.Fatalf("Process = %v, want the recovered panic", err)
	}
	if len(order) != 1 {
		t.Fatalf("inner middleware ran %d times, want 1", len(order))
	}
}

func TestJobHelpers(t *testing.T) {
	t.Parallel()
	job := &processor.Job{Tenant: "acme", GroupID: "g1", JobID: "j1", Type: "t", Payload: []byte(`{"n":7}`)}
	if got := job.IdempotencyKey(); got != "acme:g1:j1" {
		t.Errorf("IdempotencyKey = %q", got)
	}
	var v struct{ N int }
	if err := job.UnmarshalPayload(&v); err != nil || v.N != 7 {
		t.Fatalf("UnmarshalPayload = %v, %+v", err, v)
	}
	job.Payload = []byte(`{"n":"seven"}`)
	err := job.UnmarshalPayload(&v)
	if !errors.Is(err, processor.ErrSkipRetry) {
		t.Fatalf("UnmarshalPayload of a bad payload = %v, want a permanent error", err)
	}
	if !strings.Contains(err.Error(), "acme:g1:j1") {
		t.Errorf("error %q does not name the job", err)
	}
	job.Payload = nil
	v.N = 3
	if err := job.UnmarshalPayload(&v); err != nil || v.N != 3 {
		t.Fatalf("UnmarshalPayload of an empty payload = %v, %+v", err, v)
	}
}
