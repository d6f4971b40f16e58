package processor_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/bulkaction/bulkaction/pkg/processor"
)

func ExampleMux() {
	mux := processor.NewMux()
	mux.Use(processor.Recover())
	mux.HandleFunc("greet", func(_ context.Context, job *processor.Job) error {
		var p struct{ Name string }
		if err := job.UnmarshalPayload(&p); err != nil {
			return err
		}
		fmt.Printf("hello %s (job %s, attempt %d)\n", p.Name, job.IdempotencyKey(), job.Attempt)
		return nil
	})
	mux.HandleFunc("charge", func(context.Context, *processor.Job) error {
		return processor.RateLimited(2*time.Second, errors.New("payment API busy"))
	})
	fmt.Println(mux.Types())

	ctx := context.Background()
	for _, job := range []*processor.Job{
		{Tenant: "acme", GroupID: "g1", JobID: "j1", Type: "greet", Payload: []byte(`{"name":"Ada"}`), Attempt: 1},
		{Tenant: "acme", GroupID: "g1", JobID: "j2", Type: "charge", Attempt: 1},
		{Tenant: "acme", GroupID: "g1", JobID: "j3", Type: "refund", Attempt: 1},
	} {
		err := processor.Run(ctx, mux, job)
		outcome, after := processor.Classify(err)
		fmt.Println(job.Type, outcome, after, err)
	}
	// Output:
	// [charge greet]
	// hello Ada (job acme:g1:j1, attempt 1)
	// greet success 0s <nil>
	// charge rate_limited 2s rate limited (retry after 2s): payment API busy
	// refund failed 0s processor: no processor for job type "refund"
}

func ExampleClassify() {
	errs := []error{
		nil,
		errors.New("connection reset"),
		context.DeadlineExceeded,
		processor.RateLimited(30*time.Second, errors.New("429")),
		processor.Permanent(errors.New("invalid address")),
		fmt.Errorf("unknown template: %w", processor.ErrSkipRetry),
		&processor.PanicError{Value: "nil map"},
	}
	for _, err := range errs {
		outcome, after := processor.Classify(err)
		fmt.Printf("%-13s %-4s %v\n", outcome, after, err)
	}
	// Output:
	// success       0s   <nil>
	// retry         0s   connection reset
	// retry         0s   context deadline exceeded
	// rate_limited  30s  rate limited (retry after 30s): 429
	// failed        0s   invalid address
	// failed        0s   unknown template: processor: skip retry
	// failed        0s   processor panic: nil map
}
