package cli

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"

	"github.com/bulkaction/bulkaction/internal/config"
	"github.com/bulkaction/bulkaction/internal/conns"
	"github.com/bulkaction/bulkaction/internal/deps"
	"github.com/bulkaction/bulkaction/internal/handoff"
	"github.com/bulkaction/bulkaction/pkg/contracts"
	"github.com/bulkaction/bulkaction/pkg/redisq"
	"github.com/bulkaction/bulkaction/pkg/status"
)

// Need says which servers a verb talks to; combine with |. The zero value
// needs no server.
type Need uint8

// The servers a verb may need.
const (
	// NeedRedis opens Redis and builds the queue (status, stats, watch).
	NeedRedis Need = 1 << iota
	// NeedNATS opens NATS and JetStream (submit, cancel).
	NeedNATS
	// WantNATS opens NATS and JetStream when the server answers within
	// OptionalDialTimeout; when it does not (or refuses the credentials),
	// NC and JS stay nil and Dial does not fail (status: READY's room is
	// then not checked).
	WantNATS
)

// OptionalDialTimeout bounds how long Dial waits for a server that WantNATS
// names.
const OptionalDialTimeout = time.Second

// DialTimeout bounds how long Dial waits for each server to answer.
const DialTimeout = 5 * time.Second

// ErrNotRunning is wrapped by Dial's and CheckStreams' errors when a server
// does not answer or holds no bulkaction streams.
var ErrNotRunning = errors.New("bulkaction is not reachable")

// ErrRejected is wrapped by Dial's errors when a server answers but refuses
// the credentials.
var ErrRejected = errors.New("the server refused the credentials")

// connError is an error of Dial or CheckStreams: its text says which
// server and what to do; it wraps ErrNotRunning or ErrRejected.
type connError struct {
	kind error
	msg  string
}

func (e *connError) Error() string { return e.msg }
func (e *connError) Unwrap() error { return e.kind }

// quietRedisLog drops go-redis's own log lines (its connection pool logs
// every failed dial): Dial reports an unreachable Redis in one sentence.
type quietRedisLog struct{}

func (quietRedisLog) Printf(context.Context, string, ...any) {}

// redisAuthError reports a Redis refusal of the credentials.
func redisAuthError(err error) bool {
	for _, p := range []string{"WRONGPASS", "NOAUTH", "NOPERM"} {
		if strings.HasPrefix(err.Error(), p) {
			return true
		}
	}
	return false
}

// natsAuthError reports a NATS refusal of the credentials.
func natsAuthError(err error) bool {
	return errors.Is(err, nats.ErrAuthorization) || errors.Is(err, nats.ErrAuthExpired) ||
		errors.Is(err, nats.ErrAuthRevoked) || errors.Is(err, nats.ErrAccountAuthExpired)
}

// Conn holds a verb's connections. Fields of servers that were not needed
// are nil. The zero value holds nothing; build one with Dial.
type Conn struct {
	// Config is the configuration the connections were made from.
	Config *config.Config
	// Names gives subjects and stream names (Config.SubjectPrefix).
	Names contracts.Names
	// Queue is set with NeedRedis; every read of Redis goes through it.
	Queue *redisq.Queue
	// rdb is the client Queue uses; Close closes it.
	rdb redis.UniversalClient
	// NC and JS are set with NeedNATS, and with WantNATS when NATS answered.
	NC *nats.Conn
	JS jetstream.JetStream
}

// Dial connects to the servers need names, using cfg's URLs, credentials,
// TLS settings (the options of conns.RedisOptions and conns.NatsOptions),
// prefixes and queue settings. An unreachable server is an error that names
// its variable and wraps ErrNotRunning; errors show URLs redacted and never
// hold a secret.
func Dial(ctx context.Context, cfg *config.Config, need Need) (*Conn, error) {
	c := &Conn{Config: cfg, Names: contracts.Names{Prefix: cfg.SubjectPrefix}}
	if need&NeedRedis != 0 {
		redis.SetLogger(quietRedisLog{})
		rdb, err := conns.RedisClient(cfg, 0, DialTimeout)
		if err != nil {
			return nil, err
		}
		c.rdb = rdb
		pctx, cancel := context.WithTimeout(ctx, DialTimeout)
		err = c.rdb.Ping(pctx).Err()
		cancel()
		if err != nil {
			c.Close()
			if redisAuthError(err) {
				return nil, &connError{kind: ErrRejected, msg: fmt.Sprintf("Redis at %s (%s_REDIS_URL) refused the credentials (%v): check %s_REDIS_USERNAME and %s_REDIS_PASSWORD (or the URL's)",
					config.RedactURL(cfg.RedisURL), config.Prefix, conns.ScrubError(cfg, err), config.Prefix, config.Prefix)}
			}
			return nil, &connError{kind: ErrNotRunning, msg: fmt.Sprintf("Redis at %s (%s_REDIS_URL) does not answer (%v): start everything with \"bulkaction dev\", or point %s_REDIS_URL at your Redis",
				config.RedactURL(cfg.RedisURL), config.Prefix, conns.ScrubError(cfg, err), config.Prefix)}
		}
		if c.Queue, err = redisq.New(ctx, c.rdb, conns.QueueConfig(cfg)); err != nil {
			c.Close()
			return nil, conns.ScrubError(cfg, err)
		}
	}
	if need&WantNATS != 0 && need&NeedNATS == 0 {
		if opts, err := conns.NatsOptions(cfg, "cli"); err == nil {
			if nc, err := nats.Connect(cfg.NatsURL, append(opts, nats.Timeout(OptionalDialTimeout))...); err == nil {
				if js, err := jetstream.New(nc); err == nil {
					c.NC, c.JS = nc, js
				} else {
					nc.Close()
				}
			}
		}
	}
	if need&NeedNATS != 0 {
		opts, err := conns.NatsOptions(cfg, "cli")
		if err != nil {
			c.Close()
			return nil, err
		}
		nc, err := nats.Connect(cfg.NatsURL, append(opts, nats.Timeout(DialTimeout))...)
		if err != nil {
			c.Close()
			if natsAuthError(err) {
				return nil, &connError{kind: ErrRejected, msg: fmt.Sprintf("NATS at %s (%s_NATS_URL) refused the credentials (%v): check %s_NATS_USER/PASSWORD, _TOKEN, _NKEY_FILE, _CREDS_FILE or the URL's",
					config.RedactURL(cfg.NatsURL), config.Prefix, conns.ScrubError(cfg, err), config.Prefix)}
			}
			return nil, &connError{kind: ErrNotRunning, msg: fmt.Sprintf("NATS at %s (%s_NATS_URL) does not answer (%v): start everything with \"bulkaction dev\", or point %s_NATS_URL at your NATS server",
				config.RedactURL(cfg.NatsURL), config.Prefix, conns.ScrubError(cfg, err), config.Prefix)}
		}
		c.NC = nc
		if c.JS, err = jetstream.New(nc); err != nil {
			c.Close()
			return nil, err
		}
	}
	return c, nil
}

// CheckStreams reports, as an error wrapping ErrNotRunning, a NATS server
// that holds no stream named stream (nothing would store what is published).
func (c *Conn) CheckStreams(ctx context.Context, streams ...string) error {
	for _, s := range streams {
		if _, err := c.JS.Stream(ctx, s); err != nil {
			if errors.Is(err, jetstream.ErrStreamNotFound) {
				return &connError{kind: ErrNotRunning, msg: fmt.Sprintf("NATS at %s has no stream %s: start bulkaction (\"bulkaction dev\") with the same %s_SUBJECT_PREFIX first",
					config.RedactURL(c.Config.NatsURL), s, config.Prefix)}
			}
			return fmt.Errorf("stream %s: %w", s, err)
		}
	}
	return nil
}

// Close closes the connections; a nil or zero Conn is fine.
func (c *Conn) Close() {
	if c == nil {
		return
	}
	if c.NC != nil {
		c.NC.Close()
		c.NC = nil
	}
	if c.rdb != nil {
		_ = c.rdb.Close()
		c.rdb = nil
	}
}

// Status reads a group ([status.Read]) with READY's room measured when c
// has a JetStream handle.
func (c *Conn) Status(ctx context.Context, g contracts.GroupRef) (*status.Group, error) {
	var opt status.Options
	if c.JS != nil {
		room := handoff.NewRoom(deps.Deps{NC: c.NC, JS: c.JS, Queue: c.Queue, Names: c.Names}, conns.Ready(c.Config).Capacity)
		opt.Room = func(ctx context.Context) (map[string]int, int, error) {
			rooms, err := room.Measure(ctx)
			return rooms.ByType, rooms.Capacity, err
		}
	}
	return status.Read(ctx, c.Queue, g, opt)
}
