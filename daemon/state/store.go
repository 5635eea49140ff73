// Package state publishes rdmad's state: an immutable, versioned
// apitype.Snapshot that the daemon's main loop writes and any number of
// readers (socket API, watch stream, D-Bus, metrics) load without locks.
package state

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/rdmad/rdmad/client/apitype"
)

// A Reader is the read side of a Store: what the parts that only follow
// the state (D-Bus, the watch hub) are given, so that the compiler keeps
// the main loop the one writer.
type Reader interface {
	// Load returns the current snapshot. Callers must not modify it.
	Load() *apitype.Snapshot
	// Changed returns a channel that is closed when the next snapshot is
	// published. Take it before Load, so that a snapshot published in
	// between is not missed.
	Changed() <-chan struct{}
}

var _ Reader = (*Store)(nil)

// A Store publishes snapshots.
type Store struct {
	mu      sync.Mutex // serialises writers; readers never take it
	cur     atomic.Pointer[apitype.Snapshot]
	changed chan struct{}
	now     func() time.Time
	// finish runs in every Update after its function (SetFinish).
	finish func(prev, next *apitype.Snapshot)
}

// NewStore returns a Store whose first snapshot is initial.
func NewStore(initial apitype.Snapshot) *Store {
	s := &Store{changed: make(chan struct{}), now: time.Now}
	initial.Seq = 1
	initial.UpdatedAt = s.now()
	initial.FillLists()
	s.cur.Store(&initial)
	return s
}

// Load returns the current snapshot. Callers must not modify it.
func (s *Store) Load() *apitype.Snapshot { return s.cur.Load() }

// Update publishes a copy of the current snapshot changed by f and returns
// it. f receives a shallow copy: it must replace, not modify, slices and
// maps it changes (SetComponent does this for Components).
func (s *Store) Update(f func(*apitype.Snapshot)) *apitype.Snapshot {
	s.mu.Lock()
	defer s.mu.Unlock()
	prev := s.cur.Load()
	next := *prev
	f(&next)
	if s.finish != nil {
		s.finish(prev, &next)
	}
	next.FillLists() // [] and {} in JSON, never null
	next.Seq++
	next.UpdatedAt = s.now()
	s.cur.Store(&next)
	close(s.changed)
	s.changed = make(chan struct{})
	return &next
}

// SetFinish installs f, which runs inside every Update after the caller's
// function, on the snapshot about to be published (prev is the one it
// replaces), under the writers' lock: what is derived from a whole
// snapshot (the health verdict) is then decided for each one, whoever
// wrote it. It publishes once, so that the current snapshot has it too.
func (s *Store) SetFinish(f func(prev, next *apitype.Snapshot)) {
	s.mu.Lock()
	s.finish = f
	s.mu.Unlock()
	s.Update(func(*apitype.Snapshot) {})
}

// Changed returns a channel that is closed when the next snapshot is
// published.
func (s *Store) Changed() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.changed
}

// SetComponent records a component's health on snap (inside Update),
// keeping Since when the state and its text did not change. err's text is
// the component's Error, except for the states disabled and unavailable:
// there it explains why (no failure) and is the component's Reason.
func SetComponent(snap *apitype.Snapshot, name, st string, err error, now time.Time) {
	c := apitype.Component{State: st, Since: now}
	if err != nil {
		if st == apitype.Disabled || st == apitype.Unavailable {
			c.Reason = err.Error()
		} else {
			c.Error = err.Error()
		}
	}
	if old, ok := snap.Components[name]; ok && old.State == c.State && old.Error == c.Error && old.Reason == c.Reason {
		return
	}
	m := make(map[string]apitype.Component, len(snap.Components)+1)
	for k, v := range snap.Components {
		m[k] = v
	}
	m[name] = c
	snap.Components = m
}
