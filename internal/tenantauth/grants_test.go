package tenantauth_test

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/bulkaction/bulkaction/internal/tenantauth"
	"github.com/bulkaction/bulkaction/pkg/contracts"
)

func TestPermissions(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		names          contracts.Names
		tenant         string
		pub, subscribe []string
	}{
		{contracts.Names{}, "acme",
			[]string{
				"bulkaction.submit.acme.>",
				"$JS.API.CONSUMER.CREATE.BULKACTION_EVENTS.*.bulkaction.events.acme.>",
				"$JS.API.CONSUMER.MSG.NEXT.BULKACTION_EVENTS.*",
			},
			[]string{"bulkaction.events.acme.>", "_INBOX_acme.>"}},
		{contracts.Names{Prefix: "corp.bulk"}, "Globex_2-b",
			[]string{
				"corp.bulk.submit.Globex_2-b.>",
				"$JS.API.CONSUMER.CREATE.CORP_BULK_EVENTS.*.corp.bulk.events.Globex_2-b.>",
				"$JS.API.CONSUMER.MSG.NEXT.CORP_BULK_EVENTS.*",
			},
			[]string{"corp.bulk.events.Globex_2-b.>", "_INBOX_Globex_2-b.>"}},
	} {
		p, err := tenantauth.Permissions(tc.names, tc.tenant)
		if err != nil {
			t.Fatalf("Permissions(%+v, %q): %v", tc.names, tc.tenant, err)
		}
		if p.Publish == nil || !slices.Equal(p.Publish.Allow, tc.pub) || p.Publish.Deny != nil {
			t.Errorf("Permissions(%+v, %q).Publish = %+v, want allow %q", tc.names, tc.tenant, p.Publish, tc.pub)
		}
		if p.Subscribe == nil || !slices.Equal(p.Subscribe.Allow, tc.subscribe) || p.Subscribe.Deny != nil {
			t.Errorf("Permissions(%+v, %q).Subscribe = %+v, want allow %q", tc.names, tc.tenant, p.Subscribe, tc.subscribe)
		}
		if p.Response != nil {
			t.Errorf("Permissions(%+v, %q).Response = %+v, want nil", tc.names, tc.tenant, p.Response)
		}
	}
}

func TestPermissionsRejectsInvalidInput(t *testing.T) {
	t.Parallel()
	for _, tenant := range []string{"", "a.b", "a*", ">", "a b", strings.Repeat("x", contracts.MaxTenantLen+1)} {
		if p, err := tenantauth.Permissions(contracts.Names{}, tenant); err == nil {
			t.Errorf("Permissions(tenant %q) = %+v, want an error", tenant, p)
		}
		if _, err := tenantauth.ConfigSnippet(contracts.Names{}, tenant, "u", "p"); err == nil {
			t.Errorf("ConfigSnippet(tenant %q): want an error", tenant)
		}
	}
	for _, prefix := range []string{"a..b", "a.*", "a.>", "a b"} {
		if p, err := tenantauth.Permissions(contracts.Names{Prefix: prefix}, "acme"); err == nil {
			t.Errorf("Permissions(prefix %q) = %+v, want an error", prefix, p)
		}
	}
	for _, bad := range []string{"", `a"b`, `a\b`, "a\nb", "a\x00", "\xff"} {
		if _, err := tenantauth.ConfigSnippet(contracts.Names{}, "acme", bad, "p"); err == nil {
			t.Errorf("ConfigSnippet(user %q): want an error", bad)
		}
		if _, err := tenantauth.ConfigSnippet(contracts.Names{}, "acme", "u", bad); err == nil {
			t.Errorf("ConfigSnippet(password %q): want an error", bad)
		}
	}
}

// without returns p without the allowed subject s.
func without(p *server.Permissions, s string) *server.Permissions {
	drop := func(l []string) []string {
		return slices.DeleteFunc(slices.Clone(l), func(x string) bool { return x == s })
	}
	return &server.Permissions{
		Publish:   &server.SubjectPermission{Allow: drop(p.Publish.Allow)},
		Subscribe: &server.SubjectPermission{Allow: drop(p.Subscribe.Allow)},
	}
}

// TestEveryGrantIsNeeded removes each subject of the template in turn and shows what stops
// working without it.
func TestEveryGrantIsNeeded(t *testing.T) {
	t.Parallel()
	n := contracts.Names{}
	full, err := tenantauth.Permissions(n, "acme")
	if err != nil {
		t.Fatal(err)
	}
	submit := n.SubmitTenant("acme")
	create := "$JS.API.CONSUMER.CREATE." + n.StreamEvents() + ".*." + n.EventsTenant("acme")
	next := "$JS.API.CONSUMER.MSG.NEXT." + n.StreamEvents() + ".*"
	live := n.EventsTenant("acme")
	inbox := tenantauth.InboxPrefix("acme") + ".>"
	if got := append(slices.Clone(full.Publish.Allow), full.Subscribe.Allow...); !slices.Equal(got, []string{submit, create, next, live, inbox}) {
		t.Fatalf("the template grants %q; this test covers %q", got, []string{submit, create, next, live, inbox})
	}
	us := users(t, n)
	for _, s := range []string{submit, create, next, live, inbox} {
		us = append(us, &server.User{Username: "acme-without-" + s, Password: "pw", Permissions: without(full, s)})
	}
	b := startBus(t, n, serverOptions(t, us))
	b.publishEvent(t, acmeG1, eventBody(acmeG1, "RUNNING"))
	as := func(t *testing.T, s string) *client { return b.connect(t, "acme-without-"+s, "pw", "acme") }

	t.Run("submit", func(t *testing.T) {
		c := as(t, submit)
		g := contracts.GroupRef{Tenant: "acme", ID: "no-submit"}
		if _, err := c.js.Publish(testContext(t, refusedWait), n.Submit(g), jobsBody("j1")); err == nil {
			t.Fatal("publish succeeded")
		}
		c.expectViolationOn(t, "Publish", n.Submit(g))
		if got := b.subjectCounts(t, n.StreamSubmit())[n.Submit(g)]; got != 0 {
			t.Fatalf("%d messages stored", got)
		}
	})

	t.Run("inbox", func(t *testing.T) {
		// The message is stored, but the PubAck cannot be received: the client cannot know.
		c := as(t, inbox)
		g := contracts.GroupRef{Tenant: "acme", ID: "no-inbox"}
		if _, err := c.js.Publish(testContext(t, refusedWait), n.Submit(g), jobsBody("j1")); err == nil {
			t.Fatal("publish got a PubAck")
		}
		c.expectViolation(t, "Subscription", func(s string) bool {
			return strings.HasPrefix(s, tenantauth.InboxPrefix("acme")+".")
		}, "the inbox")
		if got := b.subjectCounts(t, n.StreamSubmit())[n.Submit(g)]; got != 1 {
			t.Fatalf("%d messages stored, want 1", got)
		}
	})

	t.Run("consumer create", func(t *testing.T) {
		c := as(t, create)
		if _, err := c.js.OrderedConsumer(testContext(t, refusedWait), n.StreamEvents(),
			jetstream.OrderedConsumerConfig{FilterSubjects: []string{n.EventsTenant("acme")}}); err == nil {
			t.Fatal("consumer created")
		}
		c.expectViolation(t, "Publish", consumerCreate(n.StreamEvents(), n.EventsTenant("acme")), "consumer create")
	})

	t.Run("msg next", func(t *testing.T) {
		c := as(t, next)
		cons, err := c.js.OrderedConsumer(testContext(t, 5*time.Second), n.StreamEvents(),
			jetstream.OrderedConsumerConfig{FilterSubjects: []string{n.EventsTenant("acme")}})
		if err != nil {
			t.Fatalf("consumer create: %v", err)
		}
		it, err := cons.Messages()
		if err != nil {
			t.Fatal(err)
		}
		defer it.Stop()
		if msg, err := it.Next(jetstream.NextMaxWait(refusedWait)); err == nil {
			t.Fatalf("received %s", msg.Subject())
		}
		c.expectViolation(t, "Publish", func(s string) bool {
			return strings.HasPrefix(s, "$JS.API.CONSUMER.MSG.NEXT."+n.StreamEvents()+".")
		}, "pull request")
	})

	t.Run("live events", func(t *testing.T) {
		// Only core subscriptions need it: reading the stream goes through the inbox.
		c := as(t, live)
		if _, err := c.nc.SubscribeSync(n.EventsTenant("acme")); err != nil {
			t.Fatal(err)
		}
		c.expectViolationOn(t, "Subscription", n.EventsTenant("acme"))
		cons, err := c.js.OrderedConsumer(testContext(t, 5*time.Second), n.StreamEvents(),
			jetstream.OrderedConsumerConfig{FilterSubjects: []string{n.Events(acmeG1)}})
		if err != nil {
			t.Fatalf("consumer create: %v", err)
		}
		if msgs := readAll(t, cons); len(msgs) != 1 {
			t.Fatalf("read %d events through the consumer, want 1", len(msgs))
		}
		c.noViolations(t)
	})
}

// TestKnownLimitations pins the two gaps of the template that docs/nats-permissions.md
// describes. If nats-server starts closing one of them, this test fails: update the documentation.
func TestKnownLimitations(t *testing.T) {
	t.Parallel()
	n := contracts.Names{}
	b := newBus(t, n)
	b.publishEvent(t, acmeG1, eventBody(acmeG1, "RUNNING"))
	b.publishEvent(t, globexG1, eventBody(globexG1, "RUNNING"))
	acme := b.tenant(t, "acme")

	// A consumer's deliver subject is not checked against its creator's permissions: acme can
	// have the server deliver its own events to any subject that has a plain subscriber, here
	// another tenant's submit subject, which the SUBMIT stream then stores.
	t.Run("push consumer deliver subject", func(t *testing.T) {
		target := n.Submit(globexG1)
		spy, err := b.svc.SubscribeSync(target)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = spy.Unsubscribe() }()
		if err := b.svc.Flush(); err != nil {
			t.Fatal(err)
		}
		req, _ := json.Marshal(map[string]any{"stream_name": n.StreamEvents(), "config": map[string]any{
			"durable_name": "push", "deliver_subject": target, "filter_subject": n.EventsTenant("acme"),
			"ack_policy": "none", "deliver_policy": "all",
		}})
		resp, err := acme.nc.Request("$JS.API.CONSUMER.CREATE."+n.StreamEvents()+".push."+n.EventsTenant("acme"), req, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		var ae apiError
		if err := json.Unmarshal(resp.Data, &ae); err != nil || ae.Error != nil {
			t.Fatalf("push consumer refused (%s): the limitation is gone, update docs/nats-permissions.md", resp.Data)
		}
		msg, err := spy.NextMsg(5 * time.Second)
		if err != nil {
			t.Fatalf("no delivery to %s (%v): the limitation is gone, update docs/nats-permissions.md", target, err)
		}
		if string(msg.Data) != eventBody(acmeG1, "RUNNING") {
			t.Fatalf("delivered %s, want acme's own event", msg.Data)
		}
		// The SUBMIT stream stores the delivery (under the event's own subject). Only the
		// tenant's own events travel this way, and the fetcher dead-letters them.
		st, err := b.js.Stream(testContext(t, 5*time.Second), n.StreamSubmit())
		if err != nil {
			t.Fatal(err)
		}
		// The stream stores it a moment after the delivery: wait for it.
		var stored *jetstream.RawStreamMsg
		for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			if stored, err = st.GetMsg(testContext(t, 5*time.Second), 1); err == nil || time.Now().After(deadline) {
				break
			}
		}
		if err != nil {
			t.Fatalf("%s holds nothing (%v): the limitation is gone, update docs/nats-permissions.md", n.StreamSubmit(), err)
		}
		t.Logf("%s stored %s %s", n.StreamSubmit(), stored.Subject, stored.Data)
		if string(stored.Data) != eventBody(acmeG1, "RUNNING") {
			t.Fatalf("stored %s, want acme's own event", stored.Data)
		}
		if _, err := contracts.DecodeSubmission(stored.Subject, stored.Data, contracts.Limits{}); err == nil {
			t.Fatal("the stored event decoded as a submission")
		} else {
			t.Logf("the fetcher would reject it: %v", err)
		}
	})

	// Consumer names are one namespace per stream: a tenant that knows the name of a consumer on
	// EVENTS can pull from it, whatever its filter. Ordered consumers have random names, and
	// names cannot be listed (TestTenantCannotReadOtherTenantsEvents).
	t.Run("named consumers on EVENTS", func(t *testing.T) {
		if _, err := b.js.CreateOrUpdateConsumer(testContext(t, 5*time.Second), n.StreamEvents(), jetstream.ConsumerConfig{
			Durable: "dashboard", FilterSubject: n.EventsTenant("globex"), AckPolicy: jetstream.AckNonePolicy,
		}); err != nil {
			t.Fatal(err)
		}
		resp, err := acme.nc.Request("$JS.API.CONSUMER.MSG.NEXT."+n.StreamEvents()+".dashboard", []byte(`{"batch":1,"expires":1000000000}`), 5*time.Second)
		if err != nil {
			t.Fatalf("pull from a named consumer: %v: the limitation is gone, update docs/nats-permissions.md", err)
		}
		if resp.Subject != n.Events(globexG1) {
			t.Fatalf("pulled %q %s: the limitation is gone, update docs/nats-permissions.md", resp.Subject, resp.Data)
		}
		// The create subject also updates an existing consumer of that name, though only to a
		// filter inside the tenant's own events.
		req, _ := json.Marshal(map[string]any{"stream_name": n.StreamEvents(), "config": map[string]any{
			"durable_name": "dashboard", "filter_subject": n.EventsTenant("acme"), "ack_policy": "none",
		}})
		resp, err = acme.nc.Request("$JS.API.CONSUMER.CREATE."+n.StreamEvents()+".dashboard."+n.EventsTenant("acme"), req, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		var ae apiError
		if err := json.Unmarshal(resp.Data, &ae); err != nil || ae.Error != nil {
			t.Fatalf("update refused (%s): the limitation is gone, update docs/nats-permissions.md", resp.Data)
		}
		cons, err := b.js.Consumer(testContext(t, 5*time.Second), n.StreamEvents(), "dashboard")
		if err != nil {
			t.Fatal(err)
		}
		if got := cons.CachedInfo().Config.FilterSubject; got != n.EventsTenant("acme") {
			t.Fatalf("filter after acme's update: %q", got)
		}
	})
}
