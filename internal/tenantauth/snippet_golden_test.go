package tenantauth_test

import (
	"fmt"

	"github.com/bulkaction/bulkaction/internal/tenantauth"
	"github.com/bulkaction/bulkaction/pkg/contracts"
)

func ExampleConfigSnippet() {
	snippet, err := tenantauth.ConfigSnippet(contracts.Names{}, "acme", "tenant-acme", "$NATS_ACME_PASSWORD")
	if err != nil {
		panic(err)
	}
	fmt.Print(snippet)
	// Output:
	// # bulkaction tenant acme: its own submissions and events, nothing else.
	// # The client must use the inbox prefix "_INBOX_acme" (nats.CustomInboxPrefix).
	// {
	//   user: "tenant-acme"
	//   password: $NATS_ACME_PASSWORD
	//   permissions: {
	//     publish: {
	//       allow: [
	//         # its own submissions (a JetStream publish; the PubAck comes back on the inbox)
	//         "bulkaction.submit.acme.>"
	//         # create a consumer on BULKACTION_EVENTS, only with a filter inside its own events
	//         "$JS.API.CONSUMER.CREATE.BULKACTION_EVENTS.*.bulkaction.events.acme.>"
	//         # pull messages from that consumer
	//         "$JS.API.CONSUMER.MSG.NEXT.BULKACTION_EVENTS.*"
	//       ]
	//     }
	//     subscribe: {
	//       allow: [
	//         # its own events, live (core NATS subscription)
	//         "bulkaction.events.acme.>"
	//         # replies: PubAcks, JetStream API responses, pulled messages
	//         "_INBOX_acme.>"
	//       ]
	//     }
	//   }
	// }
}

func ExamplePermissions() {
	p, err := tenantauth.Permissions(contracts.Names{}, "acme")
	if err != nil {
		panic(err)
	}
	fmt.Println("publish:  ", p.Publish.Allow)
	fmt.Println("subscribe:", p.Subscribe.Allow)
	fmt.Println("inbox:    ", tenantauth.InboxPrefix("acme"))
	// Output:
	// publish:   [bulkaction.submit.acme.> $JS.API.CONSUMER.CREATE.BULKACTION_EVENTS.*.bulkaction.events.acme.> $JS.API.CONSUMER.MSG.NEXT.BULKACTION_EVENTS.*]
	// subscribe: [bulkaction.events.acme.> _INBOX_acme.>]
	// inbox:     _INBOX_acme
}
