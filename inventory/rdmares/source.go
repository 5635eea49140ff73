package rdmares

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/rdmad/rdmad/client/apitype"
)

// ErrBusy is wrapped by the error of a Source.Read that waited MaxWait for
// another read to finish.
var ErrBusy = errors.New("another read of the RDMA resources is in progress")

// A Source reads the resources for several clients (the API, D-Bus, the
// metrics, the doctor): one dump at a time, and a read younger than MaxAge
// is answered again rather than dumped anew, so that a burst of requests
// costs the kernel one dump. It is safe for concurrent use.
type Source struct {
	// Options are passed to Read.
	Options Options
	// MaxAge is how long a read is answered again; 0 is one second.
	MaxAge time.Duration
	// MaxWait bounds the wait for another read in progress; 0 is
	// DefaultTimeout.
	MaxWait time.Duration

	// read is Read; tests replace it.
	read func(ctx context.Context, opts Options) (apitype.Resources, error)
	// lock holds a token while a read runs; last is its result, guarded
	// by lock.
	lock chan struct{}
	last result
}

type result struct {
	res apitype.Resources
	err error
	at  time.Time
}

// NewSource returns a Source reading with opts.
func NewSource(opts Options) *Source {
	return &Source{Options: opts, read: Read, lock: make(chan struct{}, 1)}
}

// Read returns the resources, read now or at most MaxAge ago. A failed
// read is answered again within MaxAge too: a kernel without RDMA does not
// change from one request to the next. Callers share the result and must
// not modify it.
func (s *Source) Read(ctx context.Context) (apitype.Resources, error) {
	wait := s.MaxWait
	if wait <= 0 {
		wait = DefaultTimeout
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case s.lock <- struct{}{}:
	case <-ctx.Done():
		return apitype.Resources{}, fmt.Errorf("rdmares: wait for the read in progress: %w", ctx.Err())
	case <-t.C:
		return apitype.Resources{}, fmt.Errorf("rdmares: %w for over %s; try again later", ErrBusy, wait)
	}
	defer func() { <-s.lock }()
	maxAge := s.MaxAge
	if maxAge <= 0 {
		maxAge = time.Second
	}
	if !s.last.at.IsZero() && time.Since(s.last.at) < maxAge {
		return s.last.res, s.last.err
	}
	res, err := s.read(ctx, s.Options)
	if ctx.Err() == nil {
		// A read cut short by this caller's context says nothing about
		// the kernel: the next caller reads again.
		s.last = result{res: res, err: err, at: time.Now()}
	}
	return res, err
}
