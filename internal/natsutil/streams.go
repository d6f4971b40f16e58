package natsutil

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/bulkaction/bulkaction/internal/setting"
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

	// DefaultSubmitMaxBytes is the byte limit of SUBMIT on file storage.
	DefaultSubmitMaxBytes int64 = 1 << 30
	// DefaultReadyMaxBytes is the byte limit of READY on file storage.
	DefaultReadyMaxBytes int64 = 256 << 20
	// DefaultResultMaxBytes is the byte limit of RESULT on file storage.
	DefaultResultMaxBytes int64 = 256 << 20
	// DefaultMemorySubmitMaxBytes is the byte limit of SUBMIT on memory
	// storage, where the server reserves a stream's limit in its
	// max_memory_store when the stream is created.
	DefaultMemorySubmitMaxBytes int64 = 64 << 20
	// DefaultMemoryReadyMaxBytes is the byte limit of READY on memory storage.
	DefaultMemoryReadyMaxBytes int64 = 32 << 20
	// DefaultMemoryResultMaxBytes is the byte limit of RESULT on memory storage.
	DefaultMemoryResultMaxBytes int64 = 32 << 20

	// DefaultEventsMaxBytes and DefaultDLQMaxBytes are the byte limits of
	// EVENTS and DLQ on file storage: past them the oldest messages go.
	DefaultEventsMaxBytes int64 = 1 << 30
	DefaultDLQMaxBytes    int64 = 1 << 30
	// DefaultMemoryEventsMaxBytes and DefaultMemoryDLQMaxBytes are the byte
	// limits of EVENTS and DLQ on memory storage.
	DefaultMemoryEventsMaxBytes int64 = 32 << 20
	DefaultMemoryDLQMaxBytes    int64 = 16 << 20
	// DefaultDLQMaxMsgsPerSubject is how many dead letters the DLQ keeps of
	// one tenant and reason (one subject, [contracts.Names.DLQ]): past it
	// the oldest of that tenant and reason go, and no one else's.
	DefaultDLQMaxMsgsPerSubject int64 = 1000
	// DefaultEventsMaxMsgsPerSubject is how many events EVENTS keeps of one
	// group (its subject): progress events come at most once a second, so
	// about the last 2.7 hours of a running group's progress, and its
	// newest event (its current state) always.
	DefaultEventsMaxMsgsPerSubject int64 = 10_000
)

// NoLimit as a MaxBytes field of [StreamSettings] leaves the stream without
// a byte limit.
const NoLimit int64 = -1

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
	// SubmitMaxBytes, ReadyMaxBytes and ResultMaxBytes are the byte limits
	// of the work-queue streams. A full stream refuses new messages
	// (DiscardNew): the publisher gets an error and nothing it was told
	// was stored is ever dropped. 0 means the default of the storage:
	// 1 GiB, 256 MiB and 256 MiB on file storage, 64 MiB, 32 MiB and
	// 32 MiB in memory (the server reserves a stream's limit when it
	// creates it); [NoLimit] means none.
	SubmitMaxBytes, ReadyMaxBytes, ResultMaxBytes int64
	// EventsMaxBytes and DLQMaxBytes are the byte limits of the EVENTS and
	// DLQ streams. Past them the oldest messages are dropped (DiscardOld):
	// both are logs, bounded by age and by size. 0 means the default of the
	// storage: 1 GiB each on file storage, 32 MiB and 16 MiB in memory;
	// [NoLimit] means none (bounded by MaxAge only).
	EventsMaxBytes, DLQMaxBytes int64
	// DLQMaxMsgsPerSubject is how many dead letters of one tenant and one
	// reason the DLQ keeps: past it the oldest of that tenant and reason
	// are dropped, so one tenant's garbage cannot push out another's
	// evidence before the DLQ as a whole is full. 0 means 1000; [NoLimit]
	// means none.
	DLQMaxMsgsPerSubject int64
	// EventsMaxMsgsPerSubject is how many events of one group EVENTS
	// keeps (0 = DefaultEventsMaxMsgsPerSubject, NoLimit = none): past it
	// the group's oldest are dropped, so that no group (a tenant pausing and
	// resuming in a loop) inflates its own replay or pushes out the events
	// of others.
	EventsMaxMsgsPerSubject int64
}

func (s StreamSettings) withDefaults() StreamSettings {
	setting.Default(&s.Replicas, 1)
	setting.Default(&s.MaxAge, DefaultMaxAge)
	setting.Default(&s.DuplicateWindow, DefaultDuplicateWindow)
	setting.Default(&s.MaxMsgSize, DefaultMaxMsgSize)
	def := [5]int64{DefaultSubmitMaxBytes, DefaultReadyMaxBytes, DefaultResultMaxBytes, DefaultEventsMaxBytes, DefaultDLQMaxBytes}
	if s.Storage == jetstream.MemoryStorage {
		def = [5]int64{DefaultMemorySubmitMaxBytes, DefaultMemoryReadyMaxBytes, DefaultMemoryResultMaxBytes,
			DefaultMemoryEventsMaxBytes, DefaultMemoryDLQMaxBytes}
	}
	setting.Default(&s.DLQMaxMsgsPerSubject, DefaultDLQMaxMsgsPerSubject)
	setting.Default(&s.EventsMaxMsgsPerSubject, DefaultEventsMaxMsgsPerSubject)
	for i, p := range []*int64{&s.SubmitMaxBytes, &s.ReadyMaxBytes, &s.ResultMaxBytes, &s.EventsMaxBytes, &s.DLQMaxBytes} {
		setting.Default(p, def[i])
	}
	return s
}

// SubmitLimit is SUBMIT's byte limit under s: SubmitMaxBytes, or the
// storage's default when it is 0; [NoLimit] when it has none.
func (s StreamSettings) SubmitLimit() int64 { return s.withDefaults().SubmitMaxBytes }

func (s StreamSettings) validate() error {
	return setting.Check("natsutil",
		setting.NotNegative("Replicas", s.Replicas),
		setting.NotNegative("MaxAge", s.MaxAge),
		setting.NotNegative("DuplicateWindow", s.DuplicateWindow),
		setting.NotNegative("MaxMsgSize", s.MaxMsgSize),
		setting.AtLeast("SubmitMaxBytes", s.SubmitMaxBytes, NoLimit),
		setting.AtLeast("ReadyMaxBytes", s.ReadyMaxBytes, NoLimit),
		setting.AtLeast("ResultMaxBytes", s.ResultMaxBytes, NoLimit),
		setting.AtLeast("EventsMaxBytes", s.EventsMaxBytes, NoLimit),
		setting.AtLeast("DLQMaxBytes", s.DLQMaxBytes, NoLimit),
		setting.AtLeast("DLQMaxMsgsPerSubject", s.DLQMaxMsgsPerSubject, NoLimit),
		setting.AtLeast("EventsMaxMsgsPerSubject", s.EventsMaxMsgsPerSubject, NoLimit),
	)
}

// StreamConfigs returns the configuration of the five streams named by n, in
// the order SUBMIT, READY, RESULT, EVENTS, DLQ. READY and RESULT use the
// work-queue retention policy (a message is removed once acknowledged).
// SUBMIT is a retained log (the limits policy with no age limit): the
// fetchers purge it of the messages they applied once the replay window
// has passed (docs/ARCHITECTURE.md §6.7). The three have byte limits with
// the DiscardNew policy: a full stream refuses a publish ([IsStreamFull])
// rather than drop a message it holds. EVENTS and DLQ use the limits policy
// and drop their oldest messages after MaxAge or past their byte limit; the
// DLQ also keeps at most DLQMaxMsgsPerSubject of each tenant and reason, and
// EVENTS EventsMaxMsgsPerSubject of each group.
// Zero fields of s take the defaults documented on [StreamSettings].
func StreamConfigs(n contracts.Names, s StreamSettings) []jetstream.StreamConfig {
	s = s.withDefaults()
	mk := func(name, subject, desc string, retention jetstream.RetentionPolicy, maxAge time.Duration, maxBytes int64) jetstream.StreamConfig {
		dup := s.DuplicateWindow
		if maxAge > 0 && dup > maxAge {
			dup = maxAge // the server rejects a window longer than MaxAge
		}
		discard := jetstream.DiscardOld
		if maxAge == 0 {
			discard = jetstream.DiscardNew // never drop accepted work
		}
		return jetstream.StreamConfig{
			Name:        name,
			Description: desc,
			Subjects:    []string{subject},
			Retention:   retention,
			MaxAge:      maxAge,
			MaxBytes:    maxBytes,
			Storage:     s.Storage,
			Replicas:    s.Replicas,
			Duplicates:  dup,
			MaxMsgSize:  s.MaxMsgSize,
			Discard:     discard,
		}
	}
	dlq := mk(n.StreamDLQ(), n.DLQAll(), "bulkaction rejected messages, one subject per tenant and reason", jetstream.LimitsPolicy, s.MaxAge, s.DLQMaxBytes)
	dlq.MaxMsgsPerSubject = s.DLQMaxMsgsPerSubject
	events := mk(n.StreamEvents(), n.EventsAll(), "bulkaction group state changes", jetstream.LimitsPolicy, s.MaxAge, s.EventsMaxBytes)
	events.MaxMsgsPerSubject = s.EventsMaxMsgsPerSubject
	return []jetstream.StreamConfig{
		mk(n.StreamSubmit(), n.SubmitAll(), "bulkaction job submissions, seals and cancels (a retained log)", jetstream.LimitsPolicy, 0, s.SubmitMaxBytes),
		mk(n.StreamReady(), n.ReadyAll(), "bulkaction admitted jobs, one subject per job type", jetstream.WorkQueuePolicy, 0, s.ReadyMaxBytes),
		mk(n.StreamResult(), n.ResultAll(), "bulkaction job results", jetstream.WorkQueuePolicy, 0, s.ResultMaxBytes),
		events,
		dlq,
	}
}

// EnsureStreams creates the streams of [StreamConfigs] and the bucket of
// [TenantsBucketConfig] that do not exist and updates the ones that do, so
// it is safe to call at every start: a second call with the same settings
// changes nothing. An error names the stream or bucket.
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
		if cfg.Name == n.StreamSubmit() {
			if err := checkSubmitRetention(ctx, js, cfg.Name); err != nil {
				return err
			}
		}
		if _, err := js.CreateOrUpdateStream(ctx, cfg); err != nil {
			if isResourcesExceeded(err) {
				return fmt.Errorf("natsutil: stream %s: its byte limit %d (%s storage) does not fit in what the "+
					"server has left of its JetStream store (max_file_store / max_memory_store): %w: %w",
					cfg.Name, cfg.MaxBytes, cfg.Storage, ErrStreamResources, err)
			}
			return fmt.Errorf("natsutil: stream %s: %w", cfg.Name, err)
		}
	}
	if _, err := js.CreateOrUpdateKeyValue(ctx, TenantsBucketConfig(n, s)); err != nil {
		return fmt.Errorf("natsutil: bucket %s: %w", n.BucketTenants(), err)
	}
	return nil
}

// TenantsBucketConfig is the configuration of the key-value bucket named
// [contracts.Names.BucketTenants], the durable record of the tenant settings
// SUBMIT does not carry (docs/ARCHITECTURE.md §6.7): its storage and
// replicas are the streams', and it keeps each key's last value only.
func TenantsBucketConfig(n contracts.Names, s StreamSettings) jetstream.KeyValueConfig {
	s = s.withDefaults()
	return jetstream.KeyValueConfig{
		Bucket:      n.BucketTenants(),
		Description: "bulkaction tenant settings: default sending windows and callback secrets",
		History:     1,
		Storage:     s.Storage,
		Replicas:    s.Replicas,
	}
}

// ErrSubmitWorkQueue is wrapped by the error of [EnsureStreams] when SUBMIT
// exists as a work queue, as versions before the replay of SUBMIT created
// it: JetStream cannot change a stream's retention policy.
var ErrSubmitWorkQueue = errors.New("natsutil: SUBMIT is a work queue; it must be a retained log")

// checkSubmitRetention refuses a SUBMIT stream that is a work queue, with
// what to do about it: nothing is deleted here, since a submission could
// arrive between a check that it is empty and its deletion.
func checkSubmitRetention(ctx context.Context, js jetstream.JetStream, name string) error {
	st, err := js.Stream(ctx, name)
	if err != nil {
		return nil // absent (created below) or unreadable (the update says so)
	}
	info := st.CachedInfo()
	if info.Config.Retention != jetstream.WorkQueuePolicy {
		return nil
	}
	return fmt.Errorf("natsutil: stream %s: %w: stop the producers, let the fetchers drain it (it holds %d messages), "+
		"delete it (nats stream rm %s) and start again (docs/operations.md §5)", name, ErrSubmitWorkQueue, info.State.Msgs, name)
}

// ErrStreamResources is wrapped by the error of [EnsureStreams] when the
// server cannot reserve a stream's byte limit in its JetStream store.
var ErrStreamResources = errors.New("natsutil: insufficient JetStream resources for the stream limits")

// JetStream error codes of the server's storage limits.
const (
	errCodeStoreFailed        jetstream.ErrorCode = 10077 // JSStreamStoreFailedF: "maximum bytes exceeded", ...
	errCodeMemoryResources    jetstream.ErrorCode = 10028 // JSMemoryResourcesExceededErr
	errCodeStorageResources   jetstream.ErrorCode = 10047 // JSStorageResourcesExceededErr
	errCodeInsufficientStream jetstream.ErrorCode = 10023 // JSInsufficientResourcesErr
)

func isResourcesExceeded(err error) bool {
	var api *jetstream.APIError
	if !errors.As(err, &api) {
		return false
	}
	switch api.ErrorCode {
	case errCodeMemoryResources, errCodeStorageResources, errCodeInsufficientStream:
		return true
	}
	return false
}

// IsStreamFull reports whether err is a stream's refusal of a publish
// because the stream is at its byte or message limit (DiscardNew): the
// message was not stored, and publishing it again once consumers made room
// stores it. Any error wrapping the PubAck's error qualifies.
func IsStreamFull(err error) bool {
	var api *jetstream.APIError
	if !errors.As(err, &api) || api.ErrorCode != errCodeStoreFailed {
		return false
	}
	d := api.Description
	return strings.Contains(d, "maximum bytes exceeded") || strings.Contains(d, "maximum messages exceeded")
}

// StreamUsage is how much of its byte limit a stream uses.
type StreamUsage struct {
	// Stream is the stream's kind: SUBMIT, READY, RESULT, EVENTS or DLQ.
	Stream string
	// Bytes and Msgs are what the stream holds.
	Bytes, Msgs uint64
	// LimitBytes is the stream's byte limit; 0 when it has none.
	LimitBytes int64
}

// StreamsUsage reads the usage of the five streams named by n, in the order
// of [StreamConfigs] (one stream info request each). A stream that cannot
// be read fails the call, naming it.
func StreamsUsage(ctx context.Context, js jetstream.JetStream, n contracts.Names) ([]StreamUsage, error) {
	kinds := []struct{ kind, name string }{
		{"SUBMIT", n.StreamSubmit()}, {"READY", n.StreamReady()}, {"RESULT", n.StreamResult()},
		{"EVENTS", n.StreamEvents()}, {"DLQ", n.StreamDLQ()},
	}
	out := make([]StreamUsage, 0, len(kinds))
	for _, k := range kinds {
		st, err := js.Stream(ctx, k.name)
		if err != nil {
			return nil, fmt.Errorf("natsutil: stream %s: %w", k.name, err)
		}
		info := st.CachedInfo()
		u := StreamUsage{Stream: k.kind, Bytes: info.State.Bytes, Msgs: info.State.Msgs}
		if info.Config.MaxBytes > 0 {
			u.LimitBytes = info.Config.MaxBytes
		}
		out = append(out, u)
	}
	return out, nil
}

// Unsettled returns the number of stream's messages that are work not yet
// done: for a work-queue stream, every message it holds (an acknowledged
// one is removed); for a retained log (SUBMIT), what its durable consumers
// have not delivered or have not had acknowledged, the most of any of them
// (all its messages while it has none).
//
// It is a gauge, not a proof that the consumers are done: the server counts
// a new message into its consumers' NumPending asynchronously, after it has
// acknowledged the publish, so just after a publish Unsettled can read 0
// while no consumer has seen the message yet. To wait for consumers to
// finish what was published, use [SettledThrough].
func Unsettled(ctx context.Context, js jetstream.JetStream, stream string) (uint64, error) {
	st, err := js.Stream(ctx, stream)
	if err != nil {
		return 0, fmt.Errorf("natsutil: stream %s: %w", stream, err)
	}
	info := st.CachedInfo()
	if info.Config.Retention == jetstream.WorkQueuePolicy {
		return info.State.Msgs, nil
	}
	var most uint64
	durable := false
	cl := st.ListConsumers(ctx)
	for ci := range cl.Info() {
		if ci.Config.Durable == "" {
			continue
		}
		durable = true
		most = max(most, ci.NumPending+uint64(ci.NumAckPending))
	}
	if err := cl.Err(); err != nil {
		return 0, fmt.Errorf("natsutil: consumers of %s: %w", stream, err)
	}
	if !durable {
		return info.State.Msgs, nil
	}
	return most, nil
}

// SettledThrough reports whether every durable consumer of stream has
// settled (acknowledged or terminated) every message up to sequence seq
// that its filter takes: whether each one's ack floor has reached seq. It
// is false while stream has no durable consumer. Unlike [Unsettled], it
// does not depend on the consumers' pending counts, which lag the publishes
// (see there): a message at or below a consumer's ack floor was delivered to
// it and settled.
func SettledThrough(ctx context.Context, js jetstream.JetStream, stream string, seq uint64) (bool, error) {
	st, err := js.Stream(ctx, stream)
	if err != nil {
		return false, fmt.Errorf("natsutil: stream %s: %w", stream, err)
	}
	durable, settled := false, true
	cl := st.ListConsumers(ctx)
	for ci := range cl.Info() {
		if ci.Config.Durable == "" {
			continue
		}
		durable = true
		settled = settled && ci.AckFloor.Stream >= seq
	}
	if err := cl.Err(); err != nil {
		return false, fmt.Errorf("natsutil: consumers of %s: %w", stream, err)
	}
	return durable && settled, nil
}

// StreamMsgs returns the number of messages stream currently holds.
func StreamMsgs(ctx context.Context, js jetstream.JetStream, stream string) (uint64, error) {
	st, err := js.Stream(ctx, stream)
	if err != nil {
		return 0, fmt.Errorf("natsutil: stream %s: %w", stream, err)
	}
	return st.CachedInfo().State.Msgs, nil
}

// AckFloor returns the lowest ack floor (stream sequence) of stream's
// durable consumers: every message up to it that their filters take has
// been settled by each of them. ok is false while stream has no durable
// consumer.
func AckFloor(ctx context.Context, js jetstream.JetStream, stream string) (floor uint64, ok bool, err error) {
	st, err := js.Stream(ctx, stream)
	if err != nil {
		return 0, false, fmt.Errorf("natsutil: stream %s: %w", stream, err)
	}
	cl := st.ListConsumers(ctx)
	for ci := range cl.Info() {
		if ci.Config.Durable == "" {
			continue
		}
		if !ok || ci.AckFloor.Stream < floor {
			floor = ci.AckFloor.Stream
		}
		ok = true
	}
	if err := cl.Err(); err != nil {
		return 0, false, fmt.Errorf("natsutil: consumers of %s: %w", stream, err)
	}
	return floor, ok, nil
}

// LastSeq returns the sequence of the last message published on stream (0
// when none was).
func LastSeq(ctx context.Context, js jetstream.JetStream, stream string) (uint64, error) {
	st, err := js.Stream(ctx, stream)
	if err != nil {
		return 0, fmt.Errorf("natsutil: stream %s: %w", stream, err)
	}
	return st.CachedInfo().State.LastSeq, nil
}
