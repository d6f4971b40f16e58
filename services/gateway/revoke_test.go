package gateway_test

import (
	"context"
	"net/http"
	"testing"
	"time"
)

// TestKeysRevokedKeyClosesItsStreams: an SSE stream opened with a key that
// is then deleted from the keys file is closed within the reload interval;
// another key's stream stays open.
func TestKeysRevokedKeyClosesItsStreams(t *testing.T) {
	t.Parallel()
	s := newServer(t, nil)
	s.submit("hooli", "watched", "", ndjson("w", 3, `{"ms":1}`)) // unsealed: its stream stays open
	s.submit("acme", "watched", "", ndjson("w", 3, `{"ms":1}`))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	revoked, resp := s.sse(ctx, "hooli", "watched", "")
	kept, resp2 := s.sse(ctx, "acme", "watched", "")
	if resp.StatusCode != http.StatusOK || resp2.StatusCode != http.StatusOK {
		t.Fatalf("events: %d, %d", resp.StatusCode, resp2.StatusCode)
	}
	<-revoked // both streams are live
	<-kept
	s.rewriteKeys("hooli")
	timeout := time.After(reloadWithin)
	for open := true; open; {
		select {
		case _, open = <-revoked:
		case <-timeout:
			t.Fatal("the revoked key's SSE stream is still open")
		}
	}
	select {
	case _, open := <-kept:
		if !open {
			t.Fatal("another key's stream was closed")
		}
	case <-time.After(time.Second):
	}
}
