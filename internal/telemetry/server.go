package telemetry

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// ReadyTimeout bounds one /readyz request: every check must pass within it.
const ReadyTimeout = 2 * time.Second

// shutdownTimeout bounds the graceful shutdown of the HTTP server once Run's context ends.
const shutdownTimeout = 5 * time.Second

// ErrServerStarted is returned by [Server.Run] when the server was already run once.
var ErrServerStarted = errors.New("telemetry: server already started")

// Check is one readiness check. Fn returns nil when the dependency it checks (Redis, NATS, …) is
// usable; it must honour ctx, which ends after [ReadyTimeout]. A Check with a nil Fn always fails.
type Check struct {
	// Name identifies the check in the /readyz body; it should be unique within a server.
	Name string
	// Fn performs the check.
	Fn func(ctx context.Context) error
}

// Server serves the operational HTTP endpoints of a target:
//
//   - GET /metrics: the metrics of its Gatherer, in the Prometheus exposition format.
//   - GET /healthz: always 200 "ok" while the process runs (liveness).
//   - GET /readyz: 200 {"status":"ready"} when every check passes within [ReadyTimeout], else 503
//     with {"status":"not ready","failed":[{"name":…,"error":…}]} naming each failing check.
//
// Create it with [NewServer]; the zero value is not usable. A Server runs once.
type Server struct {
	addr    string
	handler http.Handler
	checks  []Check
	log     *slog.Logger

	started    atomic.Bool
	ready      chan struct{}
	listenMu   sync.Mutex
	listenAddr string
}

// NewServer returns a Server that will listen on addr (host:port; ":0" picks a free port, see
// [Server.Addr]; an empty host listens on every interface, see [AllInterfaces]) and serve g on
// /metrics (nil g means prometheus.DefaultGatherer). checks run on every /readyz request,
// concurrently; none means always ready. A nil log means slog.Default().
func NewServer(addr string, g prometheus.Gatherer, checks []Check, log *slog.Logger) *Server {
	if g == nil {
		g = prometheus.DefaultGatherer
	}
	if log == nil {
		log = slog.Default()
	}
	s := &Server{
		addr:   addr,
		checks: append([]Check(nil), checks...),
		log:    log,
		ready:  make(chan struct{}),
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(g, promhttp.HandlerOpts{
		ErrorLog:      promLogger{log},
		ErrorHandling: promhttp.ContinueOnError,
	}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = w.Write([]byte("ok"))
	})
	mux.HandleFunc("GET /readyz", s.serveReady)
	s.handler = mux
	return s
}

// AllInterfaces reports whether addr (host:port) listens on every network
// interface: an empty host (":8080", the default of BULKACTION_HTTP_ADDR),
// 0.0.0.0 or [::]. That is what a container needs, so other hosts (a
// Prometheus scraper, a kubelet probe) reach the endpoints; on a shared host
// it exposes them, unauthenticated, to the network.
func AllInterfaces(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsUnspecified()
}

// Handler returns the HTTP handler of the three endpoints, for tests or to mount elsewhere.
func (s *Server) Handler() http.Handler { return s.handler }

// Ready returns a channel closed once [Server.Run] is listening; [Server.Addr] is valid then.
// It is never closed if Run fails before listening.
func (s *Server) Ready() <-chan struct{} { return s.ready }

// Addr returns the address the server listens on (with the actual port when addr was ":0"),
// or "" before [Server.Ready] is closed.
func (s *Server) Addr() string {
	s.listenMu.Lock()
	defer s.listenMu.Unlock()
	return s.listenAddr
}

// Run listens and serves until ctx ends, then shuts down gracefully (in-flight requests get up to
// 5 s) and returns nil. It returns an error if it cannot listen or if serving fails, and
// [ErrServerStarted] when called a second time.
func (s *Server) Run(ctx context.Context) error {
	if !s.started.CompareAndSwap(false, true) {
		return ErrServerStarted
	}
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", s.addr)
	if err != nil {
		return fmt.Errorf("telemetry: listen on %q: %w", s.addr, err)
	}
	srv := &http.Server{
		Handler:           s.handler,
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
	}
	s.listenMu.Lock()
	s.listenAddr = ln.Addr().String()
	s.listenMu.Unlock()
	close(s.ready)
	if AllInterfaces(s.addr) {
		s.log.Info("telemetry server listening", "addr", ln.Addr().String(), "interfaces", "all",
			"note", "the endpoints are unauthenticated; listen on 127.0.0.1 unless other hosts (a scraper, a probe) must reach them")
	} else {
		s.log.Info("telemetry server listening", "addr", ln.Addr().String())
	}

	serveErr := make(chan error, 1)
	go func() { serveErr <- srv.Serve(ln) }()

	select {
	case err := <-serveErr:
		return fmt.Errorf("telemetry: serve: %w", err)
	case <-ctx.Done():
	}
	shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), shutdownTimeout)
	defer cancel()
	err = srv.Shutdown(shutdownCtx)
	if serr := <-serveErr; serr != nil && !errors.Is(serr, http.ErrServerClosed) && err == nil {
		err = serr
	}
	if err != nil {
		_ = srv.Close()
		return fmt.Errorf("telemetry: shutdown: %w", err)
	}
	return nil
}

type checkFailure struct {
	Name  string `json:"name"`
	Error string `json:"error"`
}

type readyBody struct {
	Status string         `json:"status"`
	Failed []checkFailure `json:"failed,omitempty"`
}

func (s *Server) serveReady(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), ReadyTimeout)
	defer cancel()

	errs := make([]error, len(s.checks))
	done := make(chan int, len(s.checks))
	for i, c := range s.checks {
		go func() {
			defer func() {
				if p := recover(); p != nil {
					errs[i] = fmt.Errorf("panic: %v", p)
				}
				done <- i
			}()
			if c.Fn == nil {
				errs[i] = errors.New("no check function")
				return
			}
			errs[i] = c.Fn(ctx)
		}()
	}
	finished := make([]bool, len(s.checks))
wait:
	for range s.checks {
		select {
		case i := <-done:
			finished[i] = true
		case <-ctx.Done():
			break wait
		}
	}
	for drained := false; !drained; { // answers that arrived together with the deadline
		select {
		case i := <-done:
			finished[i] = true
		default:
			drained = true
		}
	}

	body := readyBody{Status: "ready"}
	for i, c := range s.checks {
		var err error
		if finished[i] {
			err = errs[i]
		} else {
			err = fmt.Errorf("no answer within %s: %w", ReadyTimeout, ctx.Err())
		}
		if err != nil {
			body.Failed = append(body.Failed, checkFailure{Name: c.Name, Error: err.Error()})
		}
	}
	code := http.StatusOK
	if len(body.Failed) > 0 {
		body.Status = "not ready"
		code = http.StatusServiceUnavailable
		s.log.Debug("not ready", "failed", body.Failed)
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(body)
}

// promLogger adapts slog to promhttp's error log.
type promLogger struct{ log *slog.Logger }

func (l promLogger) Println(v ...any) {
	l.log.Error("serving metrics", "error", fmt.Sprint(v...))
}
