package daemon

import (
	"context"
	"sync"
	"time"

	"github.com/rdmad/rdmad/client/apitype"
	"github.com/rdmad/rdmad/daemon/state"
)

// The main loop is the one writer of the store (docs/ARCHITECTURE.md):
// code that runs on it calls d.store.Update and d.setComponent. Every other
// goroutine (event sources, the peer prober, the D-Bus service, the metrics
// listener) hands its update to the main loop through the mailbox, so that
// no two writers interleave read-modify-write passes over the snapshot and
// an update never lands in the middle of a reload or a policy pass.
//
// Updates are keyed: a later update under the same key replaces one the
// loop has not applied yet (the latest component state, the latest peer
// view), so a goroutine never waits for the loop and the mailbox stays as
// small as the number of keys. Updates under different keys are applied in
// the order they were first posted.
type mailbox struct {
	mu      sync.Mutex
	pending map[string]func(*apitype.Snapshot)
	order   []string
	ready   chan struct{} // one token while updates are pending
	// posted counts the updates posted, applied those in the store; a
	// reader that needs an update in the store (flushed) waits for
	// appliedC, which applyMail closes.
	posted, applied uint64
	appliedC        chan struct{}
}

func newMailbox() *mailbox {
	return &mailbox{pending: map[string]func(*apitype.Snapshot){}, ready: make(chan struct{}, 1)}
}

// post leaves f for the main loop under key.
func (m *mailbox) post(key string, f func(*apitype.Snapshot)) {
	m.mu.Lock()
	if _, ok := m.pending[key]; !ok {
		m.order = append(m.order, key)
	}
	m.pending[key] = f
	m.posted++
	m.mu.Unlock()
	select {
	case m.ready <- struct{}{}:
	default:
	}
}

// take returns the pending updates in order and empties the mailbox, and
// the count of updates posted so far, for done once they are in the store.
func (m *mailbox) take() ([]func(*apitype.Snapshot), uint64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	fs := make([]func(*apitype.Snapshot), 0, len(m.order))
	for _, k := range m.order {
		fs = append(fs, m.pending[k])
	}
	clear(m.pending)
	m.order = m.order[:0]
	return fs, m.posted
}

// done records that the updates take counted up to seq are in the store.
func (m *mailbox) done(seq uint64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.applied = seq
	if m.appliedC != nil {
		close(m.appliedC)
		m.appliedC = nil
	}
}

// flushed returns once every update posted before the call is in the
// store, or ctx's error when ctx ends first. It never holds up the main
// loop. Not for the main loop itself, which would wait for itself.
func (m *mailbox) flushed(ctx context.Context) error {
	m.mu.Lock()
	want := m.posted
	for m.applied < want {
		if m.appliedC == nil {
			m.appliedC = make(chan struct{})
		}
		ch := m.appliedC
		m.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
		m.mu.Lock()
	}
	m.mu.Unlock()
	return nil
}

// report records a component's health from any goroutine: the main loop
// applies it (see mailbox).
func (d *Daemon) report(name, st string, err error) {
	now := time.Now()
	d.mail.post("component/"+name, func(s *apitype.Snapshot) { state.SetComponent(s, name, st, err, now) })
}

// applyMail applies what other goroutines posted, in one snapshot, and
// says again whether the node is healthy. Runs on the main loop.
func (d *Daemon) applyMail() {
	fs, seq := d.mail.take()
	if len(fs) == 0 {
		return
	}
	defer d.mail.done(seq)
	d.store.Update(func(s *apitype.Snapshot) {
		for _, f := range fs {
			f(s)
		}
		if s.State == apitype.Running || s.State == apitype.Degraded {
			d.summarise(s, apitype.Running)
		}
	})
}
