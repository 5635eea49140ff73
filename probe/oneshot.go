package probe

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/rdmad/rdmad/client/apitype"
)

// The one-shot part holds the requests of POST /v1/probe and the waits
// they started: a one-shot waits on its peer (mpeer.waiters) until every
// path has a result newer than the request, or its timer ends the wait.
type oneShots struct {
	requests chan *oneshot
	// expired receives a one-shot whose wait is over. It is a channel of
	// its own, never a name in requests: nothing a caller can spell ends
	// another caller's wait.
	expired chan *oneshot
	waiting int // one-shot probes waiting
}

func newOneShots() oneShots {
	return oneShots{requests: make(chan *oneshot, 16), expired: make(chan *oneshot, maxWaiting)}
}

// maxWaiting bounds the one-shot probes waiting at once (each holds a
// timer and an API request).
const maxWaiting = 64

type oneshot struct {
	name string
	done chan apitype.Peer
	err  error
	// Set by the manager's goroutine: the peer it waits on, and whether
	// it was answered (a oneshot is answered exactly once).
	p        *mpeer
	answered bool
	// timer bounds the wait; stopped when the one-shot is answered, so
	// none outlives Run (one that fired already only sends to expired,
	// which has room for every waiting one-shot, or sees ctx done).
	timer *time.Timer
}

// ProbeOnce probes the configured peer name (name or address) now, from
// every local port, and returns its state once every path answered or timed
// out.
func (m *Manager) ProbeOnce(ctx context.Context, name string) (apitype.Peer, error) {
	o := &oneshot{name: name, done: make(chan apitype.Peer, 1)}
	select {
	case m.oneshots.requests <- o:
	case <-ctx.Done():
		return apitype.Peer{}, ctx.Err()
	default:
		return apitype.Peer{}, errors.New("peers: too many one-shot probes at once; try again in a moment")
	}
	select {
	case p := <-o.done:
		return p, o.err
	case <-ctx.Done():
		return apitype.Peer{}, ctx.Err()
	}
}

// startOneshot probes a configured peer now.
func (m *Manager) startOneshot(ctx context.Context, o *oneshot, now time.Time) {
	var sp *Spec
	for i := range m.cfg.Peers {
		if m.cfg.Peers[i].Name == o.name {
			sp = &m.cfg.Peers[i]
		}
	}
	p := m.peers.byName[o.name]
	if p == nil && sp == nil {
		for _, c := range m.peers.byName {
			if c.addr.String() == o.name {
				p = c
			}
		}
	}
	if p == nil && sp == nil {
		o.answer(apitype.Peer{}, fmt.Errorf("peers: %q is not a configured peer; add it as a [[peer]] or to [probe] peers_file", o.name))
		return
	}
	if len(m.local) == 0 {
		o.answer(apitype.Peer{}, fmt.Errorf("peers: cannot probe %s: %v", o.name, m.localErrOr()))
		return
	}
	if m.oneshots.waiting >= maxWaiting {
		o.answer(apitype.Peer{}, fmt.Errorf("peers: %d one-shot probes are waiting already; try again in a moment", m.oneshots.waiting))
		return
	}
	if p == nil {
		p = m.add(*sp, now, true)
	}
	o.p = p
	w := p.w()
	w.waiters = append(w.waiters, o)
	m.oneshots.waiting++
	m.in.urgent.Store(true)
	w.waitFrom = m.sched.seq
	p.setDue(now)
	m.sched.due.fix(p)
	// Bound the wait: control lookup plus one probe timeout. The timer
	// names this one-shot, so it ends this wait and no other.
	o.timer = time.AfterFunc(time.Second+2*m.cfg.Timeout, func() {
		select {
		case m.oneshots.expired <- o:
		case <-ctx.Done():
		}
	})
}

// expireOneshot ends o's wait with the state there is, unless it was
// answered already.
func (m *Manager) expireOneshot(o *oneshot) {
	if o.answered || o.p == nil {
		return
	}
	p := o.p
	w := p.w()
	w.waiters = slices.DeleteFunc(w.waiters, func(x *oneshot) bool { return x == o })
	m.oneshots.waiting--
	m.in.urgent.Store(m.oneshots.waiting > 0)
	o.answer(m.peerState(p), nil)
	if p.oneshot && len(w.waiters) == 0 && m.peers.byName[p.spec.Name] == p {
		m.drop(p)
	}
}

// answer answers o once; done has room for exactly that answer.
func (o *oneshot) answer(sp apitype.Peer, err error) {
	if o.answered {
		return
	}
	o.answered = true
	if o.timer != nil {
		o.timer.Stop()
	}
	o.err = err
	o.done <- sp
}

// checkWaiters answers one-shot waiters once every path has a result newer
// than the request.
func (m *Manager) checkWaiters(p *mpeer) {
	r := p.r()
	if len(r.waiters) == 0 {
		return
	}
	for _, pa := range p.paths {
		if pa.lastSeq <= r.waitFrom {
			return
		}
	}
	m.finishWaiters(p, nil)
}

func (m *Manager) finishWaiters(p *mpeer, err error) {
	m.answerWaiters(p, err)
	if p.oneshot {
		m.drop(p)
	}
}

// answerWaiters gives p's one-shot waiters its state now.
func (m *Manager) answerWaiters(p *mpeer, err error) {
	if p.rare == nil || len(p.rare.waiters) == 0 {
		return
	}
	sp := m.peerState(p)
	for _, o := range p.rare.waiters {
		o.answer(sp, err)
	}
	m.oneshots.waiting -= len(p.rare.waiters)
	m.in.urgent.Store(m.oneshots.waiting > 0)
	p.rare.waiters = nil
}

func (m *Manager) failOneshots(err error) {
	for _, p := range m.peers.byName {
		if p.rare == nil {
			continue
		}
		for _, o := range p.rare.waiters {
			o.answer(apitype.Peer{}, err)
		}
		p.rare.waiters = nil
	}
	m.oneshots.waiting = 0
	m.in.urgent.Store(false)
}
