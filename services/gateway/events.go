package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/bulkaction/bulkaction/internal/deps"
	"github.com/bulkaction/bulkaction/pkg/contracts"
)

// subscriberBuffer is how many events a slow SSE subscriber may lag behind
// before it is dropped (its client reconnects with Last-Event-ID and
// replays from the stream).
const subscriberBuffer = 64

// appearWait is how long an SSE request for an unknown group waits for it
// to appear (its first jobs may still be on their way) before a 404.
const appearWait = 3 * time.Second

// hubEvent is one EVENTS message.
type hubEvent struct {
	seq  uint64
	ev   contracts.GroupEvent
	data []byte
}

// subscriber is one SSE stream of a group.
type subscriber struct {
	ref     contracts.GroupRef
	ch      chan *hubEvent // shared by every subscriber of the group: read only
	dropped chan struct{}  // closed when the hub drops the subscriber
	once    sync.Once
}

func (s *subscriber) drop() { s.once.Do(func() { close(s.dropped) }) }

// hub reads the EVENTS stream with one ordered consumer (new messages only)
// and hands each event to the SSE subscribers of its group.
type hub struct {
	d   deps.Deps
	log *slog.Logger

	mu     sync.Mutex
	subs   map[contracts.GroupRef]map[*subscriber]struct{}
	n      int
	closed bool
	cc     jetstream.ConsumeContext
	stream jetstream.Stream
}

func newHub(d deps.Deps, log *slog.Logger) *hub {
	return &hub{d: d, log: log, subs: map[contracts.GroupRef]map[*subscriber]struct{}{}}
}

func (h *hub) start(ctx context.Context) error {
	stream, err := h.d.JS.Stream(ctx, h.d.Names.StreamEvents())
	if err != nil {
		return fmt.Errorf("gateway: events stream: %w", err)
	}
	cons, err := stream.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{h.d.Names.EventsAll()},
		DeliverPolicy:  jetstream.DeliverNewPolicy,
	})
	if err != nil {
		return fmt.Errorf("gateway: events consumer: %w", err)
	}
	cc, err := cons.Consume(h.deliver)
	if err != nil {
		return fmt.Errorf("gateway: events consumer: %w", err)
	}
	h.mu.Lock()
	h.cc, h.stream = cc, stream
	h.mu.Unlock()
	go func() {
		<-ctx.Done()
		cc.Stop()
	}()
	return nil
}

// deliver fans one EVENTS message out to its group's subscribers.
func (h *hub) deliver(msg jetstream.Msg) {
	md, err := msg.Metadata()
	if err != nil {
		return
	}
	var ev contracts.GroupEvent
	if json.Unmarshal(msg.Data(), &ev) != nil || ev.Validate() != nil {
		return
	}
	e := &hubEvent{seq: md.Sequence.Stream, ev: ev, data: msg.Data()}
	h.mu.Lock()
	defer h.mu.Unlock()
	for s := range h.subs[ev.Ref()] {
		select {
		case s.ch <- e:
		default:
			h.log.Debug("SSE subscriber too slow; dropped", "group", ev.Ref().String())
			s.drop()
		}
	}
}

func (h *hub) subscribe(ref contracts.GroupRef) (*subscriber, error) {
	s := &subscriber{ref: ref, ch: make(chan *hubEvent, subscriberBuffer), dropped: make(chan struct{})}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return nil, errors.New("gateway: shutting down")
	}
	if h.subs[ref] == nil {
		h.subs[ref] = map[*subscriber]struct{}{}
	}
	h.subs[ref][s] = struct{}{}
	h.n++
	return s, nil
}

func (h *hub) unsubscribe(s *subscriber) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if m := h.subs[s.ref]; m != nil {
		if _, ok := m[s]; ok {
			delete(m, s)
			h.n--
		}
		if len(m) == 0 {
			delete(h.subs, s.ref)
		}
	}
}

// closeAll ends every SSE stream (shutdown) and refuses new ones.
func (h *hub) closeAll() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.closed = true
	for _, m := range h.subs {
		for s := range m {
			s.drop()
		}
	}
}

// subscribers is the number of open SSE streams.
func (h *hub) subscribers() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.n
}

// sseWriter writes Server-Sent Events.
type sseWriter struct {
	w    http.ResponseWriter
	rc   *http.ResponseController
	prev contracts.GroupState
}

// event writes one group event: "state" when the state differs from the
// previous one written (and for the first), "notice" for a notice, else
// "progress". id is the EVENTS stream sequence (0 = no id).
func (s *sseWriter) event(seq uint64, ev contracts.GroupEvent, data []byte) error {
	name := "progress"
	switch {
	case ev.State != s.prev:
		name = "state"
	case ev.Notice != "":
		name = "notice"
	}
	s.prev = ev.State
	var b []byte
	if seq > 0 {
		b = append(b, "id: "...)
		b = strconv.AppendUint(b, seq, 10)
		b = append(b, '\n')
	}
	b = append(b, "event: "...)
	b = append(b, name...)
	b = append(b, "\ndata: "...)
	b = append(b, data...)
	b = append(b, "\n\n"...)
	if _, err := s.w.Write(b); err != nil {
		return err
	}
	return s.rc.Flush()
}

func (s *sseWriter) comment(text string) error {
	if _, err := s.w.Write([]byte(": " + text + "\n\n")); err != nil {
		return err
	}
	return s.rc.Flush()
}

// events: GET /v1/groups/{groupId}/events, Server-Sent Events. Without
// Last-Event-ID it starts with the group's latest event (its current state
// and counts; built from Redis, without an id, when the group has no event
// yet); with it, it replays every event after that id that the EVENTS
// stream still keeps (a comment says so when the stream dropped events
// after that id; when it keeps none of the group's, the stream starts with
// its state built from Redis); then it streams new events, and ends after
// the group's final one. A comment line keeps an idle stream open every Heartbeat.
func (g *Gateway) events(w http.ResponseWriter, r *http.Request) {
	ref, ok := groupRef(w, r)
	if !ok {
		return
	}
	ctx := r.Context()
	var after uint64
	resume := r.Header.Get("Last-Event-ID")
	if resume == "" {
		resume = r.URL.Query().Get("lastEventId")
	}
	if resume != "" {
		n, err := strconv.ParseUint(resume, 10, 64)
		if err != nil {
			writeProblem(w, r, http.StatusBadRequest, slugInvalidParam, "bad Last-Event-ID",
				paramError("Last-Event-ID", resume, "an id of an earlier event"))
			return
		}
		after = n
	}
	sub, err := g.hub.subscribe(ref)
	if err != nil {
		g.unavailable(w, r, err)
		return
	}
	defer g.hub.unsubscribe(sub)
	g.deps.Metrics.GatewaySSE.Inc()
	defer g.deps.Metrics.GatewaySSE.Dec()

	subject := g.deps.Names.Events(ref)
	var first []hubEvent
	var kept uint64 // the oldest event EVENTS keeps, when resuming
	var prev contracts.GroupState
	replaying := false
	if resume != "" {
		// A stream resumed after the group's final event, or for a group
		// that does not exist, has nothing to wait for: 204 tells an
		// EventSource to stop reconnecting, 404 that the group is unknown.
		last, err := g.latest(ctx, ref, subject)
		if err != nil {
			g.unavailable(w, r, err)
			return
		}
		if len(last) == 0 {
			writeProblem(w, r, http.StatusNotFound, slugNotFound, "no such group")
			return
		}
		if l := last[0]; l.ev.Final() && l.seq > 0 && l.seq <= after {
			w.WriteHeader(http.StatusNoContent)
			return
		}
		// The events after it are read and written one at a time below,
		// so a replay from 0 holds one event in memory, not the group's.
		var gone bool
		prev, gone = g.replayPrev(ctx, subject, after)
		replaying = true
		if last[0].seq == 0 {
			// None of its events is kept (EVENTS dropped them, or it has
			// none yet): its state now, from Redis, is where it resumes.
			first, replaying = last, false
		}
		if kept, err = g.firstKept(ctx); err != nil {
			g.unavailable(w, r, err)
			return
		}
		if gone && after >= kept {
			// The event resumed from is gone while older ones of the
			// stream are kept: the group's own oldest were dropped
			// (STREAM_EVENTS_MAX_MSGS_PER_GROUP), maybe some after it too.
			if kept, err = g.firstOfGroup(ctx, subject, after, kept); err != nil {
				g.unavailable(w, r, err)
				return
			}
		}
	} else {
		// A group submitted a moment ago may not be stored yet: give
		// the fetcher a little time before answering 404.
		for wait := time.Now().Add(appearWait); ; {
			first, err = g.latest(ctx, ref, subject)
			if err != nil || len(first) > 0 || time.Now().After(wait) {
				break
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(100 * time.Millisecond):
			}
		}
	}
	if err != nil {
		g.unavailable(w, r, err)
		return
	}
	if len(first) == 0 && resume == "" {
		writeProblem(w, r, http.StatusNotFound, slugNotFound, "no such group")
		return
	}
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	sw := &sseWriter{w: w, rc: http.NewResponseController(w), prev: prev}
	if err := sw.comment("bulkaction events of " + ref.String()); err != nil {
		return
	}
	if after+1 < kept {
		msg := fmt.Sprintf("events before id %d are no longer kept; the replay starts at the oldest kept one", kept)
		if err := sw.comment(msg); err != nil {
			return
		}
	}
	sent := after
	for _, e := range first {
		if err := sw.event(e.seq, e.ev, e.data); err != nil {
			return
		}
		sent = max(sent, e.seq)
		if e.ev.Final() {
			return
		}
	}
	if replaying {
		final := false
		err := g.replay(ctx, subject, after, func(e hubEvent) (bool, error) {
			if err := sw.event(e.seq, e.ev, e.data); err != nil {
				return true, err
			}
			sent = max(sent, e.seq)
			final = e.ev.Final()
			return final, nil
		})
		if err != nil || final {
			return
		}
	}
	beat := time.NewTicker(g.cfg.Heartbeat)
	defer beat.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-sub.dropped:
			return
		case <-beat.C:
			if err := sw.comment("keep-alive"); err != nil {
				return
			}
		case e := <-sub.ch:
			if e.seq <= sent {
				continue
			}
			if err := sw.event(e.seq, e.ev, e.data); err != nil {
				return
			}
			beat.Reset(g.cfg.Heartbeat) // comments only on an idle stream
			sent = e.seq
			if e.ev.Final() {
				return
			}
		}
	}
}

// latest returns the group's latest event, or one built from Redis when
// the stream holds none (nil when the group does not exist).
func (g *Gateway) latest(ctx context.Context, ref contracts.GroupRef, subject string) ([]hubEvent, error) {
	m, err := g.hub.stream.GetLastMsgForSubject(ctx, subject)
	if err == nil {
		var ev contracts.GroupEvent
		if json.Unmarshal(m.Data, &ev) == nil && ev.Validate() == nil {
			return []hubEvent{{seq: m.Sequence, ev: ev, data: m.Data}}, nil
		}
	} else if !errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil, err
	}
	info, ok, err := g.q.Group(ctx, ref)
	if err != nil || !ok {
		return nil, err
	}
	ev := contracts.GroupEvent{V: contracts.Version, Tenant: ref.Tenant, GroupID: ref.ID, State: info.State,
		Jobs: info.Jobs, Succeeded: info.Succeeded, Failed: info.Failed, Cancelled: info.Cancelled, At: time.Now().UTC()}
	if info.Declared >= 0 {
		ev.Total = info.Declared
	}
	data, err := json.Marshal(ev)
	if err != nil {
		return nil, err
	}
	return []hubEvent{{ev: ev, data: data}}, nil
}

// firstKept returns the sequence of the oldest event EVENTS keeps: the
// ones before it were dropped (STREAM_MAX_AGE, STREAM_EVENTS_MAX_BYTES);
// firstOfGroup finds those of a group dropped by its own limit.
func (g *Gateway) firstKept(ctx context.Context) (uint64, error) {
	info, err := g.hub.stream.Info(ctx)
	if err != nil {
		return 0, err
	}
	return info.State.FirstSeq, nil
}

// replayPrev returns the state of the group's event at sequence after (so
// the first replayed one is named right), "" when there is none; gone is
// true when EVENTS no longer has a message at that sequence.
func (g *Gateway) replayPrev(ctx context.Context, subject string, after uint64) (state contracts.GroupState, gone bool) {
	if after == 0 {
		return "", false
	}
	m, err := g.hub.stream.GetMsg(ctx, after)
	if err != nil || m.Subject != subject {
		return "", errors.Is(err, jetstream.ErrMsgNotFound)
	}
	var ev contracts.GroupEvent
	if json.Unmarshal(m.Data, &ev) != nil {
		return "", false
	}
	return ev.State, false
}

// firstOfGroup returns the sequence of the group's oldest event EVENTS
// keeps after sequence after, or kept when it keeps none.
func (g *Gateway) firstOfGroup(ctx context.Context, subject string, after, kept uint64) (uint64, error) {
	m, err := g.hub.stream.GetMsg(ctx, after+1, jetstream.WithGetMsgSubject(subject))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return kept, nil
	}
	if err != nil {
		return 0, err
	}
	return max(kept, m.Sequence), nil
}

// replay hands each of the group's events after sequence after to each, in
// order, as it reads them from the stream, until each says stop or fails.
func (g *Gateway) replay(ctx context.Context, subject string, after uint64, each func(hubEvent) (stop bool, err error)) error {
	for seq := after + 1; ; {
		m, err := g.hub.stream.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(subject))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		var ev contracts.GroupEvent
		if json.Unmarshal(m.Data, &ev) == nil && ev.Validate() == nil {
			if stop, err := each(hubEvent{seq: m.Sequence, ev: ev, data: m.Data}); stop || err != nil {
				return err
			}
		}
		seq = m.Sequence + 1
	}
}
