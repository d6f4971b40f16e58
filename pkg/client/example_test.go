package client_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/bulkaction/bulkaction/pkg/client"
	"github.com/bulkaction/bulkaction/pkg/contracts"
)

func Example() {
	ctx := context.Background()

	// An embedded JetStream server stands in for the deployment's NATS.
	dir, err := os.MkdirTemp("", "example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	srv, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: dir, NoSigs: true})
	if err != nil {
		log.Fatal(err)
	}
	srv.Start()
	defer func() { srv.Shutdown(); srv.WaitForShutdown() }()
	if !srv.ReadyForConnections(10 * time.Second) {
		log.Fatal("nats not ready")
	}
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		log.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		log.Fatal(err)
	}
	// The services create the streams when they start; here we create the
	// two this example uses, named by contracts.Names.
	names := contracts.Names{}
	for _, sc := range []jetstream.StreamConfig{
		{Name: names.StreamSubmit(), Subjects: []string{names.SubmitAll()}, Duplicates: 2 * time.Minute},
		{Name: names.StreamEvents(), Subjects: []string{names.EventsAll()}},
	} {
		if _, err := js.CreateOrUpdateStream(ctx, sc); err != nil {
			log.Fatal(err)
		}
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
	stream, err := js.Stream(ctx, names.StreamSubmit())
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("messages accepted:", stream.CachedInfo().State.Msgs)

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
