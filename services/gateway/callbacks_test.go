package gateway_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/bulkaction/bulkaction/internal/config"
	"github.com/bulkaction/bulkaction/internal/testkit"
	"github.com/bulkaction/bulkaction/pkg/api"
)

// Through the API: a tenant makes its callback secret (shown once), submits
// a group with a callbackUrl, and its receiver gets the final event signed
// with that secret; the group's reading shows the delivery; a retry of a
// delivered callback is refused.
func TestCallbackThroughTheAPI(t *testing.T) {
	var mu sync.Mutex
	var bodies [][]byte
	var headers []http.Header
	rcv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		bodies, headers = append(bodies, b), append(headers, r.Header.Clone())
		mu.Unlock()
		w.WriteHeader(http.StatusOK)
	}))
	defer rcv.Close()
	s := newServer(t, func(c *config.Config) { c.HTTPAllowedHosts = []string{"127.0.0.1"} })

	r := s.do("GET", "/v1/callback-secret", "acme", nil)
	var sec api.CallbackSecret
	r.json(t, &sec)
	if r.code != http.StatusOK || sec.Configured || sec.Secret != "" {
		t.Fatalf("GET callback-secret before any: %d %+v", r.code, sec)
	}
	r = s.do("POST", "/v1/callback-secret", "acme", nil)
	r.json(t, &sec)
	if r.code != http.StatusCreated || !strings.HasPrefix(sec.Secret, "whsec_") || !sec.Configured || sec.Tenant != "acme" {
		t.Fatalf("POST callback-secret: %d %s", r.code, r.body)
	}
	secret := sec.Secret
	r = s.do("GET", "/v1/callback-secret", "acme", nil)
	if r.code != http.StatusOK || strings.Contains(string(r.body), secret) || strings.Contains(string(r.body), `"secret"`) {
		t.Fatalf("GET callback-secret shows the secret: %d %s", r.code, r.body)
	}
	if r := s.do("POST", "/v1/callback-secret", "*", nil); r.code != http.StatusBadRequest || r.problem(t).Errors[0].Field != "tenant" {
		t.Errorf("admin POST without ?tenant=: %d %s, want 400 naming tenant", r.code, r.body)
	}

	q := "?total=2&callbackUrl=" + url.QueryEscape(rcv.URL+"/done")
	s.submit("acme", "cb", q, ndjson("j", 2, `{"ms":1}`))
	s.waitState("acme", "cb", "COMPLETED")
	var v struct {
		Callback *api.Callback `json:"callback"`
	}
	testkit.WaitFor(t, "callback delivered", 30*time.Second, func() bool {
		r := s.do("GET", "/v1/groups/cb", "acme", nil)
		r.json(t, &v)
		return v.Callback != nil && v.Callback.State == api.CallbackDelivered
	})
	if v.Callback.URL != rcv.URL+"/done" || v.Callback.StatusCode != 200 || v.Callback.DeliveredAt == nil || v.Callback.WebhookID == "" {
		t.Errorf("callback %+v", v.Callback)
	}
	mu.Lock()
	if len(bodies) != 1 {
		t.Fatalf("receiver got %d requests, want 1", len(bodies))
	}
	wh, err := standardwebhooks.NewWebhook(secret)
	if err != nil {
		t.Fatal(err)
	}
	if err := wh.Verify(bodies[0], headers[0]); err != nil {
		t.Errorf("the reference library does not verify the delivery with the secret the API gave: %v", err)
	}
	if !strings.Contains(string(bodies[0]), `"state":"COMPLETED"`) || !strings.Contains(string(bodies[0]), `"succeeded":2`) {
		t.Errorf("delivered %s", bodies[0])
	}
	mu.Unlock()

	r = s.do("POST", "/v1/groups/cb/callback/retry", "acme", nil)
	if r.code != http.StatusConflict || r.problem(t).Status != http.StatusConflict {
		t.Errorf("retry of a delivered callback: %d %s, want 409", r.code, r.body)
	}
	if r := s.do("POST", "/v1/groups/cb/callback/retry", "hooli", nil); r.code != http.StatusNotFound {
		t.Errorf("another tenant's retry: %d, want 404", r.code)
	}
}

// A callbackUrl whose host the outbound rules refuse, when that is known
// without resolving it, is refused at submit with 400 naming the field;
// nothing is submitted.
func TestCallbackURLRefusedAtSubmit(t *testing.T) {
	s := newServer(t, func(c *config.Config) { c.HTTPAllowedHosts = []string{"hooks.example.com"} })
	for name, u := range map[string]string{
		"host not listed":     "https://other.example.com/x",
		"loopback address":    "http://127.0.0.1:9/x",
		"localhost":           "http://localhost:9/x",
		"metadata address":    "http://169.254.169.254/latest",
		"not http":            "ftp://hooks.example.com/x",
		"credentials in it":   "https://user:pw@hooks.example.com/x",
		"relative":            "/hooks",
		"longer than allowed": "https://hooks.example.com/" + strings.Repeat("a", 2100),
	} {
		r := s.do("POST", "/v1/groups/bad/jobs?callbackUrl="+url.QueryEscape(u), "acme",
			strings.NewReader(ndjson("j", 1, `{"ms":1}`)), "Content-Type: application/x-ndjson")
		if r.code != http.StatusBadRequest {
			t.Errorf("%s: %d %s, want 400", name, r.code, r.body)
			continue
		}
		if p := r.problem(t); len(p.Errors) == 0 || p.Errors[0].Field != "callbackUrl" {
			t.Errorf("%s: problem %+v, want the field callbackUrl named", name, p)
		}
	}
	if r := s.do("GET", "/v1/groups/bad", "acme", nil); r.code != http.StatusNotFound {
		t.Errorf("a refused submission created its group: %d %s", r.code, r.body)
	}
	s.submit("acme", "good", "?callbackUrl="+url.QueryEscape("https://hooks.example.com/done"), ndjson("j", 1, `{"ms":1}`))
	testkit.WaitFor(t, "the group", 10*time.Second, func() bool { return s.do("GET", "/v1/groups/good", "acme", nil).code == 200 })
	v := s.group("acme", "good")
	if v.Callback == nil || v.Callback.State != api.CallbackWaiting || v.Callback.URL != "https://hooks.example.com/done" {
		t.Errorf("callback of a running group %+v, want waiting", v.Callback)
	}
}
