package processor

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
)

// MaxTypeLen is the longest job type name, in bytes.
const MaxTypeLen = 64

// ValidType reports whether s is a valid job type name: 1 to [MaxTypeLen] ASCII letters, digits,
// '_' or '-' (^[A-Za-z0-9_-]{1,64}$). A type is a NATS subject token and a Redis key part, so it
// cannot contain '.', ':', '*', '>', braces or spaces.
func ValidType(s string) bool {
	if len(s) == 0 || len(s) > MaxTypeLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '_', c == '-':
		default:
			return false
		}
	}
	return true
}

// Mux routes jobs to processors by [Job.Type], like [net/http.ServeMux] routes requests by path.
//
// Register processors with [Mux.Handle] or [Mux.HandleFunc] and middleware with [Mux.Use] before the
// Mux processes its first job; then it is safe for concurrent use. A job whose type has no processor
// fails permanently with an error wrapping [ErrNoProcessor].
//
// The zero value is an empty Mux ready to use; [NewMux] returns the same.
type Mux struct {
	mu      sync.RWMutex
	entries map[string]Processor
	mws     []Middleware
	sealed  bool      // the chain is being or has been built: Use panics
	chain   Processor // the middlewares around route; built on the first Process
	buildMu sync.Mutex
}

var _ Processor = (*Mux)(nil)

// NewMux returns an empty Mux.
func NewMux() *Mux {
	return &Mux{}
}

// Handle registers p for jobs of type jobType. Handle may be called before or after the Mux
// starts processing.
//
// Like [net/http.ServeMux.Handle], it panics on a programming error: an invalid type name (see
// [ValidType]), a nil p (or a nil [ProcessorFunc]), or a type that already has a processor.
func (m *Mux) Handle(jobType string, p Processor) {
	if !ValidType(jobType) {
		panic(fmt.Sprintf("processor: invalid job type %q: want ^[A-Za-z0-9_-]{1,%d}$", jobType, MaxTypeLen))
	}
	if p == nil {
		panic(fmt.Sprintf("processor: nil processor for job type %q", jobType))
	}
	if f, ok := p.(ProcessorFunc); ok && f == nil {
		panic(fmt.Sprintf("processor: nil ProcessorFunc for job type %q", jobType))
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, dup := m.entries[jobType]; dup {
		panic(fmt.Sprintf("processor: multiple registrations for job type %q", jobType))
	}
	if m.entries == nil {
		m.entries = make(map[string]Processor)
	}
	m.entries[jobType] = p
}

// HandleFunc registers f for jobs of type jobType; it is Handle(jobType, ProcessorFunc(f)) and
// panics in the same cases.
func (m *Mux) HandleFunc(jobType string, f func(ctx context.Context, job *Job) error) {
	if f == nil {
		panic(fmt.Sprintf("processor: nil ProcessorFunc for job type %q", jobType))
	}
	m.Handle(jobType, ProcessorFunc(f))
}

// Use appends middlewares that run around every job the Mux processes, including jobs of unknown
// type. They apply outer-first, like chi: after Use(a, b) and Use(c), a job runs
// a → b → c → the type's processor. Each middleware is called once, when the Mux processes its first
// job.
//
// Use panics on a nil middleware, and when called after the Mux has processed a job (the chain is
// already built, as chi panics on Use after routes).
func (m *Mux) Use(mws ...Middleware) {
	for _, mw := range mws {
		if mw == nil {
			panic("processor: nil middleware")
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.sealed {
		panic("processor: Use called after the Mux processed a job; register middlewares first")
	}
	m.mws = append(m.mws, mws...)
}

// Types returns the registered job types, sorted. The worker consumes the READY subject of each.
func (m *Mux) Types() []string {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return slices.Sorted(maps.Keys(m.entries))
}

// Process runs job through the middlewares and the processor registered for job.Type. A job of an
// unknown type returns [Permanent] of an error wrapping [ErrNoProcessor] that names the type; a nil
// job returns a permanent error too. Process does not recover panics: the worker calls it through
// [Run], or add [Recover] with [Mux.Use].
func (m *Mux) Process(ctx context.Context, job *Job) error {
	return m.handler().Process(ctx, job)
}

// handler returns the middleware chain around route, building it on first use. The middlewares are
// called without m.mu held, so they may call Types.
func (m *Mux) handler() Processor {
	m.mu.RLock()
	h := m.chain
	m.mu.RUnlock()
	if h != nil {
		return h
	}
	m.buildMu.Lock()
	defer m.buildMu.Unlock()
	m.mu.Lock()
	if h := m.chain; h != nil {
		m.mu.Unlock()
		return h
	}
	m.sealed = true
	mws := slices.Clone(m.mws)
	m.mu.Unlock()

	h = Chain(mws...)(ProcessorFunc(m.route))
	m.mu.Lock()
	m.chain = h
	m.mu.Unlock()
	return h
}

// errNilJob is returned for a nil *Job.
var errNilJob = errors.New("processor: nil job")

func (m *Mux) route(ctx context.Context, job *Job) error {
	if job == nil {
		return Permanent(errNilJob)
	}
	m.mu.RLock()
	p, ok := m.entries[job.Type]
	m.mu.RUnlock()
	if !ok {
		return Permanent(fmt.Errorf("%w %q", ErrNoProcessor, job.Type))
	}
	return p.Process(ctx, job)
}
