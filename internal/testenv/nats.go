package testenv

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/bulkaction/bulkaction/internal/natsutil"
)

// natsCloseTimeout bounds how long the cleanup of [NATS] waits for the
// connection to drain.
const natsCloseTimeout = 10 * time.Second

// NATS starts an embedded JetStream server for the test on a random port with
// its store in t.TempDir(), connects to it, and registers a cleanup that
// drains the connection and shuts the server down. It returns the server's
// URL, the connection and a JetStream handle on it. No streams exist yet.
func NATS(t testing.TB) (url string, nc *nats.Conn, js jetstream.JetStream) {
	t.Helper()
	srv, err := natsutil.StartEmbedded(natsutil.EmbeddedOptions{Dir: t.TempDir(), Port: -1})
	if err != nil {
		t.Fatalf("testenv: start nats: %v", err)
	}
	t.Cleanup(func() {
		srv.Shutdown()
		srv.WaitForShutdown()
	})
	url = srv.ClientURL()
	closed := make(chan struct{})
	nc, err = nats.Connect(url,
		nats.Name(t.Name()),
		nats.ClosedHandler(func(*nats.Conn) { close(closed) }),
	)
	if err != nil {
		t.Fatalf("testenv: connect nats %s: %v", url, err)
	}
	t.Cleanup(func() {
		if err := nc.Drain(); err != nil {
			nc.Close()
		}
		select {
		case <-closed:
		case <-time.After(natsCloseTimeout):
			t.Errorf("testenv: nats connection not closed %s after drain", natsCloseTimeout)
			nc.Close()
		}
	})
	js, err = jetstream.New(nc)
	if err != nil {
		t.Fatalf("testenv: jetstream: %v", err)
	}
	return url, nc, js
}
