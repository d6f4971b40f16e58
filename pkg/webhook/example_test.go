package webhook_test

import (
	"fmt"
	"net/http"
	"time"

	"github.com/bulkaction/bulkaction/pkg/webhook"
)

// A receiver checks a completion callback with its tenant's secret before
// trusting the body.
func ExampleVerify() {
	secret := webhook.NewSecret() // in a receiver: the secret POST /v1/callback-secret answered
	body := []byte(`{"v":2,"tenant":"acme","groupId":"promo","state":"COMPLETED"}`)
	h := http.Header{} // in a receiver: the request's headers
	_ = webhook.SetHeaders(h, []string{secret}, "msg_1", time.Now(), body)

	fmt.Println(webhook.Verify(secret, h, body, time.Now(), 0))
	fmt.Println(webhook.Verify(secret, h, []byte(`{"forged":true}`), time.Now(), 0))
	// Output:
	// <nil>
	// webhook: signature does not verify
}
