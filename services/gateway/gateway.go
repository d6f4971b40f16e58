package gateway

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/bulkaction/bulkaction/internal/deps"
	"github.com/bulkaction/bulkaction/internal/lifecycle"
	"github.com/bulkaction/bulkaction/internal/setting"
	"github.com/bulkaction/bulkaction/internal/telemetry"
	"github.com/bulkaction/bulkaction/pkg/client"
	"github.com/bulkaction/bulkaction/pkg/redisq"
)

// Defaults of the [Config] fields.
const (
	// DefaultIdempotencyTTL is how long an Idempotency-Key's response is kept.
	DefaultIdempotencyTTL = 24 * time.Hour
	// DefaultHeartbeat is the interval of SSE comments on an idle stream.
	DefaultHeartbeat = 15 * time.Second
	// DefaultMemorySpool is how much of a jobs request's encoded messages
	// stay in memory before the rest goes to a temporary file.
	DefaultMemorySpool = 8 << 20
	// DefaultKeysReload is how often the keys file is checked for changes.
	DefaultKeysReload = 5 * time.Second
	// DefaultShutdownGrace bounds how long in-flight requests get on stop.
	DefaultShutdownGrace = 10 * time.Second
)

// Config configures a [Gateway]. Addr and Keys (or KeysFile) are required;
// every other zero field means its default.
type Config struct {
	// Addr is the listen address, e.g. ":8090" or "127.0.0.1:0".
	Addr string
	// Listener, when set, is used instead of listening on Addr.
	Listener net.Listener
	// KeysFile is the API keys file ([ParseKeys]), re-read when it changes.
	KeysFile string
	// Keys are used instead of KeysFile when set.
	Keys *Keys
	// IdempotencyTTL is how long Idempotency-Key responses are kept.
	IdempotencyTTL time.Duration
	// Heartbeat is the SSE keep-alive interval.
	Heartbeat time.Duration
	// SpoolDir holds the temporary files of large jobs requests ("" = the
	// system's temporary directory).
	SpoolDir string
	// MemorySpool is the part of a jobs request kept in memory.
	MemorySpool int
	// ShutdownGrace bounds how long in-flight requests get on stop (SSE
	// streams are closed at once).
	ShutdownGrace time.Duration
	// ReadyCapacity is READY's room per job type, for the ready_full hold
	// of a group's status (0 = not measured).
	ReadyCapacity int
	// GroupTTL is how long an ended group's meta is kept (for the retry
	// link's expiry); 0 = [redisq.DefaultGroupTTL] (7 days).
	GroupTTL time.Duration
	// Limits bound requests and tenants.
	Limits Limits
	// Callbacks configures completion callbacks (callbacks.go).
	Callbacks CallbackConfig
}

func (c *Config) setDefaults() {
	setting.Default(&c.IdempotencyTTL, DefaultIdempotencyTTL)
	setting.Default(&c.Heartbeat, DefaultHeartbeat)
	setting.Default(&c.MemorySpool, DefaultMemorySpool)
	setting.Default(&c.ShutdownGrace, DefaultShutdownGrace)
	setting.Default(&c.GroupTTL, redisq.DefaultGroupTTL)
	l := &c.Limits
	setting.Default(&l.MaxBodyBytes, DefaultMaxBodyBytes)
	setting.Default(&l.MaxJobsPerRequest, DefaultMaxJobsPerRequest)
	setting.Default(&l.ReadHeaderTimeout, DefaultReadHeaderTimeout)
	setting.Default(&l.BodyIdleTimeout, DefaultBodyIdleTimeout)
	setting.Default(&l.SSEWriteTimeout, DefaultSSEWriteTimeout)
}

// Gateway serves the HTTP API.
type Gateway struct {
	cfg    Config
	deps   deps.Deps
	log    *slog.Logger
	keys   *Keys
	q      *redisq.Queue
	client *client.Client
	// submitFloor is the fetchers' ack floor on SUBMIT, read at most every
	// floorTTL for the requests' room checks.
	submitFloor floorCache
	hub         *hub
	dash        *uiAPI
	idem        *idempotency
	mux         *http.ServeMux
	slots       slotSet
	// penalties refuse a tenant a rate refused, for a moment, without Redis.
	penalties penaltyBox
	// turns share the replica's parsing of jobs requests among tenants.
	turns readTurns
	// failures keeps the pages of GET …/failures readers asked for.
	failures failuresCache

	lifecycle.Started
	mu   sync.Mutex
	addr net.Addr
}

// New builds a gateway on d (NATS, JetStream, Redis).
func New(cfg Config, d deps.Deps) (*Gateway, error) {
	d = d.Fill()
	if cfg.Addr == "" && cfg.Listener == nil {
		return nil, errors.New("gateway: no listen address")
	}
	cfg.setDefaults()
	log := d.Log.With(telemetry.LogComponent, "gateway")
	keys := cfg.Keys
	if keys == nil {
		if cfg.KeysFile == "" {
			return nil, errors.New("gateway: no API keys: set BULKACTION_GATEWAY_KEYS_FILE (bulkaction gateway key makes one)")
		}
		var err error
		if keys, err = LoadKeys(cfg.KeysFile, log); err != nil {
			return nil, err
		}
	}
	if keys.log == nil {
		keys.log = log
	}
	if d.Metrics != nil {
		keys.setGauge(d.Metrics.GatewayKeysBadLines)
	}
	g := &Gateway{
		cfg: cfg, deps: d, log: log, keys: keys, q: d.Queue,
		client: client.New(d.JS, client.Options{Names: d.Names, Limits: d.Limits, TracerProvider: d.TracerProvider}),
	}
	g.hub = newHub(d, log)
	g.dash = newUIAPI(g)
	g.idem = &idempotency{store: d.Queue.Idempotency(), ttl: cfg.IdempotencyTTL, log: log}
	g.mux = g.routes()
	return g, nil
}

// Addr is the address the gateway listens on, once it is ready.
func (g *Gateway) Addr() net.Addr {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.addr
}

// Handler is the gateway's HTTP handler (for tests and embedding).
func (g *Gateway) Handler() http.Handler { return http.HandlerFunc(g.serve) }

// Run serves until ctx ends, then stops taking requests and waits up to
// ShutdownGrace for those in flight.
func (g *Gateway) Run(ctx context.Context) error {
	ln := g.cfg.Listener
	if ln == nil {
		var err error
		if ln, err = net.Listen("tcp", g.cfg.Addr); err != nil {
			return fmt.Errorf("gateway: %w", err)
		}
	}
	hctx, stopHub := context.WithCancel(context.Background())
	defer stopHub()
	if err := g.hub.start(hctx); err != nil {
		_ = ln.Close()
		return err
	}
	go g.keys.watch(hctx, DefaultKeysReload)
	go g.renewSlots(hctx)
	// The dashboard's rate chart has history from the gateway's start.
	g.dash.startSampling()
	srv := &http.Server{
		Handler:           http.HandlerFunc(g.serve),
		ReadHeaderTimeout: g.cfg.Limits.ReadHeaderTimeout,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          slog.NewLogLogger(g.log.Handler(), slog.LevelWarn),
		BaseContext:       func(net.Listener) context.Context { return hctx },
	}
	g.mu.Lock()
	g.addr = ln.Addr()
	g.mu.Unlock()
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	g.log.Info("gateway listening", "addr", ln.Addr().String(), "keys", g.keys.Len())
	g.Signal()
	select {
	case err := <-errc:
		return fmt.Errorf("gateway: %w", err)
	case <-ctx.Done():
	}
	// SSE streams end with the hub; other requests get the grace period.
	g.hub.closeAll()
	sctx, cancel := context.WithTimeout(context.Background(), g.cfg.ShutdownGrace)
	defer cancel()
	err := srv.Shutdown(sctx)
	stopHub()
	if err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("gateway: shutdown: %w", err)
	}
	return nil
}

// principalKey is the context key of a request's Principal.
type principalKey struct{}

// principal returns the request's Principal (set by auth).
func principal(r *http.Request) Principal {
	p, _ := r.Context().Value(principalKey{}).(Principal)
	return p
}

// route is one operation of the API; the OpenAPI document lists the same.
type route struct {
	method, pattern string
	// op is the operationId in the OpenAPI document (openapi.json).
	op string
	h  http.HandlerFunc
	// public routes need no API key.
	public bool
	// idempotent POSTs honour Idempotency-Key.
	idempotent bool
}

func (g *Gateway) table() []route {
	ui := g.dash
	return []route{
		{method: "GET", pattern: "/v1/openapi.json", op: "getOpenAPI", h: g.openAPI, public: true},
		{method: "GET", pattern: "/v1/groups", op: "listGroups", h: g.listGroups},
		{method: "GET", pattern: "/v1/groups/{groupId}", op: "getGroup", h: g.getGroup},
		{method: "POST", pattern: "/v1/groups/{groupId}/jobs", op: "submitJobs", h: g.submitJobs, idempotent: true},
		{method: "POST", pattern: "/v1/groups/{groupId}/seal", op: "sealGroup", h: g.sealGroup, idempotent: true},
		{method: "POST", pattern: "/v1/groups/{groupId}/cancel", op: "cancelGroup", h: g.control, idempotent: true},
		{method: "POST", pattern: "/v1/groups/{groupId}/pause", op: "pauseGroup", h: g.control, idempotent: true},
		{method: "POST", pattern: "/v1/groups/{groupId}/resume", op: "resumeGroup", h: g.control, idempotent: true},
		{method: "POST", pattern: "/v1/groups/{groupId}/schedule", op: "scheduleGroup", h: g.scheduleGroup, idempotent: true},
		{method: "GET", pattern: "/v1/groups/{groupId}/failures", op: "listFailures", h: g.listFailures},
		{method: "GET", pattern: "/v1/groups/{groupId}/failures/{jobId}", op: "getFailure", h: g.getFailure},
		{method: "POST", pattern: "/v1/groups/{groupId}/retry-failed", op: "retryFailed", h: g.retryFailed, idempotent: true},
		{method: "GET", pattern: "/v1/groups/{groupId}/events", op: "groupEvents", h: g.events},
		{method: "GET", pattern: "/v1/groups/{groupId}/progress", op: "groupProgress", h: ui.groupProgress},
		{method: "GET", pattern: "/v1/overview", op: "getOverview", h: ui.overview},
		{method: "GET", pattern: "/v1/overview/events", op: "overviewEvents", h: ui.overviewEvents},
		{method: "GET", pattern: "/v1/tenants", op: "listTenants", h: ui.listTenants},
		{method: "POST", pattern: "/v1/groups/{groupId}/callback/retry", op: "retryCallback", h: g.retryCallback, idempotent: true},
		{method: "GET", pattern: "/v1/callback-secret", op: "getCallbackSecret", h: g.getCallbackSecret},
		{method: "POST", pattern: "/v1/callback-secret", op: "rotateCallbackSecret", h: g.rotateCallbackSecret},
		{method: "GET", pattern: "/v1/windows", op: "getTenantWindows", h: g.getTenantWindows},
		{method: "PUT", pattern: "/v1/windows", op: "setTenantWindows", h: g.setTenantWindows},
	}
}

func (g *Gateway) routes() *http.ServeMux {
	mux := http.NewServeMux()
	for _, rt := range g.table() {
		h := rt.h
		if rt.op == "groupEvents" || rt.op == "overviewEvents" {
			h = g.keys.endOnRevoke(h) // streams outlive many reloads of the keys file
		}
		if rt.idempotent {
			h = g.idem.wrap(h)
		}
		if rt.public {
			h = checkQuery(rt.op, h)
		} else {
			h = g.auth(checkQuery(rt.op, g.door(rt, h)))
		}
		mux.Handle(rt.method+" "+rt.pattern, g.observe(rt.op, h))
	}
	mux.Handle("GET /ui/{path...}", g.observe("dashboard", g.ui))
	mux.Handle("GET /ui", g.observe("dashboard", g.uiRedirect))
	mux.Handle("GET /{$}", g.observe("dashboard", g.uiRedirect))
	return mux
}

// serve answers a request no route takes with a problem: 405 with Allow
// when the path has routes for other methods, else 404. A path that is not
// clean (an empty segment, as in /v1/groups//jobs, or a . or .. segment) is
// 404 too: ServeMux would redirect it to its clean form, which may be
// another operation (GET /v1/groups//jobs to the group "jobs").
func (g *Gateway) serve(w http.ResponseWriter, r *http.Request) {
	if !cleanPath(r.URL.Path) {
		g.observe("notFound", func(w http.ResponseWriter, r *http.Request) {
			writeProblem(w, r, http.StatusNotFound, slugNotFound, "no such route: "+r.Method+" "+strconv.Quote(r.URL.Path)+
				" (a path has no empty, . or .. segment)")
		}).ServeHTTP(w, r)
		return
	}
	if _, pattern := g.mux.Handler(r); pattern != "" {
		g.mux.ServeHTTP(w, r)
		return
	}
	var allow []string
	for _, m := range []string{http.MethodGet, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete} {
		r2 := r.Clone(r.Context())
		r2.Method = m
		if _, pattern := g.mux.Handler(r2); pattern != "" {
			allow = append(allow, m)
		}
	}
	if len(allow) > 0 {
		g.observe("methodNotAllowed", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Allow", strings.Join(allow, ", "))
			writeProblem(w, r, http.StatusMethodNotAllowed, slugMethod,
				r.Method+" is not an operation of "+r.URL.Path+"; allowed: "+strings.Join(allow, ", "))
		}).ServeHTTP(w, r)
		return
	}
	g.observe("notFound", func(w http.ResponseWriter, r *http.Request) {
		writeProblem(w, r, http.StatusNotFound, slugNotFound, "no such route: "+r.Method+" "+r.URL.Path)
	}).ServeHTTP(w, r)
}

// cleanPath reports whether p is absolute and has no empty segment (but
// for a final slash), and no . or .. segment.
func cleanPath(p string) bool {
	if p == "" || p[0] != '/' {
		return false
	}
	for seg := range strings.SplitSeq(p[1:], "/") {
		if seg == "." || seg == ".." {
			return false
		}
	}
	return !strings.Contains(p, "//")
}

// checkQuery refuses, with 400 invalid-parameter naming it, a query
// parameter that the operation op does not take (its OpenAPI parameters),
// one given twice that is not an array, and one whose name or value has
// malformed percent-encoding or invalid UTF-8: url.Values would drop the
// malformed pair, and keep the first of two, without a word.
func checkQuery(op string, next http.HandlerFunc) http.HandlerFunc {
	allowed := queryParams[op]
	names := make([]string, 0, len(allowed))
	for name := range allowed {
		names = append(names, name)
	}
	slices.Sort(names)
	takes := "no query parameters"
	if len(names) > 0 {
		takes = "one of " + strings.Join(names, ", ")
	}
	return func(w http.ResponseWriter, r *http.Request) {
		if fe := queryError(r.URL.RawQuery, allowed, takes); fe != nil {
			writeProblem(w, r, http.StatusBadRequest, slugInvalidParam, "bad query parameter "+strconv.Quote(fe.Field)+": "+fe.Detail, *fe)
			return
		}
		next(w, r)
	}
}

// queryError returns what is wrong with a raw query, nil when nothing is.
func queryError(raw string, allowed map[string]queryParam, takes string) *FieldError {
	var seen map[string]bool
	for raw != "" {
		var pair string
		pair, raw, _ = strings.Cut(raw, "&")
		if pair == "" {
			continue
		}
		k, v, _ := strings.Cut(pair, "=")
		name, err := url.QueryUnescape(k)
		if err != nil || !utf8.ValidString(name) {
			return &FieldError{Field: clipParam(k), Detail: "malformed name", Limit: "percent-encoded UTF-8 (RFC 3986)"}
		}
		if strings.Contains(pair, ";") {
			// url.Values drops the whole pair
			return &FieldError{Field: clipParam(name), Detail: "a semicolon in " + strconv.Quote(clipParam(pair)), Limit: "parameters separated by &, a semicolon percent-encoded (%3B)"}
		}
		p, ok := allowed[name]
		if !ok {
			return &FieldError{Field: clipParam(name), Detail: "unknown parameter", Limit: takes}
		}
		if value, err := url.QueryUnescape(v); err != nil || !utf8.ValidString(value) {
			return &FieldError{Field: name, Detail: "malformed value " + strconv.Quote(clipParam(v)), Limit: "percent-encoded UTF-8 (RFC 3986)"}
		}
		if seen[name] && !p.repeats {
			return &FieldError{Field: name, Detail: "given more than once", Limit: "at most once"}
		}
		if seen == nil {
			seen = map[string]bool{}
		}
		seen[name] = true
	}
	return nil
}

// clipParam shortens a parameter name or value for a problem.
func clipParam(s string) string {
	if len(s) <= 64 {
		return s
	}
	return strings.ToValidUTF8(s[:64], "") + "…"
}

// auth checks the API key and puts the Principal in the context.
func (g *Gateway) auth(next http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		p, err := g.keys.authenticate(r)
		clock(r).mark("auth")
		if err != nil {
			writeProblem(w, r, http.StatusUnauthorized, slugUnauthorized, err.Error())
			return
		}
		next(w, r.WithContext(context.WithValue(r.Context(), principalKey{}, p)))
	}
}

// statusWriter records the status code of a response and sends the
// request's stage timings with its header.
type statusWriter struct {
	http.ResponseWriter
	code  int
	clock *stageClock
}

func (s *statusWriter) WriteHeader(code int) {
	if s.code == 0 {
		s.code = code
		s.timing()
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusWriter) Write(b []byte) (int, error) {
	if s.code == 0 {
		s.code = http.StatusOK
		s.timing()
	}
	return s.ResponseWriter.Write(b)
}

func (s *statusWriter) timing() {
	if s.clock != nil {
		s.ResponseWriter.Header().Set("Server-Timing", s.clock.header())
	}
}

// Flush lets SSE flush through the wrapper.
func (s *statusWriter) Flush() {
	if f, ok := s.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Unwrap gives http.ResponseController the underlying writer.
func (s *statusWriter) Unwrap() http.ResponseWriter { return s.ResponseWriter }

// observe counts requests by operation and status, starts the request's
// stage clock (its Server-Timing header, timing.go), logs server errors and
// turns a panic into a 500 instead of a dead connection.
func (g *Gateway) observe(op string, next http.HandlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r, c := withClock(r)
		sw := &statusWriter{ResponseWriter: w, clock: c}
		defer func() {
			if v := recover(); v != nil {
				if v == http.ErrAbortHandler { //nolint:errorlint // the sentinel value itself
					panic(v)
				}
				g.log.Error("request panicked", "op", op, "panic", fmt.Sprint(v), "stack", string(debug.Stack()))
				if sw.code == 0 {
					writeProblem(sw, r, http.StatusInternalServerError, slugInternal, "internal error")
				}
			}
			code := sw.code
			if code == 0 {
				code = http.StatusOK
			}
			g.deps.Metrics.GatewayRequests.WithLabelValues(op, strconv.Itoa(code)).Inc()
		}()
		next(sw, r)
	})
}

// SetMemorySpool changes how much of a jobs request stays in memory before
// the rest goes to a temporary file (tests).
func (g *Gateway) SetMemorySpool(n int) { g.cfg.MemorySpool = n }
