package worker_test

import (
	"context"
	"fmt"
	"log"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"

	"github.com/bulkaction/bulkaction/internal/deps"
	"github.com/bulkaction/bulkaction/pkg/processor"
	"github.com/bulkaction/bulkaction/pkg/redisq"
	"github.com/bulkaction/bulkaction/services/worker"
)

// A worker binary of one's own: the stock worker service running a
// processor for a custom job type. It connects to the same NATS and Redis
// as the rest of the installation, serves only the types its Mux has, and
// stops cleanly on SIGTERM (running jobs get the shutdown grace to finish).
func Example_ownWorker() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	nc, err := nats.Connect(os.Getenv("BULKACTION_NATS_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer func() { _ = nc.Drain() }()
	js, err := jetstream.New(nc)
	if err != nil {
		log.Fatal(err)
	}
	opt, err := redis.ParseURL(os.Getenv("BULKACTION_REDIS_URL"))
	if err != nil {
		log.Fatal(err)
	}
	rdb := redis.NewClient(opt)
	defer rdb.Close()
	q, err := redisq.New(ctx, rdb, redisq.Config{})
	if err != nil {
		log.Fatal(err)
	}

	mux := processor.NewMux()
	mux.HandleFunc("thumbnail", func(ctx context.Context, job *processor.Job) error {
		var p struct {
			ImageURL string `json:"imageUrl"`
			Width    int    `json:"width"`
		}
		if err := job.UnmarshalPayload(&p); err != nil {
			return err // permanent: a retry cannot fix the payload
		}
		if p.Width <= 0 {
			return processor.Permanent(fmt.Errorf("thumbnail: width %d: must be positive", p.Width))
		}
		// Render and store the thumbnail under job.IdempotencyKey(), so that
		// running the job twice overwrites the same object. A 429 from the
		// image service would be: return processor.RateLimited(retryAfter, err)
		return nil
	})

	w, err := worker.New(worker.Config{
		Concurrency: 4,
		JobTimeout:  time.Minute,
		Durable:     "thumbnailer",
	}, mux, deps.Deps{NC: nc, JS: js, Queue: q, Log: slog.Default()})
	if err != nil {
		log.Fatal(err)
	}
	if err := w.Run(ctx); err != nil {
		log.Fatal(err)
	}
}
