package daemon

import (
	"context"
	"sync"
)

// A supervisor owns the daemon's goroutines. Every part runs under it on a
// context it cancels, and Run returns only after all of them did: nothing
// rdmad starts outlives it, and a part a reload restarts is stopped and
// waited for before its successor starts.
type supervisor struct {
	ctx context.Context
	wg  sync.WaitGroup
}

func newSupervisor(ctx context.Context) *supervisor { return &supervisor{ctx: ctx} }

// Go runs f until the supervisor's context ends.
func (s *supervisor) Go(f func(ctx context.Context)) {
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		f(s.ctx)
	}()
}

// Start runs f on a child context, for a part that a reload may stop or
// restart alone: stop cancels f's context and waits for f to return (stop
// may be called more than once). Wait waits for it too.
func (s *supervisor) Start(f func(ctx context.Context)) (stop func()) {
	ctx, cancel := context.WithCancel(s.ctx)
	done := make(chan struct{})
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		defer close(done)
		f(ctx)
	}()
	return func() {
		cancel()
		<-done
	}
}

// Stopping reports whether the supervisor's context has ended: no part
// may be started any more.
func (s *supervisor) Stopping() bool { return s.ctx.Err() != nil }

// Wait waits for every part. Cancel the context first.
func (s *supervisor) Wait() { s.wg.Wait() }
