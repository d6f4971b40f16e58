package server_test

import (
	"context"
	"encoding/json"
	"log"
	"os/signal"
	"syscall"

	"github.com/bulkaction/bulkaction/pkg/processor"
	"github.com/bulkaction/bulkaction/pkg/server"
)

// A worker binary of your own: register processors by job type and run.
// Returned errors decide what happens next: nil succeeds, a plain error is
// retried with backoff, processor.RateLimited retries after the given
// delay, processor.Permanent fails the job at once.
func Example() {
	mux := processor.NewMux()
	mux.HandleFunc("send-email", func(ctx context.Context, job *processor.Job) error {
		var p struct {
			To string `json:"to"`
		}
		if err := json.Unmarshal(job.Payload, &p); err != nil {
			return processor.Permanent(err) // a bad payload will not get better
		}
		// ... call the mail provider with job.IdempotencyKey() ...
		return nil
	})
	mux.Use(processor.Recover())

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := server.RunWorker(ctx, mux); err != nil {
		log.Fatal(err)
	}
}
