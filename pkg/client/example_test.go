package client_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/bulkaction/bulkaction/internal/natsutil"
	"github.com/bulkaction/bulkaction/pkg/client"
	"github.com/bulkaction/bulkaction/pkg/contracts"
)

func Example() {
	ctx := context.Background()

	// An embedded JetStream server stands in for the deployment's NATS.
	srv, err := natsutil.StartEmbedded(natsutil.EmbeddedOptions{Port: -1})
	if err != nil {
		log.Fatal(err)
	}
	defer func() { srv.Shutdown(); srv.WaitForShutdown() }()
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		log.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		log.Fatal(err)
	}
	names := contracts.Names{}
	if err := natsutil.EnsureStreams(ctx, js, names, natsutil.StreamSettings{}); err != nil {
		log.Fatal(err)
	}

	c := client.New(js, client.Options{})
	err = c.Submit(ctx, "promo-42",
		client.Job{ID: "user-1", Type: "email", Payload: json.RawMessage(`{"to":"a@example.com"}`)},
		client.Job{ID: "user-2", Type: "email", Payload: json.RawMessage(`{"to":"b@example.com"}`)},
		client.Job{ID: "user-3", Type: "email", Payload: json.RawMessage(`{"to":"c@example.com"}`), Priority: contracts.PriorityHigh},
	)
	if err != nil {
		log.Fatal(err)
	}
	if err := c.Seal(ctx, "promo-42", 3); err != nil {
		log.Fatal(err)
	}
	stored, err := natsutil.StreamMsgs(ctx, js, names.StreamSubmit())
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("messages accepted:", stored)

	// A job id that is not a subject token is refused before anything is sent.
	err = c.Submit(ctx, "promo-42", client.Job{ID: "user-4", Type: "email"}, client.Job{ID: "user.5", Type: "email"})
	fmt.Println(err)

	// The aggregator publishes the group's state changes; here we play its part.
	done, _ := json.Marshal(contracts.GroupEvent{
		V: contracts.Version, GroupID: "promo-42", State: contracts.StateCompleted,
		Total: 3, Jobs: 3, Succeeded: 3, At: time.Now(),
	})
	if _, err := js.Publish(ctx, names.Events("promo-42"), done); err != nil {
		log.Fatal(err)
	}

	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	ev, err := c.Wait(ctx, "promo-42")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%s: %s, %d of %d succeeded\n", ev.GroupID, ev.State, ev.Succeeded, ev.Total)
	// Output:
	// messages accepted: 4
	// client: submit: jobs[1]: contracts: jobId: contains '.' (must match ^[A-Za-z0-9_-]{1,128}$)
	// promo-42: COMPLETED, 3 of 3 succeeded
}
