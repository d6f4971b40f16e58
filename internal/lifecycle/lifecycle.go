// Package lifecycle holds what every long-running part of bulkaction shares:
// the signal it gives once it runs (docs/ARCHITECTURE.md §2), so that `dev`,
// the tests and the benchmark wait on a signal instead of polling.
package lifecycle

import (
	"context"
	"sync"
)

// Service is a long-running part: Run blocks until ctx ends and the part has
// stopped, and Ready is closed once it has started taking work.
type Service interface {
	Run(ctx context.Context) error
	Ready() <-chan struct{}
}

// Started is closed once, when a service has started. The zero value is
// ready to use; embed it to give a service its Ready method.
type Started struct {
	once sync.Once
	mu   sync.Mutex
	ch   chan struct{}
}

func (s *Started) c() chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ch == nil {
		s.ch = make(chan struct{})
	}
	return s.ch
}

// Ready returns a channel closed once [Started.Signal] was called.
func (s *Started) Ready() <-chan struct{} { return s.c() }

// Signal marks the service started; later calls do nothing.
func (s *Started) Signal() {
	ch := s.c()
	s.once.Do(func() { close(ch) })
}
