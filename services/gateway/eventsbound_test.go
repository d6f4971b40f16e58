package gateway_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/bulkaction/bulkaction/internal/config"
	"github.com/bulkaction/bulkaction/internal/testkit"
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

// A group paused and resumed in a loop keeps only its newest events
// (STREAM_EVENTS_MAX_MSGS_PER_GROUP) while the stream keeps older ones of
// other groups: a stream resumed from one of the group's dropped events
// says so, names the group's oldest kept event, and replays from it.
func TestEventsResumeAfterGroupCapDroppedEvents(t *testing.T) {
	t.Parallel()
	s := newServer(t, func(c *config.Config) { c.StreamEventsPerGroup = 3 })
	// An older group of another tenant keeps the stream's first sequence low.
	s.submit("hooli", "early", "?total=1", ndjson("e", 1, `{"ms":1}`))
	s.waitState("hooli", "early", "COMPLETED")
	nb := url.QueryEscape(time.Now().Add(time.Hour).UTC().Format(time.RFC3339))
	s.submit("acme", "spam", "?total=1&notBefore="+nb, ndjson("s", 1, `{"ms":1}`))

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	js, names := s.st.Conns.JS, s.st.Conns.Names
	stream, err := js.Stream(ctx, names.StreamEvents())
	if err != nil {
		t.Fatal(err)
	}
	subject := names.Events(contracts.Group("acme", "spam"))
	var first, second uint64
	testkit.WaitFor(t, "spam's first event", 30*time.Second, func() bool {
		m, err := stream.GetMsg(ctx, 1, jetstream.WithGetMsgSubject(subject))
		if err == nil {
			first = m.Sequence
		}
		return err == nil
	})
	// Pause and resume until the group's first two events are dropped: a
	// stream resumed from the first has lost the second.
	for i := 0; ; i++ {
		m, err := stream.GetMsg(ctx, 1, jetstream.WithGetMsgSubject(subject))
		if err == nil && second == 0 && m.Sequence == first {
			if m2, err := stream.GetMsg(ctx, first+1, jetstream.WithGetMsgSubject(subject)); err == nil {
				second = m2.Sequence
			}
		}
		if err == nil && second != 0 && m.Sequence > second {
			break
		}
		if i > 100 {
			t.Fatal("100 pauses and resumes did not drop the group's first event")
		}
		op := "pause"
		if i%2 == 1 {
			op = "resume"
		}
		if r := s.do("POST", "/v1/groups/spam/"+op, "acme", nil); r.code != http.StatusAccepted && r.code != http.StatusOK {
			t.Fatalf("%s: %d %s", op, r.code, r.body)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if _, err := stream.Info(ctx); err != nil {
		t.Fatal(err)
	}
	if fs := stream.CachedInfo().State.FirstSeq; fs > first {
		t.Fatalf("the stream's first sequence %d is past the group's first event %d: the test needs the stream to keep older events", fs, first)
	}
	oldest, err := stream.GetMsg(ctx, 1, jetstream.WithGetMsgSubject(subject))
	if err != nil {
		t.Fatal(err)
	}

	req, err := http.NewRequestWithContext(ctx, "GET", s.base+"/v1/groups/spam/events", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+s.keys["acme"])
	req.Header.Set("Last-Event-ID", strconv.FormatUint(first, 10))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("resume from a dropped event: %d", resp.StatusCode)
	}
	var lines []string
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		lines = append(lines, sc.Text())
		if strings.HasPrefix(sc.Text(), "id: ") {
			break
		}
	}
	got := strings.Join(lines, "\n")
	want := fmt.Sprintf("events before id %d are no longer kept", oldest.Sequence)
	if !strings.Contains(got, want) || !strings.HasSuffix(got, "id: "+strconv.FormatUint(oldest.Sequence, 10)) {
		t.Fatalf("resume from the group's dropped event %d (oldest kept %d):\n%s\nwant %q, then the replay from the oldest kept", first, oldest.Sequence, got, want)
	}
}
