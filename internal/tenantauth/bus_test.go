package tenantauth_test

import (
	"encoding/json"
	"errors"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/bulkaction/bulkaction/internal/tenantauth"
	"github.com/bulkaction/bulkaction/pkg/contracts"
)

var (
	acmeG1   = contracts.GroupRef{Tenant: "acme", ID: "g1"}
	acmeG2   = contracts.GroupRef{Tenant: "acme", ID: "g2"}
	globexG1 = contracts.GroupRef{Tenant: "globex", ID: "g1"}
)

// installations are the name sets the tests run with: the default prefix and a custom one with
// two tokens (so the stream names differ too).
var installations = map[string]contracts.Names{
	"default": {},
	"custom":  {Prefix: "corp.bulk"},
}

// newBus starts a server with the service user and the users of acme and globex.
func newBus(t *testing.T, n contracts.Names) *bus {
	t.Helper()
	return startBus(t, n, serverOptions(t, users(t, n, "acme", "globex")))
}

func jobsBody(jobID string) []byte {
	return []byte(`{"v":2,"kind":"jobs","jobs":[{"jobId":"` + jobID + `","type":"noop","payload":{}}]}`)
}

func eventBody(g contracts.GroupRef, state string) string {
	return `{"v":2,"tenant":"` + g.Tenant + `","groupId":"` + g.ID + `","state":"` + state +
		`","total":0,"jobs":0,"succeeded":0,"failed":0,"cancelled":0,"at":"2026-01-01T00:00:00Z"}`
}

func TestTenantPublishesItsOwnSubmissions(t *testing.T) {
	t.Parallel()
	for name, n := range installations {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b := newBus(t, n)
			acme := b.tenant(t, "acme")

			ack, err := acme.js.Publish(testContext(t, 5*time.Second), n.Submit(acmeG1), jobsBody("j1"),
				jetstream.WithMsgID(contracts.SubmitMsgID(acmeG1, "j1")))
			if err != nil {
				t.Fatalf("acme: JetStream publish to %s: %v", n.Submit(acmeG1), err)
			}
			if ack.Stream != n.StreamSubmit() || ack.Sequence != 1 {
				t.Fatalf("PubAck = %+v, want stream %s sequence 1", ack, n.StreamSubmit())
			}
			// Asynchronous publishing (natsutil.PublishAll) replies on the same inbox.
			fut, err := acme.js.PublishAsync(n.Submit(acmeG2), jobsBody("j1"), jetstream.WithMsgID(contracts.SubmitMsgID(acmeG2, "j1")))
			if err != nil {
				t.Fatalf("acme: asynchronous publish to %s: %v", n.Submit(acmeG2), err)
			}
			select {
			case ack := <-fut.Ok():
				if ack.Stream != n.StreamSubmit() || ack.Sequence != 2 {
					t.Fatalf("PubAck = %+v, want stream %s sequence 2", ack, n.StreamSubmit())
				}
			case err := <-fut.Err():
				t.Fatalf("acme: asynchronous publish to %s: %v", n.Submit(acmeG2), err)
			case <-time.After(5 * time.Second):
				t.Fatalf("acme: asynchronous publish to %s: no PubAck", n.Submit(acmeG2))
			}
			if got, want := b.subjectCounts(t, n.StreamSubmit()), map[string]uint64{n.Submit(acmeG1): 1, n.Submit(acmeG2): 1}; !maps.Equal(got, want) {
				t.Fatalf("%s holds %v, want %v", n.StreamSubmit(), got, want)
			}
			st, err := b.js.Stream(testContext(t, 5*time.Second), n.StreamSubmit())
			if err != nil {
				t.Fatal(err)
			}
			msg, err := st.GetLastMsgForSubject(testContext(t, 5*time.Second), n.Submit(acmeG1))
			if err != nil {
				t.Fatal(err)
			}
			if string(msg.Data) != string(jobsBody("j1")) {
				t.Fatalf("stored body %s, want %s", msg.Data, jobsBody("j1"))
			}
			// Nothing beyond the grants was needed: no $JS.API subject, no other inbox.
			acme.noViolations(t)
		})
	}
}

func TestTenantCannotPublishOutsideItsSubmissions(t *testing.T) {
	t.Parallel()
	for name, n := range installations {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b := newBus(t, n)
			acme := b.tenant(t, "acme")

			// A JetStream publish to another tenant's group: the server drops it, so there is
			// no PubAck, and reports the violation.
			_, err := acme.js.Publish(testContext(t, refusedWait), n.Submit(globexG1), jobsBody("j1"),
				jetstream.WithMsgID(contracts.SubmitMsgID(globexG1, "j1")))
			if err == nil {
				t.Fatalf("acme: JetStream publish to %s succeeded", n.Submit(globexG1))
			}
			acme.expectViolationOn(t, "Publish", n.Submit(globexG1))

			// Core NATS publishes, to another tenant's submissions and to every subject that
			// only bulkaction's services may write: forged events, results, ready jobs,
			// dead letters, wake-ups and the JetStream API.
			for _, subject := range []string{
				n.Submit(contracts.GroupRef{Tenant: "globex", ID: "g2"}),
				n.Events(acmeG1),
				n.Events(globexG1),
				n.Result(acmeG1),
				n.Ready("noop"),
				n.DLQ("", ""),
				n.DLQ("acme", contracts.ReasonBadJSON),
				n.Notify("work"),
				"$JS.API.STREAM.PURGE." + n.StreamSubmit(),
				"$JS.API.STREAM.DELETE." + n.StreamEvents(),
				"$JS.API.STREAM.INFO." + n.StreamSubmit(),
				"$JS.API.INFO",
			} {
				if err := acme.nc.Publish(subject, []byte(eventBody(globexG1, "COMPLETED"))); err != nil {
					t.Fatalf("publish %s: %v", subject, err)
				}
				acme.expectViolationOn(t, "Publish", subject)
			}

			for _, stream := range []string{n.StreamSubmit(), n.StreamEvents()} {
				if got := b.subjectCounts(t, stream); len(got) != 0 {
					t.Errorf("%s holds %v after refused publishes, want nothing", stream, got)
				}
			}
			// globex's own publish still works, and is the only submission stored.
			globex := b.tenant(t, "globex")
			if _, err := globex.js.Publish(testContext(t, 5*time.Second), n.Submit(globexG1), jobsBody("j1")); err != nil {
				t.Fatalf("globex: publish to its own group: %v", err)
			}
			if got, want := b.subjectCounts(t, n.StreamSubmit()), map[string]uint64{n.Submit(globexG1): 1}; !maps.Equal(got, want) {
				t.Fatalf("%s holds %v, want %v", n.StreamSubmit(), got, want)
			}
			globex.noViolations(t)
		})
	}
}

// readAll reads messages from cons until none arrives for a short while.
func readAll(t *testing.T, cons jetstream.Consumer) []jetstream.Msg {
	t.Helper()
	it, err := cons.Messages()
	if err != nil {
		t.Fatalf("messages: %v", err)
	}
	defer it.Stop()
	var msgs []jetstream.Msg
	for {
		msg, err := it.Next(jetstream.NextMaxWait(500 * time.Millisecond))
		if err != nil {
			if errors.Is(err, nats.ErrTimeout) || errors.Is(err, jetstream.ErrMsgIteratorClosed) {
				return msgs
			}
			t.Fatalf("next: %v", err)
		}
		msgs = append(msgs, msg)
	}
}

func subjectsOf(msgs []jetstream.Msg) []string {
	s := make([]string, len(msgs))
	for i, m := range msgs {
		s[i] = m.Subject()
	}
	return s
}

func TestTenantReadsItsOwnEvents(t *testing.T) {
	t.Parallel()
	for name, n := range installations {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b := newBus(t, n)
			b.publishEvent(t, acmeG1, eventBody(acmeG1, "RUNNING"))
			b.publishEvent(t, globexG1, eventBody(globexG1, "RUNNING"))
			b.publishEvent(t, acmeG2, eventBody(acmeG2, "CREATED"))
			acme := b.tenant(t, "acme")

			// History of every group of the tenant, with an ordered consumer created by stream
			// name (no stream lookup) and filtered to the tenant's events.
			ctx := testContext(t, 5*time.Second)
			cons, err := acme.js.OrderedConsumer(ctx, n.StreamEvents(), jetstream.OrderedConsumerConfig{
				FilterSubjects: []string{n.EventsTenant("acme")},
				DeliverPolicy:  jetstream.DeliverAllPolicy,
			})
			if err != nil {
				t.Fatalf("acme: ordered consumer on %s filtered to %s: %v", n.StreamEvents(), n.EventsTenant("acme"), err)
			}
			got := subjectsOf(readAll(t, cons))
			if want := []string{n.Events(acmeG1), n.Events(acmeG2)}; strings.Join(got, " ") != strings.Join(want, " ") {
				t.Fatalf("acme read %v, want %v", got, want)
			}

			// One group, as pkg/client's Watch does.
			cons, err = acme.js.OrderedConsumer(ctx, n.StreamEvents(), jetstream.OrderedConsumerConfig{
				FilterSubjects: []string{n.Events(acmeG1)},
				DeliverPolicy:  jetstream.DeliverAllPolicy,
			})
			if err != nil {
				t.Fatalf("acme: ordered consumer filtered to %s: %v", n.Events(acmeG1), err)
			}
			msgs := readAll(t, cons)
			if len(msgs) != 1 || msgs[0].Subject() != n.Events(acmeG1) || string(msgs[0].Data()) != eventBody(acmeG1, "RUNNING") {
				t.Fatalf("acme read %v, want the one event of %s", subjectsOf(msgs), n.Events(acmeG1))
			}

			// Live events with a core subscription.
			sub, err := acme.nc.SubscribeSync(n.EventsTenant("acme"))
			if err != nil {
				t.Fatal(err)
			}
			if err := acme.nc.Flush(); err != nil {
				t.Fatal(err)
			}
			b.publishEvent(t, globexG1, eventBody(globexG1, "COMPLETED"))
			b.publishEvent(t, acmeG1, eventBody(acmeG1, "COMPLETED"))
			msg, err := sub.NextMsg(5 * time.Second)
			if err != nil {
				t.Fatalf("acme: live event: %v", err)
			}
			if msg.Subject != n.Events(acmeG1) || string(msg.Data) != eventBody(acmeG1, "COMPLETED") {
				t.Fatalf("acme received %s %s, want the COMPLETED event of %s", msg.Subject, msg.Data, n.Events(acmeG1))
			}
			if msg, err := sub.NextMsg(200 * time.Millisecond); err == nil {
				t.Fatalf("acme received a second live event %s", msg.Subject)
			}
			// Neither stream nor consumer info, acks or consumer deletes were needed.
			acme.noViolations(t)
		})
	}
}

// apiError is the error of a JetStream API response.
type apiError struct {
	Error *struct {
		Code        int    `json:"code"`
		ErrCode     int    `json:"err_code"`
		Description string `json:"description"`
	} `json:"error"`
}

func TestTenantCannotReadOtherTenantsEvents(t *testing.T) {
	t.Parallel()
	n := contracts.Names{}
	b := newBus(t, n)
	b.publishEvent(t, globexG1, eventBody(globexG1, "RUNNING"))
	acme := b.tenant(t, "acme")

	t.Run("core subscriptions", func(t *testing.T) {
		for _, subject := range []string{
			n.EventsTenant("globex"),
			n.Events(globexG1),
			n.EventsAll(),
			tenantauth.InboxPrefix("globex") + ".>",
			"_INBOX.>",
			">",
		} {
			sub, err := acme.nc.SubscribeSync(subject)
			if err != nil {
				t.Fatalf("subscribe %s: %v", subject, err)
			}
			acme.expectViolationOn(t, "Subscription", subject)
			b.publishEvent(t, globexG1, eventBody(globexG1, "COMPLETED"))
			// With PermissionErrOnSubscribe, the subscription reports the refusal instead of
			// a message.
			if msg, err := sub.NextMsg(200 * time.Millisecond); !errors.Is(err, nats.ErrPermissionViolation) {
				t.Fatalf("subscription to %s: got message %v, error %v; want %v", subject, msg, err, nats.ErrPermissionViolation)
			}
		}
	})

	t.Run("JetStream consumers", func(t *testing.T) {
		for _, tc := range []struct {
			name    string
			filters []string
			subject string // the filter in the create subject; "" for none
		}{
			{"other tenant", []string{n.EventsTenant("globex")}, n.EventsTenant("globex")},
			{"other tenant's group", []string{n.Events(globexG1)}, n.Events(globexG1)},
			{"every tenant", []string{n.EventsAll()}, n.EventsAll()},
			{"no filter", nil, ""},
			{"own and other tenant", []string{n.EventsTenant("acme"), n.EventsTenant("globex")}, ""},
		} {
			t.Run(tc.name, func(t *testing.T) {
				_, err := acme.js.OrderedConsumer(testContext(t, refusedWait), n.StreamEvents(),
					jetstream.OrderedConsumerConfig{FilterSubjects: tc.filters, DeliverPolicy: jetstream.DeliverAllPolicy})
				if err == nil {
					t.Fatalf("acme created a consumer on %s filtered to %v", n.StreamEvents(), tc.filters)
				}
				acme.expectViolation(t, "Publish", consumerCreate(n.StreamEvents(), tc.subject), "consumer create filtered to "+quote(tc.subject))
			})
		}
	})

	// The create subject names acme's filter, which the permissions allow, but the request's
	// body asks for another one: the server checks that they agree.
	t.Run("forged create request", func(t *testing.T) {
		subject := "$JS.API.CONSUMER.CREATE." + n.StreamEvents() + ".sneaky." + n.EventsTenant("acme")
		for _, cfg := range []map[string]any{
			{"name": "sneaky", "filter_subject": n.EventsTenant("globex")},
			{"name": "sneaky", "filter_subject": n.EventsAll()},
			{"name": "sneaky", "filter_subjects": []string{n.EventsTenant("globex")}},
			{"name": "sneaky"},
		} {
			cfg["ack_policy"] = "none"
			cfg["deliver_policy"] = "all"
			req, err := json.Marshal(map[string]any{"stream_name": n.StreamEvents(), "config": cfg})
			if err != nil {
				t.Fatal(err)
			}
			resp, err := acme.nc.Request(subject, req, 5*time.Second)
			if err != nil {
				t.Fatalf("request %s: %v", req, err)
			}
			var ae apiError
			if err := json.Unmarshal(resp.Data, &ae); err != nil || ae.Error == nil {
				t.Fatalf("create request %s: response %s, want an API error", req, resp.Data)
			}
			t.Logf("create request %s refused: %d %s", req, ae.Error.ErrCode, ae.Error.Description)
		}
	})

	t.Run("consumer names are not listable", func(t *testing.T) {
		for _, subject := range []string{
			"$JS.API.CONSUMER.NAMES." + n.StreamEvents(),
			"$JS.API.CONSUMER.LIST." + n.StreamEvents(),
			"$JS.API.STREAM.NAMES",
		} {
			if _, err := acme.nc.Request(subject, nil, refusedWait); err == nil {
				t.Fatalf("request %s answered", subject)
			}
			acme.expectViolationOn(t, "Publish", subject)
		}
	})

	if got := b.consumerCount(t, n.StreamEvents()); got != 0 {
		t.Fatalf("%s has %d consumers, want 0", n.StreamEvents(), got)
	}
}

func TestTenantCannotConsumeSubmissions(t *testing.T) {
	t.Parallel()
	n := contracts.Names{}
	b := newBus(t, n)
	ctx := testContext(t, 5*time.Second)
	// The fetcher's durable consumer, whose name is public (docs/operations.md).
	if _, err := b.js.CreateOrUpdateConsumer(ctx, n.StreamSubmit(), jetstream.ConsumerConfig{
		Durable: "fetcher", AckPolicy: jetstream.AckExplicitPolicy,
	}); err != nil {
		t.Fatal(err)
	}
	globex := b.tenant(t, "globex")
	if _, err := globex.js.Publish(ctx, n.Submit(globexG1), jobsBody("j1")); err != nil {
		t.Fatal(err)
	}
	acme := b.tenant(t, "acme")

	for _, filter := range []string{n.SubmitTenant("acme"), n.SubmitTenant("globex"), n.SubmitAll()} {
		_, err := acme.js.OrderedConsumer(testContext(t, refusedWait), n.StreamSubmit(),
			jetstream.OrderedConsumerConfig{FilterSubjects: []string{filter}})
		if err == nil {
			t.Fatalf("acme created a consumer on %s filtered to %s", n.StreamSubmit(), filter)
		}
		acme.expectViolation(t, "Publish", consumerCreate(n.StreamSubmit(), filter), "consumer create on "+n.StreamSubmit())
	}
	if _, err := acme.js.Consumer(testContext(t, refusedWait), n.StreamSubmit(), "fetcher"); err == nil {
		t.Fatal("acme looked up the fetcher's consumer")
	}
	acme.expectViolationOn(t, "Publish", "$JS.API.CONSUMER.INFO."+n.StreamSubmit()+".fetcher")
	next := "$JS.API.CONSUMER.MSG.NEXT." + n.StreamSubmit() + ".fetcher"
	if _, err := acme.nc.Request(next, []byte(`{"batch":1}`), refusedWait); err == nil {
		t.Fatalf("acme pulled from the fetcher's consumer")
	}
	acme.expectViolationOn(t, "Publish", next)

	if got, want := b.subjectCounts(t, n.StreamSubmit()), map[string]uint64{n.Submit(globexG1): 1}; !maps.Equal(got, want) {
		t.Fatalf("%s holds %v, want %v", n.StreamSubmit(), got, want)
	}
	if got := b.consumerCount(t, n.StreamSubmit()); got != 1 {
		t.Fatalf("%s has %d consumers, want only the fetcher's", n.StreamSubmit(), got)
	}
}
