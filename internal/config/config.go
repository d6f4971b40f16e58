// Package config reads bulkaction's configuration from BULKACTION_*
// environment variables (docs/ARCHITECTURE.md §7) and checks it. Only main reads the
// environment; services take the typed values.
package config

import (
	"fmt"
	"os"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/kelseyhightower/envconfig"

	"github.com/bulkaction/bulkaction/pkg/contracts"
)

// Prefix is the environment variable prefix.
const Prefix = "BULKACTION"

// MaxRedisShards is the most REDIS_SHARDS: redisq.MaxShards, one shard per
// Redis Cluster slot (this package does not import redisq; a test of
// internal/conns checks they agree).
const MaxRedisShards = 16384

// Config is every setting of every target. The `desc` tags feed `bulkaction
// config` and the README's configuration table.
type Config struct {
	RedisURL         string `envconfig:"REDIS_URL" default:"redis://127.0.0.1:6379/0" desc:"Redis server (7.x+) holding queues and counters; rediss:// for TLS; a password in it is shown as xxxxx"`
	RedisUsername    string `envconfig:"REDIS_USERNAME" prefixonly:"true" desc:"Redis ACL user; overrides the URL's"`
	RedisPassword    string `envconfig:"REDIS_PASSWORD" prefixonly:"true" desc:"password of the ACL user (or requirepass); overrides the URL's; never printed"`
	RedisTLSCAFile   string `envconfig:"REDIS_TLS_CA_FILE" prefixonly:"true" desc:"PEM CA certificates that sign Redis's certificate (empty = system roots); setting any REDIS_TLS_* file turns TLS on"`
	RedisTLSCertFile string `envconfig:"REDIS_TLS_CERT_FILE" prefixonly:"true" desc:"PEM client certificate for Redis (with REDIS_TLS_KEY_FILE)"`
	RedisTLSKeyFile  string `envconfig:"REDIS_TLS_KEY_FILE" prefixonly:"true" desc:"PEM private key of REDIS_TLS_CERT_FILE"`
	RedisPrefix      string `envconfig:"REDIS_PREFIX" default:"bulk-action:" desc:"prefix of every Redis key; may carry a hash tag ({bulk-action}:), which REDIS_CLUSTER_ADDRS requires with one shard; with REDIS_SHARDS above 1 it must carry none"`
	RedisCluster     string `envconfig:"REDIS_CLUSTER_ADDRS" desc:"Redis Cluster seed nodes (host:port, comma-separated): connect to a cluster instead of REDIS_URL's server (whose credentials, TLS and host name still apply); with one shard every key lives in the slot of REDIS_PREFIX's hash tag (empty = a single server)"`
	RedisShards      int    `envconfig:"REDIS_SHARDS" default:"1" desc:"logical shards the tenants are spread over, each in a hash tag of its own ({s<i>}), so a Redis Cluster places them on its primaries; fixed for an installation's life (another number is refused at start); 1 = one slot, today's keys"`
	NatsURL          string `envconfig:"NATS_URL" default:"nats://127.0.0.1:4222" desc:"NATS server(s) with JetStream, comma-separated; tls:// for TLS; credentials in it are shown as xxxxx"`
	NatsUser         string `envconfig:"NATS_USER" prefixonly:"true" desc:"NATS user (with NATS_PASSWORD); one auth method at most: user, token, NKey, creds or the URL's"`
	NatsPassword     string `envconfig:"NATS_PASSWORD" prefixonly:"true" desc:"password of NATS_USER; never printed"`
	NatsToken        string `envconfig:"NATS_TOKEN" prefixonly:"true" desc:"NATS authentication token; never printed"`
	NatsNKeyFile     string `envconfig:"NATS_NKEY_FILE" prefixonly:"true" desc:"file holding a NATS user NKey seed (SU...)"`
	NatsCredsFile    string `envconfig:"NATS_CREDS_FILE" prefixonly:"true" desc:"NATS .creds file (user JWT and NKey seed, decentralized auth)"`
	NatsTLSCAFile    string `envconfig:"NATS_TLS_CA_FILE" prefixonly:"true" desc:"PEM CA certificates that sign the NATS server's certificate (empty = system roots); setting any NATS_TLS_* file turns TLS on"`
	NatsTLSCertFile  string `envconfig:"NATS_TLS_CERT_FILE" prefixonly:"true" desc:"PEM client certificate for NATS (with NATS_TLS_KEY_FILE)"`
	NatsTLSKeyFile   string `envconfig:"NATS_TLS_KEY_FILE" prefixonly:"true" desc:"PEM private key of NATS_TLS_CERT_FILE"`
	SubjectPrefix    string `envconfig:"SUBJECT_PREFIX" default:"bulkaction" desc:"first token of every subject; stream names derive from it"`
	HTTPAddr         string `envconfig:"HTTP_ADDR" default:":8080" desc:"address of the unauthenticated /metrics, /healthz and /readyz (empty = off); the default listens on every interface, as containers need: use 127.0.0.1:8080 on a shared host"`
	LogFormat        string `envconfig:"LOG_FORMAT" default:"json" desc:"json or text"`
	LogLevel         string `envconfig:"LOG_LEVEL" default:"info" desc:"debug, info, warn or error"`

	Alpha              float64 `envconfig:"ALPHA" default:"0" desc:"fair-queue progress weight in ms: 0 round robin by age; >0 pushes well-progressed groups back; <0 favours nearly-done groups (see README)"`
	AdmissionMode      string  `envconfig:"ADMISSION_MODE" default:"paced" desc:"paced or seed"`
	GlobalRps          int     `envconfig:"GLOBAL_RPS" default:"10000" desc:"jobs admitted per rate-limit window across all groups"`
	RateLimitWindowMs  int     `envconfig:"RATE_LIMIT_WINDOW_MS" default:"1000" desc:"rate-limit window"`
	PacingBurstMs      int     `envconfig:"PACING_BURST_MS" default:"0" desc:"paced mode: how far ahead of the even pace admissions may run (0 = window/25)"`
	TypeRateLimits     string  `envconfig:"TYPE_RATE_LIMITS" default:"" desc:"per-job-type rate limits beside GLOBAL_RPS, comma-separated <type>=<n>/s in jobs per second, e.g. sms=20/s,email=500/s (empty = none); a type's rate is shared by the tenants and groups using it in fair order, and jobs over it wait queued, their groups keeping their place; n x RATE_LIMIT_WINDOW_MS must be a multiple of 1000"`
	ActiveGroupStaleMs int     `envconfig:"ACTIVE_GROUP_STALE_MS" default:"30000" desc:"a group that has not asked for capacity this long leaves the active set"`
	ReadyQueueMaxSize  int     `envconfig:"READY_QUEUE_MAX_SIZE" default:"0" desc:"READY room of each job type: admit jobs of a type only while READY holds fewer of them (0 = 16 x WORKER_COUNT x WORKER_INSTANCES)"`
	ReadyPackJobs      int     `envconfig:"READY_PACK_JOBS" default:"16" desc:"most jobs of one type the fetcher and dispatcher pack into one READY message (1 = one job per message: lowest latency, most messages); a pack waits for nothing, it takes the jobs of one admission or release round"`
	UnservedTypes      string  `envconfig:"UNSERVED_TYPES" default:"hold" desc:"jobs of a type no live worker serves: hold (keep them queued and report them) or admit (into their type's own READY room)"`
	WorkerInstances    int     `envconfig:"WORKER_INSTANCES" default:"1" desc:"expected worker instances, for the READY capacity default"`
	AdmitBatchSize     int     `envconfig:"ADMIT_BATCH_SIZE" default:"256" desc:"most jobs one admission call takes"`
	IngestBatchSize    int     `envconfig:"INGEST_BATCH_SIZE" default:"500" desc:"most submit messages the fetcher takes per fetch"`
	LeaseMs            int     `envconfig:"LEASE_MS" default:"30000" desc:"an admitted job not confirmed on READY within this is re-published"`
	BaseBackoffMs      int     `envconfig:"BASE_BACKOFF_MS" default:"1000" desc:"backoff of an uncongested group (at least 1; there is no zero backoff)"`
	MaxBackoffMs       int     `envconfig:"MAX_BACKOFF_MS" default:"120000" desc:"cap of every backoff"`
	CongestionEnabled  bool    `envconfig:"CONGESTION_ENABLED" default:"true" desc:"false = fixed BASE_BACKOFF_MS for every backoff"`
	DispatchIntervalMs int     `envconfig:"DISPATCH_INTERVAL_MS" default:"50" desc:"dispatcher's longest sleep between releases"`
	DispatchBatchSize  int     `envconfig:"DISPATCH_BATCH_SIZE" default:"500" desc:"most jobs one release call moves"`

	AdaptiveRateEnabled                  bool          `envconfig:"ADAPTIVE_RATE_ENABLED" default:"false" desc:"learn per destination (a job's type) the rate it accepts from its 429s and admit no faster: workers report accepted and throttled jobs, admission and releases take the learned rate as the type's limit, split between tenants in fair order (docs/operations.md)"`
	AdaptiveRateIncrease                 float64       `envconfig:"ADAPTIVE_RATE_INCREASE" default:"5" desc:"additive increase of a destination's learned rate, jobs/s per second while it accepts and is used at half its rate or more"`
	AdaptiveRateIncreaseRatio            float64       `envconfig:"ADAPTIVE_RATE_INCREASE_RATIO" default:"0.5" desc:"proportional increase of a destination's learned rate: each second it also grows by this share of its distance from the rate at its last decrease, so it comes back quickly after a decrease, slows near the rate that was too much and speeds up past it; half a decrease's worth past it (1.1 × it for a decrease of 0.8) it at least doubles each second until a throttle, which halves it (0 = additive only, no doubling)"`
	AdaptiveRateDecrease                 float64       `envconfig:"ADAPTIVE_RATE_DECREASE" default:"0.8" desc:"multiplicative decrease of a destination's learned rate on a 429 or 503 (between 0 and 1, both excluded); the first throttle starts it at this times what the destination accepted in the last second; a throttle once the rate is back at the rate of its last decrease takes half the decrease (0.9 for 0.8)"`
	AdaptiveRateFloor                    float64       `envconfig:"ADAPTIVE_RATE_FLOOR" default:"1" desc:"least learned rate of a destination, jobs/s (above 0)"`
	AdaptiveRateCeiling                  float64       `envconfig:"ADAPTIVE_RATE_CEILING" default:"0" desc:"most learned rate of a destination, jobs/s (0 = none; TYPE_RATE_LIMITS still caps it)"`
	AdaptiveRateDecreaseHold             time.Duration `envconfig:"ADAPTIVE_RATE_DECREASE_HOLD" default:"1s" desc:"least time between two decreases of a destination's rate, so the throttles of one overshoot count once (0 = 1s)"`
	AdaptiveRateMaxDestinations          int           `envconfig:"ADAPTIVE_RATE_MAX_DESTINATIONS" default:"1000" desc:"most destinations whose rate is learned at once; a new one past it is refused (not learned, logged) until one is forgotten after 10 minutes without reports"`
	AdaptiveRateMaxDestinationsPerTenant int           `envconfig:"ADAPTIVE_RATE_MAX_DESTINATIONS_PER_TENANT" default:"100" desc:"most explicit destinations (a job's destination, or an http job's host) a tenant uses at once; a job naming a new one past it falls back to its type (counted, logged), until one is unused for 10 minutes"`
	AdaptiveRateTimeoutThrottles         bool          `envconfig:"ADAPTIVE_RATE_TIMEOUT_THROTTLES" default:"false" desc:"count a job that timed out as a throttle of its destination (decreasing its learned rate) rather than as accepted"`

	TenantMaxQueuedJobs   int `envconfig:"TENANT_MAX_QUEUED_JOBS" default:"0" desc:"most jobs a tenant may have accepted and not finished, in its groups that have not ended; a jobs message that would go beyond is dead-lettered as over_quota (0 = unlimited; per-tenant limits: bulkaction tenant quota)"`
	TenantMaxActiveGroups int `envconfig:"TENANT_MAX_ACTIVE_GROUPS" default:"0" desc:"most groups a tenant may have that exist and have not ended; a jobs message that would create one more is dead-lettered as over_quota (0 = unlimited; per-tenant limits: bulkaction tenant quota)"`

	WorkerCount           int    `envconfig:"WORKER_COUNT" default:"10" desc:"jobs a worker instance runs at once"`
	WorkerTypes           string `envconfig:"WORKER_TYPES" default:"" desc:"comma-separated job types this worker serves (empty = all its processors)"`
	JobTimeoutMs          int    `envconfig:"JOB_TIMEOUT_MS" default:"30000" desc:"per-job timeout passed through the context"`
	MaxRetryCount         int    `envconfig:"MAX_RETRY_COUNT" default:"3" desc:"retries after retryable errors before a job is FAILED (rate-limited attempts do not count)"`
	MaxThrottles          int    `envconfig:"MAX_THROTTLES" default:"50" desc:"rate-limited attempts (429s) a job may retry, each after its Retry-After or the congestion backoff, before it is FAILED"`
	MaxDeliveries         int    `envconfig:"MAX_DELIVERIES" default:"5" desc:"runs of one attempt alone in its worker, after a worker stopped while the job ran, before it is FAILED without running (a poison job); jobs handed back on purpose, or never claimed because Redis was unreachable, spend none"`
	ShutdownGracePeriodMs int    `envconfig:"SHUTDOWN_GRACE_PERIOD_MS" default:"30000" desc:"time in-flight jobs get to finish on SIGTERM"`
	WorkerIsolation       string `envconfig:"WORKER_ISOLATION" default:"none" desc:"where the worker runs processors: none (in the worker process) or process (each job in a child process of the same program that runs one job at a time, up to WORKER_COUNT of them, so that a processor that crashes its process takes down only its own job, which runs again and is FAILED after MAX_DELIVERIES more crashes; not in dev)"`
	WorkerStateDir        string `envconfig:"WORKER_STATE_DIR" default:"" desc:"directory (outliving the process, not shared between hosts: an emptyDir) where a worker lists the READY messages it holds, so that the worker restarted there after a crash hands them back at once instead of after the ack wait (empty = none)"`
	HTTPProcessorURL      string `envconfig:"HTTP_PROCESSOR_URL" default:"" desc:"default URL of the http processor"`

	HTTPAllowedHosts []string `envconfig:"HTTP_ALLOWED_HOSTS" prefixonly:"true" default:"" desc:"comma-separated hosts the http processor may call: api.example.com, *.example.com (its subdomains), an IP address or an address range (10.0.0.0/8), each with an optional :port (empty = none: every http job fails; HTTP_PROCESSOR_URL's host must be listed too); a loopback, link-local, private or CGNAT address a host resolves to is refused unless its address or range is listed"`

	CallbackRetryFor    time.Duration `envconfig:"CALLBACK_RETRY_FOR" default:"24h" desc:"how long the aggregators retry a group's completion callback after the group ended (or after a retry by hand) before it is marked failed"`
	CallbackFirstRetry  time.Duration `envconfig:"CALLBACK_FIRST_RETRY" default:"5s" desc:"delay after a callback's first failed attempt; it doubles after each further one, up to 1h"`
	CallbackTimeout     time.Duration `envconfig:"CALLBACK_TIMEOUT" default:"10s" desc:"bound of one callback attempt (connecting, sending, reading at most 4 KiB of the answer); callbacks go only where the http processor may go (HTTP_ALLOWED_HOSTS and its address checks)"`
	CallbackSecretGrace time.Duration `envconfig:"CALLBACK_SECRET_GRACE" default:"24h" desc:"after a tenant's callback secret is rotated, how long the previous one keeps signing beside the new one (0 = it stops at once)"`

	ResultBatchSize   int           `envconfig:"RESULT_BATCH_SIZE" default:"256" desc:"results the aggregator records per batch"`
	JobTTL            time.Duration `envconfig:"JOB_TTL" default:"24h" desc:"how long a finished job's hash is kept (at least 1s, whole seconds)"`
	KeepSucceededJobs bool          `envconfig:"KEEP_SUCCEEDED_JOBS" default:"true" desc:"keep a succeeded job's hash for JOB_TTL, as every finished job's; false deletes it as soon as its success is recorded (BullMQ's removeOnComplete), so a bulk action's Redis holds its queued, running and failed jobs only: its group's counts stay exact and its id still makes a re-sent job a duplicate, but the job itself can no longer be read"`
	GroupTTL          time.Duration `envconfig:"GROUP_TTL" default:"168h" desc:"how long an ended group's meta is kept (at least 1s, whole seconds)"`
	StuckAfter        time.Duration `envconfig:"STUCK_AFTER" default:"5m" desc:"a running group without progress this long is repaired (re-queued, leases re-published, jobs whose claims expired re-published, leaked in-flight slots freed, completed when done) and, if nothing needed repair, reported stuck; above CLAIM_TTL"`
	ClaimTTL          time.Duration `envconfig:"CLAIM_TTL" default:"30s" desc:"a worker's claim of a job lasts this long unless renewed (every third of it, while the job runs, waits for a slot or its result is held); only a job whose claim expired (its worker stopped, or lost Redis this long) runs again; at least 1s"`
	GroupIdleTTL      time.Duration `envconfig:"GROUP_IDLE_TTL" default:"168h" desc:"an unsealed group without work (paused, or jobs queued, backing off, leased or running) and without activity (creation, start, result, pause, resume, seal) this long is abandoned: it leaves the stuck check and its keys expire after GROUP_TTL (at least 1s, whole seconds)"`

	StreamStorage   string        `envconfig:"STREAM_STORAGE" default:"file" desc:"file or memory"`
	StreamReplicas  int           `envconfig:"STREAM_REPLICAS" default:"1" desc:"JetStream replicas per stream"`
	StreamMaxAge    time.Duration `envconfig:"STREAM_MAX_AGE" default:"168h" desc:"max age of EVENTS and DLQ messages"`
	DuplicateWindow time.Duration `envconfig:"DUPLICATE_WINDOW" default:"2m" desc:"JetStream dedupe window; at least LEASE_MS, so a re-published job is still deduplicated"`
	MaxMsgSize      int           `envconfig:"MAX_MSG_SIZE" default:"1048576" desc:"largest message a stream accepts, 1 KiB to 64 MiB; the NATS server's max_payload must be at least this"`
	MaxPayloadBytes int           `envconfig:"MAX_PAYLOAD_BYTES" default:"262144" desc:"largest job payload accepted"`

	StreamSubmitMaxBytes int           `envconfig:"STREAM_SUBMIT_MAX_BYTES" default:"0" desc:"byte limit of the SUBMIT stream: once full it refuses submissions (clients and the gateway get an error; nothing accepted is dropped) until the fetchers drain it (0 = 1 GiB, 64 MiB with STREAM_STORAGE=memory; -1 = no limit; else at least MAX_MSG_SIZE)"`
	SubmitReplayWindow   time.Duration `envconfig:"SUBMIT_REPLAY_WINDOW" default:"1h" desc:"how long SUBMIT keeps a message after the fetchers applied it to Redis, so that a Redis restored from an older snapshot (or a failover that lost recent writes) gets back what was applied after it (0 = none; applied messages are purged sooner once SUBMIT is half full)"`
	StreamReadyMaxBytes  int           `envconfig:"STREAM_READY_MAX_BYTES" default:"0" desc:"byte limit of the READY stream: once full, admissions and releases wait and the jobs stay queued or leased (0 = 256 MiB, 32 MiB with STREAM_STORAGE=memory; -1 = no limit; else at least MAX_MSG_SIZE)"`
	StreamResultMaxBytes int           `envconfig:"STREAM_RESULT_MAX_BYTES" default:"0" desc:"byte limit of the RESULT stream: once full, workers hold their finished jobs and retry the result until the aggregators make room (0 = 256 MiB, 32 MiB with STREAM_STORAGE=memory; -1 = no limit; else at least MAX_MSG_SIZE)"`
	StreamEventsMaxBytes int           `envconfig:"STREAM_EVENTS_MAX_BYTES" default:"0" desc:"byte limit of the EVENTS stream: past it the oldest events are dropped (an event stream resumed from a dropped one starts at the oldest kept and says so) (0 = 1 GiB, 32 MiB with STREAM_STORAGE=memory; -1 = no limit, STREAM_MAX_AGE only; else at least MAX_MSG_SIZE)"`
	StreamDLQMaxBytes    int           `envconfig:"STREAM_DLQ_MAX_BYTES" default:"0" desc:"byte limit of the DLQ stream: past it the oldest dead letters are dropped (0 = 1 GiB, 16 MiB with STREAM_STORAGE=memory; -1 = no limit, STREAM_MAX_AGE only; else at least MAX_MSG_SIZE)"`
	StreamEventsPerGroup int           `envconfig:"STREAM_EVENTS_MAX_MSGS_PER_GROUP" default:"10000" desc:"events EVENTS keeps of one group (one subject): past it the group's oldest are dropped (its newest, the current state, is always kept), so that a group paused and resumed in a loop neither inflates its own replay nor pushes out other groups' events (-1 = no limit)"`
	StreamDLQPerSubject  int           `envconfig:"STREAM_DLQ_MAX_MSGS_PER_SUBJECT" default:"1000" desc:"dead letters the DLQ keeps of one tenant and one reason (one subject, bulkaction.dlq.<tenant>.<reason>): past it the oldest of that tenant and reason are dropped, so one tenant's garbage does not push out another's (-1 = no limit)"`

	GatewayAddr           string        `envconfig:"GATEWAY_ADDR" default:":8090" desc:"listen address of the gateway's HTTP API (/v1) and dashboard (/ui/)"`
	GatewayKeysFile       string        `envconfig:"GATEWAY_KEYS_FILE" default:"" desc:"the gateway's API keys: a file of lines <sha256:hex> <tenant, or * for admin> [name] (bulkaction gateway key makes them), re-read when it changes; required by the gateway target"`
	GatewayIdempotencyTTL time.Duration `envconfig:"GATEWAY_IDEMPOTENCY_TTL" default:"24h" desc:"how long the gateway keeps the response of a request with an Idempotency-Key (at least 1s)"`
	GatewaySSEHeartbeat   time.Duration `envconfig:"GATEWAY_SSE_HEARTBEAT" default:"15s" desc:"interval of keep-alive comments on an idle Server-Sent Events stream"`
	GatewaySpoolDir       string        `envconfig:"GATEWAY_SPOOL_DIR" default:"" desc:"directory of the temporary files that hold a large jobs request while it is validated (empty = the system's temporary directory)"`

	GatewayMaxBodyBytes         int           `envconfig:"GATEWAY_MAX_BODY_BYTES" default:"1073741824" desc:"largest body of a jobs request; a longer one is refused with 413 as soon as it goes past, nothing of it submitted (other requests' bodies: at most 1 MiB)"`
	GatewayMaxJobsPerRequest    int           `envconfig:"GATEWAY_MAX_JOBS_PER_REQUEST" default:"1000000" desc:"most jobs in one jobs request; one more is refused with 413, nothing of it submitted"`
	GatewayReadHeaderTimeout    time.Duration `envconfig:"GATEWAY_READ_HEADER_TIMEOUT" default:"10s" desc:"time a client has to send a request's headers"`
	GatewayBodyIdleTimeout      time.Duration `envconfig:"GATEWAY_BODY_IDLE_TIMEOUT" default:"30s" desc:"a request body that sends nothing this long is cut off (408), and its Idempotency-Key and temporary file let go"`
	GatewaySSEWriteTimeout      time.Duration `envconfig:"GATEWAY_SSE_WRITE_TIMEOUT" default:"30s" desc:"an event stream whose client takes a write longer than this (it stopped reading) is closed"`
	GatewayTenantRequestRate    int           `envconfig:"GATEWAY_TENANT_REQUEST_RATE" default:"100" desc:"requests per second of one tenant's keys over every gateway replica, 10 s worth at once; more are refused with 429 (0 = no limit; admin keys are not limited)"`
	GatewayTenantJobRate        int           `envconfig:"GATEWAY_TENANT_JOB_RATE" default:"50000" desc:"jobs per second one tenant may submit through the gateways, 10 s worth at once; past that the gateway reads the tenant's jobs at this rate (refused requests' jobs count too), and a request finding the tenant more than 10 s in debt is refused with 429 (0 = no limit)"`
	GatewayTenantByteRate       int           `envconfig:"GATEWAY_TENANT_BYTE_RATE" default:"67108864" desc:"bytes of jobs requests per second one tenant may send through the gateways, 10 s worth at once; past that the gateway reads the tenant's bodies at this rate (refused requests' bytes count too), and a jobs request finding the tenant more than 10 s in debt is refused with 429 (0 = no limit)"`
	GatewayTenantConcurrentReqs int           `envconfig:"GATEWAY_TENANT_CONCURRENT_REQUESTS" default:"32" desc:"requests of one tenant running at once over every gateway replica, event streams not counted; one more is refused with 429 (0 = no limit)"`
	GatewayTenantSSEStreams     int           `envconfig:"GATEWAY_TENANT_SSE_STREAMS" default:"100" desc:"event streams (SSE) one tenant may keep open over every gateway replica; one more is refused with 429 (0 = no limit)"`
	GatewayTenantSubmitBytes    int           `envconfig:"GATEWAY_TENANT_SUBMIT_BYTES" default:"0" desc:"most bytes of one tenant's submissions through the gateway that SUBMIT may hold before the fetchers apply them; a jobs request that would go past it is refused whole, 429 (413 when it is larger than the room itself), so that no tenant fills SUBMIT for the others (0 = a quarter of SUBMIT's byte limit; -1 = no limit; else at least MAX_MSG_SIZE; a tenant's own: field <tenant>:submitBytes of the door-limits HASH)"`
}

// Load reads the environment. An unparsable or out-of-range value is an
// error naming the variable.
func Load() (*Config, error) {
	var c Config
	if err := envconfig.Process(Prefix, &c); err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	clearUnprefixed(&c)
	if err := c.Validate(); err != nil {
		return nil, err
	}
	return &c, nil
}

// Validate checks ranges; errors name the environment variable.
func (c *Config) Validate() error {
	bad := func(name string, v any, want string) error {
		return fmt.Errorf("config: %s_%s=%v: %s", Prefix, name, v, want)
	}
	if c.RedisShards < 1 || c.RedisShards > MaxRedisShards {
		return bad("REDIS_SHARDS", c.RedisShards, fmt.Sprintf("must be between 1 and %d", MaxRedisShards))
	}
	if c.RedisShards > 1 && strings.ContainsAny(c.RedisPrefix, "{}") {
		return bad("REDIS_PREFIX", c.RedisPrefix, "must carry no hash tag when REDIS_SHARDS is above 1: each shard's keys carry their own")
	}
	if c.RedisCluster != "" && c.RedisShards == 1 && !HasHashTag(c.RedisPrefix) {
		return bad("REDIS_PREFIX", c.RedisPrefix, "must carry a hash tag, e.g. {bulk-action}:, when REDIS_CLUSTER_ADDRS is set: "+
			"every script reads and writes keys of one slot")
	}
	type rng struct {
		name string
		v    int
		min  int
	}
	for _, r := range []rng{
		{"GLOBAL_RPS", c.GlobalRps, 1}, {"RATE_LIMIT_WINDOW_MS", c.RateLimitWindowMs, 1}, {"PACING_BURST_MS", c.PacingBurstMs, 0},
		{"ACTIVE_GROUP_STALE_MS", c.ActiveGroupStaleMs, 1}, {"READY_QUEUE_MAX_SIZE", c.ReadyQueueMaxSize, 0}, {"READY_PACK_JOBS", c.ReadyPackJobs, 1},
		{"WORKER_INSTANCES", c.WorkerInstances, 1}, {"ADMIT_BATCH_SIZE", c.AdmitBatchSize, 1}, {"INGEST_BATCH_SIZE", c.IngestBatchSize, 1},
		{"LEASE_MS", c.LeaseMs, 100}, {"BASE_BACKOFF_MS", c.BaseBackoffMs, 1}, {"MAX_BACKOFF_MS", c.MaxBackoffMs, 1},
		{"DISPATCH_INTERVAL_MS", c.DispatchIntervalMs, 1}, {"DISPATCH_BATCH_SIZE", c.DispatchBatchSize, 1},
		{"TENANT_MAX_QUEUED_JOBS", c.TenantMaxQueuedJobs, 0}, {"TENANT_MAX_ACTIVE_GROUPS", c.TenantMaxActiveGroups, 0},
		{"WORKER_COUNT", c.WorkerCount, 1}, {"JOB_TIMEOUT_MS", c.JobTimeoutMs, 1}, {"MAX_RETRY_COUNT", c.MaxRetryCount, 0}, {"MAX_THROTTLES", c.MaxThrottles, 0},
		{"MAX_DELIVERIES", c.MaxDeliveries, 1}, {"SHUTDOWN_GRACE_PERIOD_MS", c.ShutdownGracePeriodMs, 0},
		{"RESULT_BATCH_SIZE", c.ResultBatchSize, 1}, {"STREAM_REPLICAS", c.StreamReplicas, 1},
		{"MAX_MSG_SIZE", c.MaxMsgSize, 1024}, {"MAX_PAYLOAD_BYTES", c.MaxPayloadBytes, 1},
	} {
		if r.v < r.min {
			return bad(r.name, r.v, fmt.Sprintf("must be at least %d", r.min))
		}
	}
	if c.PacingBurstMs > c.RateLimitWindowMs {
		return bad("PACING_BURST_MS", c.PacingBurstMs, fmt.Sprintf("must not exceed RATE_LIMIT_WINDOW_MS (%d)", c.RateLimitWindowMs))
	}
	if c.MaxBackoffMs < c.BaseBackoffMs {
		return bad("MAX_BACKOFF_MS", c.MaxBackoffMs, fmt.Sprintf("must be at least BASE_BACKOFF_MS (%d)", c.BaseBackoffMs))
	}
	if c.MaxMsgSize > MaxMsgSizeLimit {
		return bad("MAX_MSG_SIZE", c.MaxMsgSize, fmt.Sprintf("must be at most %d (64 MiB, the NATS limit)", MaxMsgSizeLimit))
	}
	if c.MaxPayloadBytes >= c.MaxMsgSize {
		return bad("MAX_PAYLOAD_BYTES", c.MaxPayloadBytes, fmt.Sprintf("must be below MAX_MSG_SIZE (%d), which also holds the envelope", c.MaxMsgSize))
	}
	for _, b := range []struct {
		name string
		v    int
	}{{"STREAM_SUBMIT_MAX_BYTES", c.StreamSubmitMaxBytes}, {"STREAM_READY_MAX_BYTES", c.StreamReadyMaxBytes}, {"STREAM_RESULT_MAX_BYTES", c.StreamResultMaxBytes},
		{"STREAM_EVENTS_MAX_BYTES", c.StreamEventsMaxBytes}, {"STREAM_DLQ_MAX_BYTES", c.StreamDLQMaxBytes}} {
		if b.v < -1 || (b.v > 0 && b.v < c.MaxMsgSize) {
			return bad(b.name, b.v, fmt.Sprintf("must be -1 (no limit), 0 (the default) or at least MAX_MSG_SIZE (%d), so that the largest message fits", c.MaxMsgSize))
		}
	}
	if c.StreamEventsPerGroup < -1 || c.StreamEventsPerGroup == 0 {
		return bad("STREAM_EVENTS_MAX_MSGS_PER_GROUP", c.StreamEventsPerGroup, "must be -1 (no limit) or at least 1")
	}
	if c.StreamDLQPerSubject < -1 || c.StreamDLQPerSubject == 0 {
		return bad("STREAM_DLQ_MAX_MSGS_PER_SUBJECT", c.StreamDLQPerSubject, "must be -1 (no limit) or at least 1")
	}
	switch {
	case c.AdaptiveRateIncrease <= 0:
		return bad("ADAPTIVE_RATE_INCREASE", c.AdaptiveRateIncrease, "must be above 0")
	case c.AdaptiveRateIncreaseRatio < 0:
		return bad("ADAPTIVE_RATE_INCREASE_RATIO", c.AdaptiveRateIncreaseRatio, "must not be negative")
	case c.AdaptiveRateDecrease <= 0 || c.AdaptiveRateDecrease >= 1:
		return bad("ADAPTIVE_RATE_DECREASE", c.AdaptiveRateDecrease, "must be between 0 and 1, both excluded")
	case c.AdaptiveRateFloor <= 0:
		return bad("ADAPTIVE_RATE_FLOOR", c.AdaptiveRateFloor, "must be above 0")
	case c.AdaptiveRateCeiling != 0 && c.AdaptiveRateCeiling < c.AdaptiveRateFloor:
		return bad("ADAPTIVE_RATE_CEILING", c.AdaptiveRateCeiling, "must be 0 (none) or at least ADAPTIVE_RATE_FLOOR")
	case c.AdaptiveRateDecreaseHold < 0:
		return bad("ADAPTIVE_RATE_DECREASE_HOLD", c.AdaptiveRateDecreaseHold, "must not be negative")
	case c.AdaptiveRateMaxDestinations < 1:
		return bad("ADAPTIVE_RATE_MAX_DESTINATIONS", c.AdaptiveRateMaxDestinations, "must be at least 1")
	case c.AdaptiveRateMaxDestinationsPerTenant < 1:
		return bad("ADAPTIVE_RATE_MAX_DESTINATIONS_PER_TENANT", c.AdaptiveRateMaxDestinationsPerTenant, "must be at least 1")
	}
	if _, err := c.TypeLimitsPerWindow(); err != nil {
		return bad("TYPE_RATE_LIMITS", c.TypeRateLimits, err.Error())
	}
	switch c.AdmissionMode {
	case "paced", "seed":
	default:
		return bad("ADMISSION_MODE", c.AdmissionMode, "must be paced or seed")
	}
	switch c.WorkerIsolation {
	case "none", "process":
	default:
		return bad("WORKER_ISOLATION", c.WorkerIsolation, "must be none or process")
	}
	switch c.UnservedTypes {
	case "hold", "admit":
	default:
		return bad("UNSERVED_TYPES", c.UnservedTypes, "must be hold or admit")
	}
	switch c.LogFormat {
	case "json", "text":
	default:
		return bad("LOG_FORMAT", c.LogFormat, "must be json or text")
	}
	switch strings.ToLower(c.LogLevel) {
	case "debug", "info", "warn", "warning", "error":
	default:
		return bad("LOG_LEVEL", c.LogLevel, "must be debug, info, warn or error")
	}
	switch c.StreamStorage {
	case "file", "memory":
	default:
		return bad("STREAM_STORAGE", c.StreamStorage, "must be file or memory")
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"JOB_TTL", c.JobTTL}, {"GROUP_TTL", c.GroupTTL}, {"STUCK_AFTER", c.StuckAfter}, {"GROUP_IDLE_TTL", c.GroupIdleTTL}, {"STREAM_MAX_AGE", c.StreamMaxAge}, {"DUPLICATE_WINDOW", c.DuplicateWindow},
		{"GATEWAY_SSE_HEARTBEAT", c.GatewaySSEHeartbeat}, {"GATEWAY_READ_HEADER_TIMEOUT", c.GatewayReadHeaderTimeout},
		{"GATEWAY_BODY_IDLE_TIMEOUT", c.GatewayBodyIdleTimeout}, {"GATEWAY_SSE_WRITE_TIMEOUT", c.GatewaySSEWriteTimeout}} {
		if d.v <= 0 {
			return bad(d.name, d.v, "must be positive")
		}
	}
	// Redis expiries are whole seconds: a TTL under 1s would be 0, which
	// keeps a job forever and deletes a group at once.
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"JOB_TTL", c.JobTTL}, {"GROUP_TTL", c.GroupTTL}, {"GROUP_IDLE_TTL", c.GroupIdleTTL}, {"GATEWAY_IDEMPOTENCY_TTL", c.GatewayIdempotencyTTL}} {
		if d.v < time.Second {
			return bad(d.name, d.v, "must be at least 1s (Redis expiries are whole seconds)")
		}
	}
	if c.ClaimTTL < time.Second {
		return bad("CLAIM_TTL", c.ClaimTTL, "must be at least 1s")
	}
	if c.StuckAfter <= c.ClaimTTL {
		return bad("STUCK_AFTER", c.StuckAfter, fmt.Sprintf("must be above CLAIM_TTL (%s): the repair re-publishes a job whose claim expired only after seeing it expired for a claim TTL", c.ClaimTTL))
	}
	for _, r := range []struct {
		name   string
		v, min int
	}{{"GATEWAY_MAX_BODY_BYTES", c.GatewayMaxBodyBytes, 1 << 10}, {"GATEWAY_MAX_JOBS_PER_REQUEST", c.GatewayMaxJobsPerRequest, 1},
		{"GATEWAY_TENANT_REQUEST_RATE", c.GatewayTenantRequestRate, 0}, {"GATEWAY_TENANT_JOB_RATE", c.GatewayTenantJobRate, 0},
		{"GATEWAY_TENANT_BYTE_RATE", c.GatewayTenantByteRate, 0},
		{"GATEWAY_TENANT_CONCURRENT_REQUESTS", c.GatewayTenantConcurrentReqs, 0}, {"GATEWAY_TENANT_SSE_STREAMS", c.GatewayTenantSSEStreams, 0}} {
		if r.v < r.min {
			return bad(r.name, r.v, fmt.Sprintf("must be at least %d", r.min))
		}
	}
	if v := c.GatewayTenantSubmitBytes; v < -1 || (v > 0 && v < c.MaxMsgSize) {
		return bad("GATEWAY_TENANT_SUBMIT_BYTES", v, fmt.Sprintf("must be -1 (no limit), 0 (a quarter of SUBMIT's limit) or at least MAX_MSG_SIZE (%d), so that the largest message fits", c.MaxMsgSize))
	}
	if c.SubmitReplayWindow < 0 {
		return bad("SUBMIT_REPLAY_WINDOW", c.SubmitReplayWindow, "must not be negative (0 = none)")
	}
	if c.DuplicateWindow < Ms(c.LeaseMs) {
		return bad("DUPLICATE_WINDOW", c.DuplicateWindow, fmt.Sprintf("must be at least LEASE_MS (%s): a job re-published after its lease expires must still be deduplicated", Ms(c.LeaseMs)))
	}
	if err := c.validateCallbacks(); err != nil {
		return err
	}
	return c.validateConnections()
}

// MaxMsgSizeLimit is the largest MAX_MSG_SIZE: the NATS server's largest
// max_payload (64 MiB), well inside the int32 JetStream stores it in.
const MaxMsgSizeLimit = 64 << 20

// MaxTypeRate is the highest rate TYPE_RATE_LIMITS takes for a type, in
// jobs per second.
const MaxTypeRate = 1_000_000

// ParseTypeRateLimits reads TYPE_RATE_LIMITS: comma-separated entries
// <type>=<n>/s, n jobs per second (1..[MaxTypeRate]) of the job type
// (contracts.TypePattern), each type once; spaces around entries are
// ignored. It returns the rates per second by type, nil for an empty
// setting. Errors name the entry.
func ParseTypeRateLimits(s string) (map[string]int, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	out := map[string]int{}
	for _, e := range strings.Split(s, ",") {
		e = strings.TrimSpace(e)
		if e == "" {
			return nil, fmt.Errorf("an empty entry: want <type>=<n>/s, comma-separated")
		}
		typ, rate, ok := strings.Cut(e, "=")
		if !ok {
			return nil, fmt.Errorf("entry %q: want <type>=<n>/s", e)
		}
		typ, rate = strings.TrimSpace(typ), strings.TrimSpace(rate)
		if err := contracts.ValidateType(typ); err != nil {
			return nil, fmt.Errorf("entry %q: job type %q: must match %s", e, typ, contracts.TypePattern)
		}
		num, ok := strings.CutSuffix(rate, "/s")
		if !ok {
			return nil, fmt.Errorf("entry %q: rate %q: want <n>/s, jobs per second", e, rate)
		}
		n, err := strconv.Atoi(strings.TrimSpace(num))
		if err != nil || n < 1 || n > MaxTypeRate {
			return nil, fmt.Errorf("entry %q: rate %q: n must be a whole number from 1 to %d", e, rate, MaxTypeRate)
		}
		if _, dup := out[typ]; dup {
			return nil, fmt.Errorf("entry %q: type %q is limited twice", e, typ)
		}
		out[typ] = n
	}
	return out, nil
}

// TypeLimitsPerWindow returns TYPE_RATE_LIMITS in jobs per rate-limit
// window (RATE_LIMIT_WINDOW_MS), by type; nil when none is set. A rate that
// is not a whole number of jobs per window is an error naming its entry.
func (c *Config) TypeLimitsPerWindow() (map[string]int, error) {
	rates, err := ParseTypeRateLimits(c.TypeRateLimits)
	if err != nil || rates == nil {
		return nil, err
	}
	out := make(map[string]int, len(rates))
	for typ, n := range rates {
		per := int64(n) * int64(c.RateLimitWindowMs)
		if per%1000 != 0 {
			return nil, fmt.Errorf("entry \"%s=%d/s\": %g jobs per RATE_LIMIT_WINDOW_MS (%d ms): must be a whole number of jobs per window",
				typ, n, float64(per)/1000, c.RateLimitWindowMs)
		}
		out[typ] = int(per / 1000)
	}
	return out, nil
}

// clearUnprefixed undoes envconfig's fallback to the variable without the
// prefix for the fields tagged prefixonly (credentials and TLS files): an
// unrelated REDIS_PASSWORD or NATS_TOKEN in the environment, as many
// container images set, must not be sent to a server.
func clearUnprefixed(c *Config) {
	v := reflect.ValueOf(c).Elem()
	t := v.Type()
	for i := range t.NumField() {
		f := t.Field(i)
		if f.Tag.Get("prefixonly") != "true" {
			continue
		}
		if _, ok := os.LookupEnv(Prefix + "_" + f.Tag.Get("envconfig")); !ok {
			v.Field(i).SetZero()
		}
	}
}

// Ms turns a millisecond setting into a duration.
func Ms(v int) time.Duration { return time.Duration(v) * time.Millisecond }

// ClusterAddrs are the seed nodes of REDIS_CLUSTER_ADDRS (none = a single
// server).
func (c *Config) ClusterAddrs() []string {
	var out []string
	for _, a := range strings.Split(c.RedisCluster, ",") {
		if a = strings.TrimSpace(a); a != "" {
			out = append(out, a)
		}
	}
	return out
}

// HasHashTag reports whether every key that starts with prefix has the
// same Redis Cluster hash tag: prefix holds a '{' followed by a '}' with at
// least one byte between them.
func HasHashTag(prefix string) bool {
	open := strings.IndexByte(prefix, '{')
	if open < 0 {
		return false
	}
	end := strings.IndexByte(prefix[open+1:], '}')
	return end > 0
}
