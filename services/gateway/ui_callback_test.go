package gateway_test

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/bulkaction/bulkaction/internal/config"
	"github.com/bulkaction/bulkaction/internal/testkit"
	"github.com/bulkaction/bulkaction/pkg/api"
)

// TestDashboardCallbackState: a group's page shows its completion
// callback's delivery: failed, with the last error and a "Retry callback"
// button, then delivered once the receiver takes it after a retry by hand.
func TestDashboardCallbackState(t *testing.T) {
	var ok atomic.Bool
	rcv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if ok.Load() {
			w.WriteHeader(http.StatusNoContent)
			return
		}
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	defer rcv.Close()
	s := newServer(t, func(c *config.Config) {
		c.HTTPAllowedHosts = []string{"127.0.0.1"}
		c.CallbackRetryFor, c.CallbackFirstRetry = 2*time.Second, 200*time.Millisecond
	})
	if r := s.do("POST", "/v1/callback-secret", "acme", nil); r.code != http.StatusCreated {
		t.Fatalf("callback secret: %d %s", r.code, r.body)
	}
	s.submit("acme", "cb", "?total=2&callbackUrl="+url.QueryEscape(rcv.URL+"/done"), ndjson("j", 2, `{"ms":1}`))
	s.waitState("acme", "cb", "COMPLETED")
	testkit.WaitFor(t, "the callback failed", 30*time.Second, func() bool {
		var v struct {
			Callback *api.Callback `json:"callback"`
		}
		s.do("GET", "/v1/groups/cb", "acme", nil).json(t, &v)
		return v.Callback != nil && v.Callback.State == api.CallbackFailed
	})

	b := newBrowser(t, s)
	b.login("acme")
	b.do("open cb", chromedp.Evaluate[chromedp.Void](`location.hash = '#/group/acme/cb'`))
	b.wait("the failed callback", `document.querySelector('dd[data-state="failed"]') !== null && !document.getElementById('retry-callback').hidden`, 30*time.Second)
	if got := b.js(`return dd('Callback').innerText`); !strings.Contains(got, "failed") || !strings.Contains(got, "503") || !strings.Contains(got, rcv.URL+"/done") {
		t.Errorf("Callback %q: want failed, the last error (HTTP 503) and the URL", got)
	}
	b.screenshot("detail-callback-failed")
	ok.Store(true)
	b.do("retry the callback", chromedp.Click(chromedp.CSS(`#retry-callback`)))
	b.wait("the delivered callback", `document.querySelector('dd[data-state="delivered"]') !== null && document.getElementById('retry-callback').hidden`, 30*time.Second)
	if got := b.js(`return dd('Callback').innerText`); !strings.Contains(got, "delivered") {
		t.Errorf("Callback %q after the retry: want delivered", got)
	}
}
