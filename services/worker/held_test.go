package worker

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/bulkaction/bulkaction/internal/testenv"
	"github.com/bulkaction/bulkaction/internal/testkit"
)

// TestHeldMessagesComeBackAtOnce: messages a worker held when it died (its
// held file written, never settled) on their first delivery are handed back
// by the next worker on the same state directory, and JetStream delivers
// them again at once, not after the consumer's AckWait (a minute here). A
// settled message is not in the file, a second worker instance takes a
// file of its own, and a message that died with a worker twice is left to
// AckWait (it may be what kills them).
func TestHeldMessagesComeBackAtOnce(t *testing.T) {
	_, nc, js := testenv.NATS(t)
	ctx := context.Background()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "HELD", Subjects: []string{"held.>"}, Retention: jetstream.WorkQueuePolicy}); err != nil {
		t.Fatal(err)
	}
	cons, err := js.CreateOrUpdateConsumer(ctx, "HELD", jetstream.ConsumerConfig{Durable: "w", AckPolicy: jetstream.AckExplicitPolicy, AckWait: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if _, err := js.Publish(ctx, "held.x", []byte("job")); err != nil {
			t.Fatal(err)
		}
	}
	fetch := func(n int, wait time.Duration) []jetstream.Msg {
		b, err := cons.Fetch(n, jetstream.FetchMaxWait(wait))
		if err != nil {
			t.Fatal(err)
		}
		var out []jetstream.Msg
		for m := range b.Messages() {
			out = append(out, m)
		}
		return out
	}
	dir := t.TempDir()
	h, left, _, err := openHeld(dir, "worker", "h1")
	if err != nil || len(left) != 0 {
		t.Fatalf("openHeld = %v, %v; want an empty file", left, err)
	}
	msgs := fetch(3, 2*time.Second)
	if len(msgs) != 3 {
		t.Fatalf("fetched %d", len(msgs))
	}
	if err := h.add(msgs); err != nil {
		t.Fatal(err)
	}
	if err := msgs[0].Ack(); err != nil {
		t.Fatal(err)
	}
	h.remove(msgs[0])
	testkit.WaitFor(t, "the settled message out of the held file", 0, func() bool {
		b, err := os.ReadFile(h.f.Name())
		return err == nil && strings.Count(string(b), "\n") == 3 // the holder line and the 2 messages held
	})

	// Another instance while the first lives takes another file.
	other, otherLeft, _, err := openHeld(dir, "worker", "h2")
	if err != nil || len(otherLeft) != 0 {
		t.Fatalf("second instance: %v, %v", otherLeft, err)
	}
	other.close()

	// The worker dies: its file keeps what it held, its lock goes.
	h.stop()
	<-h.done
	h.f.Close()

	if again := fetch(3, 500*time.Millisecond); len(again) != 0 {
		t.Fatalf("%d messages delivered again before the hand-back", len(again))
	}
	next, left, before, err := openHeld(dir, "worker", "h3")
	if err != nil {
		t.Fatal(err)
	}
	if len(left) != 2 {
		t.Fatalf("the file held %d messages, want the 2 unsettled ones", len(left))
	}
	if before != "h1" {
		t.Fatalf("the file named holder %q, want h1, the worker that held them", before)
	}
	if err := recoverHeld(nc, left); err != nil {
		t.Fatal(err)
	}
	again := fetch(3, 5*time.Second)
	if len(again) != 2 {
		t.Fatalf("%d messages delivered again after the hand-back, want 2 (well before AckWait)", len(again))
	}
	for _, m := range again {
		md, _ := m.Metadata()
		if md.NumDelivered != 2 {
			t.Errorf("message %d delivered %d times, want 2", md.Sequence.Stream, md.NumDelivered)
		}
	}
	// The next worker dies holding them too: their second delivery is not
	// handed back.
	if err := next.add(again); err != nil {
		t.Fatal(err)
	}
	next.stop()
	<-next.done
	next.f.Close()
	last, left, _, err := openHeld(dir, "worker", "h4")
	if err != nil {
		t.Fatal(err)
	}
	defer last.close()
	if len(left) != 0 {
		t.Fatalf("%d messages on their second delivery handed back, want none", len(left))
	}
}
