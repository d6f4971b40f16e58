package natsutil

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/bulkaction/bulkaction/pkg/contracts"
)

// Stream defaults applied by [StreamConfigs] for zero [StreamSettings] fields.
const (
	// DefaultMaxAge is how long the EVENTS and DLQ streams keep a message.
	DefaultMaxAge = 7 * 24 * time.Hour
	// DefaultDuplicateWindow is how long a Nats-Msg-Id is remembered for
	// de-duplication.
	DefaultDuplicateWindow = 2 * time.Minute
	// DefaultMaxMsgSize is the largest message a stream stores, in bytes.
	DefaultMaxMsgSize int32 = 1 << 20
)

// StreamSettings configure every stream of [StreamConfigs] (docs/ARCHITECTURE.md §3). The
// zero value gives the defaults: file storage, one replica, EVENTS and DLQ
// kept 7 days, a 2 minute duplicate window and 1 MiB messages.
type StreamSettings struct {
	// Storage is the storage backend. The zero value is file storage.
	Storage jetstream.StorageType
	// Replicas is the number of copies in a cluster. 0 means 1.
	Replicas int
	// MaxAge is how long the EVENTS and DLQ streams keep a message. 0 means
	// 7 days. The work-queue streams (SUBMIT, READY, RESULT) never expire
	// messages by age: a message leaves them only when it is acknowledged.
	MaxAge time.Duration
	// DuplicateWindow is how long a Nats-Msg-Id is remembered. 0 means
	// 2 minutes. It is capped at MaxAge on the streams that have one.
	DuplicateWindow time.Duration
	// MaxMsgSize is the largest message a stream stores, in bytes. 0 means
	// 1 MiB; it must not exceed the server's max_payload.
	MaxMsgSize int32
}

func (s StreamSettings) withDefaults() StreamSettings {
	if s.Replicas == 0 {
		s.Replicas = 1
	}
	if s.MaxAge == 0 {
		s.MaxAge = DefaultMaxAge
	}
	if s.DuplicateWindow == 0 {
		s.DuplicateWindow = DefaultDuplicateWindow
	}
	if s.MaxMsgSize == 0 {
		s.MaxMsgSize = DefaultMaxMsgSize
	}
	return s
}

func (s StreamSettings) validate() error {
	switch {
	case s.Replicas < 0:
		return fmt.Errorf("natsutil: Replicas %d: must be >= 0", s.Replicas)
	case s.MaxAge < 0:
		return fmt.Errorf("natsutil: MaxAge %s: must be >= 0", s.MaxAge)
	case s.DuplicateWindow < 0:
		return fmt.Errorf("natsutil: DuplicateWindow %s: must be >= 0", s.DuplicateWindow)
	case s.MaxMsgSize < 0:
		return fmt.Errorf("natsutil: MaxMsgSize %d: must be >= 0", s.MaxMsgSize)
	}
	return nil
}

// StreamConfigs returns the configuration of the five streams named by n, in
// the order SUBMIT, READY, RESULT, EVENTS, DLQ. SUBMIT, READY and RESULT use
// the work-queue retention policy (a message is removed once acknowledged);
// EVENTS and DLQ use the limits policy and expire messages after MaxAge.
// Zero fields of s take the defaults documented on [StreamSettings].
func StreamConfigs(n contracts.Names, s StreamSettings) []jetstream.StreamConfig {
	s = s.withDefaults()
	mk := func(name, subject, desc string, retention jetstream.RetentionPolicy, maxAge time.Duration) jetstream.StreamConfig {
		dup := s.DuplicateWindow
		if maxAge > 0 && dup > maxAge {
			dup = maxAge // the server rejects a window longer than MaxAge
		}
		return jetstream.StreamConfig{
			Name:        name,
			Description: desc,
			Subjects:    []string{subject},
			Retention:   retention,
			MaxAge:      maxAge,
			Storage:     s.Storage,
			Replicas:    s.Replicas,
			Duplicates:  dup,
			MaxMsgSize:  s.MaxMsgSize,
			Discard:     jetstream.DiscardOld,
		}
	}
	return []jetstream.StreamConfig{
		mk(n.StreamSubmit(), n.SubmitAll(), "bulkaction job submissions, seals and cancels", jetstream.WorkQueuePolicy, 0),
		mk(n.StreamReady(), n.ReadyAll(), "bulkaction admitted jobs, one subject per job type", jetstream.WorkQueuePolicy, 0),
		mk(n.StreamResult(), n.ResultAll(), "bulkaction job results", jetstream.WorkQueuePolicy, 0),
		mk(n.StreamEvents(), n.EventsAll(), "bulkaction group state changes", jetstream.LimitsPolicy, s.MaxAge),
		mk(n.StreamDLQ(), n.DLQAll(), "bulkaction rejected messages", jetstream.LimitsPolicy, s.MaxAge),
	}
}

// EnsureStreams creates the streams of [StreamConfigs] that do not exist and
// updates the ones that do, so it is safe to call at every start: a second
// call with the same settings changes nothing. An error names the stream.
// An invalid prefix in n or a negative field of s fails before any stream is
// touched.
func EnsureStreams(ctx context.Context, js jetstream.JetStream, n contracts.Names, s StreamSettings) error {
	if err := n.Validate(); err != nil {
		return fmt.Errorf("natsutil: names: %w", err)
	}
	if err := s.validate(); err != nil {
		return err
	}
	for _, cfg := range StreamConfigs(n, s) {
		if _, err := js.CreateOrUpdateStream(ctx, cfg); err != nil {
			return fmt.Errorf("natsutil: stream %s: %w", cfg.Name, err)
		}
	}
	return nil
}

// StreamMsgs returns the number of messages stream currently holds.
func StreamMsgs(ctx context.Context, js jetstream.JetStream, stream string) (uint64, error) {
	st, err := js.Stream(ctx, stream)
	if err != nil {
		return 0, fmt.Errorf("natsutil: stream %s: %w", stream, err)
	}
	return st.CachedInfo().State.Msgs, nil
}
