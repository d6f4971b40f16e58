package gateway_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/bulkaction/bulkaction/internal/config"
	"github.com/bulkaction/bulkaction/pkg/contracts"
)

// EVENTS is bounded: once it has dropped a group's events, a stream resumed
// from one of them says so and starts from the group's state, and ends
// after it when that state is final, instead of waiting for events that
// will never come.
func TestEventsResumeAfterDroppedEvents(t *testing.T) {
	t.Parallel()
	s := newServer(t, func(c *config.Config) {
		c.MaxMsgSize, c.MaxPayloadBytes, c.StreamEventsMaxBytes = 64<<10, 16<<10, 64<<10
	})
	s.submit("acme", "old", "?total=3", ndjson("o", 3, `{"ms":1}`))
	s.waitState("acme", "old", "COMPLETED")

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	js, names := s.st.Conns.JS, s.st.Conns.Names
	stream, err := js.Stream(ctx, names.StreamEvents())
	if err != nil {
		t.Fatal(err)
	}
	last, err := stream.GetLastMsgForSubject(ctx, names.Events(contracts.Group("acme", "old")))
	if err != nil {
		t.Fatal(err)
	}
	// Another group's events push the old ones out of the stream.
	for stream.CachedInfo().State.FirstSeq <= last.Sequence {
		if _, err := js.Publish(ctx, names.Events(contracts.Group("hooli", "filler")), []byte(strings.Repeat("f", 4000))); err != nil {
			t.Fatal(err)
		}
		if _, err := stream.Info(ctx); err != nil {
			t.Fatal(err)
		}
	}

	req, err := http.NewRequestWithContext(ctx, "GET", s.base+"/v1/groups/old/events", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+s.keys["acme"])
	req.Header.Set("Last-Event-ID", "1")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK || err != nil {
		t.Fatalf("resume from a dropped event: %d, %v (the stream did not end); read %q", resp.StatusCode, err, body)
	}
	got := string(body)
	if !strings.Contains(got, "are no longer kept") || !strings.Contains(got, "event: state") || !strings.Contains(got, `"state":"COMPLETED"`) {
		t.Fatalf("resume from a dropped event:\n%s", got)
	}
}
