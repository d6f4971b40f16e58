package webhook_test

import (
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/bulkaction/bulkaction/pkg/webhook"
)

// Signatures made here verify with the reference Standard Webhooks library,
// each secret's on its own, and Verify accepts what the library signs.
func TestSignMatchesTheReferenceLibrary(t *testing.T) {
	a, b := webhook.NewSecret(), webhook.NewSecret()
	body := []byte(`{"v":2,"state":"COMPLETED"}`)
	now := time.Now()
	h := http.Header{}
	if err := webhook.SetHeaders(h, []string{a, b}, "msg_1", now, body); err != nil {
		t.Fatal(err)
	}
	if n := len(strings.Fields(h.Get(webhook.HeaderSignature))); n != 2 {
		t.Fatalf("%d signatures for two secrets", n)
	}
	for _, s := range []string{a, b} {
		wh, err := standardwebhooks.NewWebhook(s)
		if err != nil {
			t.Fatal(err)
		}
		if err := wh.Verify(body, h); err != nil {
			t.Errorf("reference library: %v", err)
		}
		if err := webhook.Verify(s, h, body, now, 0); err != nil {
			t.Errorf("Verify: %v", err)
		}
		sig, err := wh.Sign("msg_1", now, body)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(h.Get(webhook.HeaderSignature), sig) {
			t.Errorf("the library's signature %q is not among %q", sig, h.Get(webhook.HeaderSignature))
		}
	}
	if err := webhook.Verify(webhook.NewSecret(), h, body, now, 0); !errors.Is(err, webhook.ErrVerify) {
		t.Errorf("another secret: %v, want ErrVerify", err)
	}
	if err := webhook.Verify(a, h, []byte(`{"v":2,"state":"CANCELLED"}`), now, 0); !errors.Is(err, webhook.ErrVerify) {
		t.Errorf("another body: %v, want ErrVerify", err)
	}
	if err := webhook.Verify(a, h, body, now.Add(time.Hour), 0); !errors.Is(err, webhook.ErrVerify) {
		t.Errorf("an hour late: %v, want ErrVerify", err)
	}
}

// A bad secret is refused without being shown.
func TestBadSecretIsNotShown(t *testing.T) {
	for _, s := range []string{"", "whsec_", "hunter2-plain", "whsec_c2hvcnQ=", "whsec_!!!!"} {
		_, err := webhook.Sign([]string{s}, "id", time.Now(), nil)
		if !errors.Is(err, webhook.ErrSecret) {
			t.Errorf("Sign with %q: %v, want ErrSecret", s, err)
		}
		if s != "" && s != "whsec_" && err != nil && strings.Contains(err.Error(), s) {
			t.Errorf("the error shows the secret: %v", err)
		}
	}
}
