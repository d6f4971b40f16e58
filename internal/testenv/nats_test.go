package testenv

import (
	"context"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

func TestNATS(t *testing.T) {
	var url string
	t.Run("use", func(t *testing.T) {
		u, nc, js := NATS(t)
		url = u
		if !nc.IsConnected() || nc.ConnectedUrl() != u {
			t.Fatalf("connection to %s not established (connected to %q)", u, nc.ConnectedUrl())
		}
		ctx := context.Background()
		if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "T", Subjects: []string{"t.>"}, Storage: jetstream.FileStorage}); err != nil {
			t.Fatal(err)
		}
		ack, err := js.Publish(ctx, "t.x", []byte("hello"))
		if err != nil {
			t.Fatal(err)
		}
		if ack.Stream != "T" || ack.Sequence != 1 {
			t.Fatalf("ack %+v", ack)
		}
	})
	// The sub-test's cleanup has stopped its server.
	if nc, err := nats.Connect(url, nats.MaxReconnects(0)); err == nil {
		nc.Close()
		t.Fatalf("server at %s still accepts connections after cleanup", url)
	}
}

func TestNATSServersAreSeparate(t *testing.T) {
	u1, _, js1 := NATS(t)
	u2, _, js2 := NATS(t)
	if u1 == u2 {
		t.Fatalf("both servers at %s", u1)
	}
	ctx := context.Background()
	if _, err := js1.CreateStream(ctx, jetstream.StreamConfig{Name: "ONLY1", Subjects: []string{"one.>"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := js2.Stream(ctx, "ONLY1"); err == nil {
		t.Fatal("stream of the first server visible on the second")
	}
}
