package probe

import (
	"context"
	"errors"
	"sync"
	"time"
)

// The figures (round trips, loss, counters) move with every probe, but
// only a reader looks at them: GET /v1/status, a metrics scrape, a D-Bus
// getter. Building the state is a pass over every path (7 % of the
// engine's CPU at 1,000 peers, 23 % at 10,000, issue #29), so the manager
// builds one for figures alone only when a reader asks for it (Fresh), or
// every backgroundPublish; a state change is published at once whoever
// reads it. Readers ask through a freshness, the one part of the publisher
// other goroutines touch: the requests between two publishes share one
// channel, which the next publish closes, so that any number of scrapers at
// once cost one build.
type freshness struct {
	mu sync.Mutex
	// at is when the state last handed to OnState was current: the
	// publish, or a later pass that found nothing had moved since.
	at time.Time
	// period is the publish period in force (publishPeriod), what a
	// request for maxAge 0 wants.
	period time.Duration
	// wait is closed by the next publish; nil while nobody waits.
	wait    chan struct{}
	stopped bool
	// kick wakes the manager for a request (one token).
	kick chan struct{}
}

func newFreshness() freshness { return freshness{kick: make(chan struct{}, 1), period: publishEvery} }

// ErrStopped is Fresh's error once the manager's Run has returned: no
// newer state will come.
var ErrStopped = errors.New("probe: the peer manager is not running")

// Fresh returns once the state handed to OnState holds the figures of
// maxAge ago or later (maxAge 0: the publish period, 1 s up to 2,000
// selected peers, 5 s at 10,000), asking the manager to publish one if the
// last is older; OnState has returned by then. It returns at once when the
// last publish is young enough, and ctx's error when ctx ends first (the
// request stays with the manager until its next publish, which answers
// it; nothing waits on the caller). A request wakes the manager at most
// once per publish, and requests coalesce: those that come before the
// manager's next pass are answered by the same build.
func (m *Manager) Fresh(ctx context.Context, maxAge time.Duration) error {
	ch, err := m.pub.fresh.request(time.Now(), maxAge)
	if err != nil || ch == nil {
		return err
	}
	select {
	case <-ch:
		return m.pub.fresh.err()
	case <-ctx.Done():
		return ctx.Err()
	}
}

// request returns the channel the next publish closes, or nil when the
// state published is no older than maxAge at now.
func (f *freshness) request(now time.Time, maxAge time.Duration) (<-chan struct{}, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.stopped {
		return nil, ErrStopped
	}
	if maxAge <= 0 {
		maxAge = f.period
	}
	if !f.at.IsZero() && now.Sub(f.at) <= maxAge {
		return nil, nil
	}
	if f.wait == nil {
		f.wait = make(chan struct{})
		select {
		case f.kick <- struct{}{}:
		default:
		}
	}
	return f.wait, nil
}

// asked reports whether a reader waits for a publish.
func (f *freshness) asked() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.wait != nil
}

// current records that the state handed to OnState is current at now,
// with the publish period period, and answers the readers waiting.
func (f *freshness) current(now time.Time, period time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.at, f.period = now, period
	if f.wait != nil {
		close(f.wait)
		f.wait = nil
	}
}

// err is ErrStopped once Run has returned: a closed wait then says no
// newer state comes, not that one came.
func (f *freshness) err() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.stopped {
		return ErrStopped
	}
	return nil
}

// start makes requests wait for Run's publishes (again).
func (f *freshness) start() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.stopped = false
}

// stop answers the readers waiting, and every later request, with
// ErrStopped: Run has returned.
func (f *freshness) stop() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.stopped = true
	if f.wait != nil {
		close(f.wait)
		f.wait = nil
	}
}
