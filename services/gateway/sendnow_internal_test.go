package gateway

import (
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/bulkaction/bulkaction/internal/deps"
)

// TestSendNowAnswersBeforeHandlerEnds: an answer written whole reaches the
// client, body and all, while its handler still works after it (as the
// door gives back a tenant's slot and a jobs request charges its rates),
// and an unanswered request gets nothing from sendNow.
func TestSendNowAnswersBeforeHandlerEnds(t *testing.T) {
	g := &Gateway{deps: deps.Deps{}.Fill()}
	after := make(chan struct{})
	srv := httptest.NewServer(g.observe("test", func(w http.ResponseWriter, r *http.Request) {
		sendNow(w) // nothing written yet: nothing sent
		if r.URL.Query().Get("problem") != "" {
			writeProblem(w, r, http.StatusTooManyRequests, slugRateLimited, "over")
		} else {
			writeJSON(w, http.StatusAccepted, map[string]int{"accepted": 3})
		}
		sendNow(w)
		<-after // the work after the answer
	}))
	defer srv.Close()
	defer close(after) // before the server's Close, which waits for the handlers
	for _, q := range []string{"", "?problem=1"} {
		got := make(chan string, 1)
		go func() {
			// a connection of its own: the last one's handler still runs
			hc := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
			resp, err := hc.Get(srv.URL + q)
			if err != nil {
				got <- err.Error()
				return
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			got <- resp.Status + " " + string(b)
		}()
		select {
		case s := <-got:
			if s[:3] != "202" && s[:3] != "429" {
				t.Errorf("answer %q", s)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("GET %s: the answer waited for the work after it", q)
		}
	}
}
