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

	// A client of the tenant "default": its groups' subjects are
	// bulkaction.submit.default.<groupId> and bulkaction.events.default.<groupId>.
	c := client.New(js, client.Options{})
	err = c.Submit(ctx, "promo-42",
		client.Job{ID: "user-1", Type: "email", Payload: json.RawMessage(`{"to":"a@example.com"}`)},
		client.Job{ID: "user-2", Type: "email", Payload: json.RawMessage(`{"to":"b@example.com"}`)},
		client.Job{ID: "user-3", Type: "sms", Payload: json.RawMessage(`{"to":"+15550100"}`)},
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
	// The three jobs travel in one message, the seal in another.
	fmt.Println("messages accepted:", stream.CachedInfo().State.Msgs)

	// A job id that is not a subject token is refused before anything is sent.
	err = c.Submit(ctx, "promo-42", client.Job{ID: "user-4", Type: "email"}, client.Job{ID: "user.5", Type: "email"})
	fmt.Println(err)

	// The aggregator publishes the group's state changes; here we play its part.
	done, _ := json.Marshal(contracts.GroupEvent{
		V: contracts.Version, Tenant: c.Tenant(), GroupID: "promo-42", State: contracts.StateCompleted,
		Total: 3, Jobs: 3, Succeeded: 3, At: time.Now(),
	})
	if _, err := js.Publish(ctx, names.Events(contracts.Group(c.Tenant(), "promo-42")), done); err != nil {
		log.Fatal(err)
	}

	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	ev, err := c.Wait(ctx, "promo-42")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%s: %s, %d of %d succeeded\n", ev.Ref(), ev.State, ev.Succeeded, ev.Total)
	// Output:
	// messages accepted: 2
	// client: submit: contracts: jobs[1].jobId: contains '.' (must match ^[A-Za-z0-9_-]{1,128}$)
	// default/promo-42: COMPLETED, 3 of 3 succeeded
}

// startNATS starts an embedded JetStream server with the SUBMIT and EVENTS
// streams, standing in for a deployment's NATS whose streams the services
// created. stop shuts it down.
func startNATS() (js jetstream.JetStream, stop func()) {
	dir, err := os.MkdirTemp("", "example")
	if err != nil {
		log.Fatal(err)
	}
	srv, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: dir, NoSigs: true})
	if err != nil {
		log.Fatal(err)
	}
	srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		log.Fatal("nats not ready")
	}
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		log.Fatal(err)
	}
	stop = func() {
		nc.Close()
		srv.Shutdown()
		srv.WaitForShutdown()
		os.RemoveAll(dir)
	}
	if js, err = jetstream.New(nc); err != nil {
		log.Fatal(err)
	}
	names := contracts.Names{}
	for _, sc := range []jetstream.StreamConfig{
		{Name: names.StreamSubmit(), Subjects: []string{names.SubmitAll()}, Duplicates: 2 * time.Minute},
		{Name: names.StreamEvents(), Subjects: []string{names.EventsAll()}},
	} {
		if _, err := js.CreateOrUpdateStream(context.Background(), sc); err != nil {
			log.Fatal(err)
		}
	}
	return js, stop
}

// printSubmissions prints the subject, Nats-Msg-Id and body of every
// message of the SUBMIT stream.
func printSubmissions(js jetstream.JetStream) {
	ctx := context.Background()
	stream, err := js.Stream(ctx, contracts.Names{}.StreamSubmit())
	if err != nil {
		log.Fatal(err)
	}
	state := stream.CachedInfo().State
	for seq := state.FirstSeq; state.Msgs > 0 && seq <= state.LastSeq; seq++ {
		m, err := stream.GetMsg(ctx, seq)
		if err != nil {
			log.Fatal(err)
		}
		id := m.Header.Get(jetstream.MsgIDHeader)
		if id == "" {
			id = "(none)"
		}
		fmt.Printf("%s id=%s %s\n", m.Subject, id, m.Data)
	}
}

func ExampleClient_Submit() {
	js, stop := startNATS()
	defer stop()
	ctx := context.Background()

	// 250 jobs in messages of at most 100 jobs each (Options.BatchSize).
	c := client.New(js, client.Options{BatchSize: 100})
	jobs := make([]client.Job, 250)
	for i := range jobs {
		jobs[i] = client.Job{ID: fmt.Sprintf("user-%d", i), Type: "email", Payload: json.RawMessage(`{"template":"promo"}`)}
	}
	if err := c.Submit(ctx, "promo-42", jobs...); err != nil {
		log.Fatal(err)
	}
	// Repeating the call, e.g. after a *client.SubmitError, is safe: the
	// messages have the same ids, and JetStream stores each once.
	if err := c.Submit(ctx, "promo-42", jobs...); err != nil {
		log.Fatal(err)
	}
	stream, err := js.Stream(ctx, contracts.Names{}.StreamSubmit())
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("messages:", stream.CachedInfo().State.Msgs)
	// Output:
	// messages: 3
}

func ExampleClient_SubmitGroup() {
	js, stop := startNATS()
	defer stop()
	ctx := context.Background()

	c := client.New(js, client.Options{})
	// The settings apply when the message creates the group: served before
	// normal groups, with at most 50 of its jobs admitted at a time.
	settings := contracts.GroupSettings{Priority: contracts.PriorityHigh, MaxInFlight: 50}
	err := c.SubmitGroup(ctx, "alerts-7", settings,
		client.Job{ID: "host-1", Type: "sms"},
		client.Job{ID: "host-2", Type: "sms"},
	)
	if err != nil {
		log.Fatal(err)
	}
	printSubmissions(js)

	// Invalid settings are refused before anything is sent.
	err = c.SubmitGroup(ctx, "alerts-8", contracts.GroupSettings{MaxInFlight: -1}, client.Job{ID: "host-1", Type: "sms"})
	fmt.Println(err)
	// Output:
	// bulkaction.submit.default.alerts-7 id=default:alerts-7:jobs:2:c4e974d9e7eed5d0e1c7a4197f64aa6d {"v":2,"kind":"jobs","jobs":[{"jobId":"host-1","type":"sms"},{"jobId":"host-2","type":"sms"}],"group":{"priority":"high","maxInFlight":50}}
	// client: submit: contracts: group.maxInFlight: -1 out of range (must be within [0, 1000000])
}

func ExampleClient_Pause() {
	js, stop := startNATS()
	defer stop()
	ctx := context.Background()

	c := client.New(js, client.Options{})
	if err := c.Submit(ctx, "promo-42", client.Job{ID: "user-1", Type: "email"}); err != nil {
		log.Fatal(err)
	}
	// Pause and resume carry no Nats-Msg-Id: each one counts, so a pause
	// after a resume is not mistaken for a duplicate of the first pause.
	for _, step := range []func(context.Context, string) error{c.Pause, c.Resume, c.Pause} {
		if err := step(ctx, "promo-42"); err != nil {
			log.Fatal(err)
		}
	}
	printSubmissions(js)
	// Output:
	// bulkaction.submit.default.promo-42 id=default:promo-42:user-1 {"v":2,"kind":"jobs","jobs":[{"jobId":"user-1","type":"email"}]}
	// bulkaction.submit.default.promo-42 id=(none) {"v":2,"kind":"pause"}
	// bulkaction.submit.default.promo-42 id=(none) {"v":2,"kind":"resume"}
	// bulkaction.submit.default.promo-42 id=(none) {"v":2,"kind":"pause"}
}

func ExampleClient_ForTenant() {
	js, stop := startNATS()
	defer stop()
	ctx := context.Background()

	// One connection, two tenants. Each tenant's groups are its own: both
	// may have a group "promo-42", and their messages go to different
	// subjects (a tenant's NATS user may publish only to its own).
	acme := client.New(js, client.Options{Tenant: "acme"})
	globex := acme.ForTenant("globex")
	for _, c := range []*client.Client{acme, globex} {
		if err := c.Submit(ctx, "promo-42", client.Job{ID: "user-1", Type: "email"}); err != nil {
			log.Fatal(err)
		}
		if err := c.Seal(ctx, "promo-42", 1); err != nil {
			log.Fatal(err)
		}
	}
	printSubmissions(js)

	// A tenant that is not a subject token is refused.
	fmt.Println(acme.ForTenant("acme.eu").Cancel(ctx, "promo-42"))
	// Output:
	// bulkaction.submit.acme.promo-42 id=acme:promo-42:user-1 {"v":2,"kind":"jobs","jobs":[{"jobId":"user-1","type":"email"}]}
	// bulkaction.submit.acme.promo-42 id=acme:promo-42:seal:1 {"v":2,"kind":"seal","total":1}
	// bulkaction.submit.globex.promo-42 id=globex:promo-42:user-1 {"v":2,"kind":"jobs","jobs":[{"jobId":"user-1","type":"email"}]}
	// bulkaction.submit.globex.promo-42 id=globex:promo-42:seal:1 {"v":2,"kind":"seal","total":1}
	// client: cancel: contracts: tenant: contains '.' (must match ^[A-Za-z0-9_-]{1,64}$)
}
