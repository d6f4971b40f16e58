package apiclient

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/bulkaction/bulkaction/pkg/contracts"
)

// Event is one Server-Sent Event of a group's stream.
type Event struct {
	// ID is the event's id, for Last-Event-ID; "" for the first event of
	// a stream when the group had no event yet (built from its state).
	ID string
	// Name is "state" (the state changed, and the first event of a
	// stream), "progress" or "notice".
	Name string
	// Group is the event's data.
	Group contracts.GroupEvent
}

// Final reports whether no event follows: the group COMPLETED, or it was
// CANCELLED and every job is accounted for.
func (e Event) Final() bool { return e.Group.Final() }

// EventStream reads one connection's events; Close it when done.
type EventStream struct {
	body io.ReadCloser
	sc   *bufio.Scanner
	idle *time.Timer
	once sync.Once
	// idleOut is set when the stream was closed for being silent.
	idleMu  sync.Mutex
	idleOut bool
	timeout time.Duration
}

// ErrStreamIdle ends a stream that sent nothing for Config.IdleTimeout.
var ErrStreamIdle = errors.New("apiclient: event stream silent for too long")

// Events opens a group's event stream. Without lastEventID it starts with
// the group's latest state; with it, it replays the events after that id.
// The stream ends (io.EOF from Next) after the group's final event, or
// when the connection drops. A group that does not exist is a 404
// *Problem (the gateway waits a few seconds for a new group to appear).
func (c *Client) Events(ctx context.Context, groupID, lastEventID string, opts ...CallOption) (*EventStream, error) {
	h := http.Header{}
	h.Set("Accept", "text/event-stream")
	if lastEventID != "" {
		h.Set("Last-Event-ID", lastEventID)
	}
	r := request{method: http.MethodGet, path: groupPath(groupID, "events"), opts: options(opts), stream: true, header: h}
	resp, err := c.send(ctx, r, nil)
	if err != nil {
		return nil, err
	}
	s := &EventStream{body: resp.Body, sc: bufio.NewScanner(resp.Body), timeout: c.cfg.IdleTimeout}
	s.sc.Buffer(make([]byte, 64<<10), 4<<20)
	s.idle = time.AfterFunc(c.cfg.IdleTimeout, func() {
		s.idleMu.Lock()
		s.idleOut = true
		s.idleMu.Unlock()
		_ = s.Close()
	})
	return s, nil
}

// Next returns the next event; io.EOF when the stream ended, another error
// when it broke.
func (s *EventStream) Next() (Event, error) {
	var ev Event
	var data strings.Builder
	for s.sc.Scan() {
		s.idle.Reset(s.timeout)
		line := s.sc.Text()
		if line == "" {
			if data.Len() == 0 {
				ev = Event{}
				continue
			}
			if ev.Name == "" {
				ev.Name = "message"
			}
			if err := json.Unmarshal([]byte(data.String()), &ev.Group); err != nil {
				return ev, fmt.Errorf("apiclient: event %s: %w", ev.ID, err)
			}
			return ev, nil
		}
		if strings.HasPrefix(line, ":") {
			continue
		}
		field, value, _ := strings.Cut(line, ":")
		value = strings.TrimPrefix(value, " ")
		switch field {
		case "id":
			ev.ID = value
		case "event":
			ev.Name = value
		case "data":
			if data.Len() > 0 {
				data.WriteByte('\n')
			}
			data.WriteString(value)
		}
	}
	s.idleMu.Lock()
	idle := s.idleOut
	s.idleMu.Unlock()
	if idle {
		return ev, ErrStreamIdle
	}
	if err := s.sc.Err(); err != nil {
		return ev, err
	}
	return ev, io.EOF
}

// Close ends the stream.
func (s *EventStream) Close() error {
	var err error
	s.once.Do(func() {
		s.idle.Stop()
		err = s.body.Close()
	})
	return err
}

// Follow reads a group's events, calling fn with each, until the final
// one, which it returns. When the connection drops it reconnects with
// Last-Event-ID (waiting RetryWait, doubling up to 10 s), so no event is
// missed or repeated; it gives up when the stream cannot be reopened
// Config.Retries times in a row (each open itself retried as any
// request is). Other errors (an answer 4xx, fn's error, ctx's end) end it.
// A group that does not exist yet is a 404 *Problem: the caller may wait
// and call again.
func (c *Client) Follow(ctx context.Context, groupID string, fn func(Event) error, opts ...CallOption) (Event, error) {
	var last Event
	lastID := ""
	wait := c.cfg.RetryWait
	failures := 0
	for {
		s, err := c.Events(ctx, groupID, lastID, opts...)
		if err != nil {
			var p *Problem
			if ctx.Err() != nil || errors.As(err, &p) && !retryable(p) {
				return last, err
			}
			// A broken connection, or the gateway unavailable after
			// its retries: try again, a few times.
			if failures++; failures > max(c.cfg.Retries, 0) {
				return last, err
			}
		} else {
			failures = 0
			for {
				ev, err := s.Next()
				if err != nil {
					break
				}
				wait = c.cfg.RetryWait
				last = ev
				if ev.ID != "" {
					lastID = ev.ID
				}
				if fn != nil {
					if err := fn(ev); err != nil {
						_ = s.Close()
						return last, err
					}
				}
				if ev.Final() {
					_ = s.Close()
					return last, nil
				}
			}
			_ = s.Close()
		}
		select {
		case <-ctx.Done():
			return last, ctx.Err()
		case <-time.After(wait):
		}
		wait = min(2*wait, maxRetryWait)
	}
}
