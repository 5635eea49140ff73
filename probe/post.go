package probe

import (
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/rdmad/rdmad/client/apitype"
	"github.com/rdmad/rdmad/probe/ud"
)

// Posting the probes is a call into the RDMA provider (Transport.
// ProbeBatch: ibv_post_send), and a provider can stand in it: rxe runs its
// requester in the caller's thread, and a send the kernel dropped (a tc
// drop on the test bed) is retried inside the next post for 14-16 s. When
// the manager posted on its own goroutine, that one call held the whole
// pass: no port's probes went, no reply was taken, nothing was published.
//
// So each local port has a poster: a goroutine of its own that posts the
// port's batches. The manager hands a pass's batch over and goes on; it
// never waits for a post. A port whose call stands longer than PostBound
// is cut off from the schedule: its probes are not queued, the probes
// handed to it and those in flight on it are dropped without being counted
// as losses (nobody knows whether they went), its paths are unknown, not
// down (the fault is this node's port, not the peers'), and its local port
// says so in the state (apitype.PeerPort.Stuck), which the daemon turns
// into DaemonDegraded naming the device and port. Every other port keeps
// its schedule. A call into the provider cannot be interrupted: the port
// is tried again as soon as its call returns, and probed from the next
// pass on.
//
// The cost is the handoff: one goroutine wakeup per port and pass (at the
// defaults, four passes a second), which on an otherwise idle P may wake
// a thread; docs/BENCHMARKS.md has the figures before and after.

// PostBound is how long one port's call into the provider may stand
// before the port is cut off from the schedule. A post takes microseconds
// on hardware and on rxe (the doorbell, or rxe's requester for a batch);
// a second is a stuck provider. Probes that wait for a call that has
// stood half the probe timeout are not judged (heldByPost).
const PostBound = time.Second

// A poster posts one local port's batches on a goroutine of its own.
type poster struct {
	local string
	tr    Transport
	wake  chan struct{} // cap 1: pending has probes
	quit  chan struct{} // closed: the port is gone or the manager stops
	// callSince is when the running ProbeBatch began (monoNs), 0
	// between calls.
	callSince atomic.Int64

	mu sync.Mutex
	// pending is the batch handed over and not yet taken; free is the
	// buffer the goroutine posted last, emptied, for the manager's next
	// batch: two buffers turn between the manager and the goroutine.
	pending []ud.Target
	free    []ud.Target
	failed  []failedProbe // probes that did not go, for the manager

	// Owned by the manager's goroutine.
	cut      bool
	cutSince time.Time // when the call that stood began
	stuck    string    // the port's Stuck text while cut
	taken    []failedProbe
}

// A failedProbe is a probe its port's post refused.
type failedProbe struct {
	seq uint64
	err error
}

func newPoster(local string, tr Transport) *poster {
	p := &poster{local: local, tr: tr, wake: make(chan struct{}, 1), quit: make(chan struct{})}
	go p.run()
	return p
}

// run posts what the manager hands over until quit is closed.
func (p *poster) run() {
	for {
		select {
		case <-p.quit:
			return
		case <-p.wake:
		}
		for {
			p.mu.Lock()
			batch := p.pending
			p.pending = nil
			p.mu.Unlock()
			if len(batch) == 0 {
				break
			}
			p.callSince.Store(monoNs(time.Now()))
			n := p.tr.ProbeBatch(p.local, batch)
			p.callSince.Store(0)
			p.mu.Lock()
			if n < len(batch) {
				for i := range batch {
					if batch[i].Err != nil {
						p.failed = append(p.failed, failedProbe{seq: batch[i].Seq, err: batch[i].Err})
					}
				}
			}
			clear(batch) // the errors
			if cap(batch) > cap(p.free) {
				p.free = batch[:0]
			}
			p.mu.Unlock()
		}
	}
}

// stop ends the goroutine; one standing in a call ends when it returns.
func (p *poster) stop() { close(p.quit) }

// hand gives the queued probes q to the port's poster. A batch still
// waiting there (the goroutine is in a call: it takes a batch at once
// otherwise) is added to, up to the pass's limit; what is over is not
// sent. Returns the probes not sent, which stay in q.ts[:n] for the caller.
func (p *poster) hand(q *outQueue, limit int) (notSent int) {
	n := len(q.ts)
	p.mu.Lock()
	if p.pending == nil {
		p.pending, q.ts, p.free = q.ts, p.free[:0], nil
	} else {
		k := min(max(limit-len(p.pending), 0), n)
		p.pending = append(p.pending, q.ts[:k]...)
		copy(q.ts, q.ts[k:])
		notSent = n - k
		q.ts = q.ts[:notSent]
	}
	p.mu.Unlock()
	select {
	case p.wake <- struct{}{}:
	default:
	}
	return notSent
}

// heldByPost reports whether a probe of the port local cannot be judged at
// now because the port's call into the provider has stood for half the
// probe timeout: the probe waits behind that call or is in it.
func (s *scheduler) heldByPost(local string, now int64, timeout time.Duration) bool {
	if s.posters == nil {
		return false
	}
	pp := s.posters[local]
	if pp == nil {
		return false
	}
	since := pp.callSince.Load()
	return since != 0 && time.Duration(now-since) >= timeout/2
}

// isCut reports whether the port local is cut off from the schedule.
func (s *scheduler) isCut(local string) bool {
	if s.cut == 0 {
		return false
	}
	pp := s.posters[local]
	return pp != nil && pp.cut
}

// stuckText is the port's apitype.PeerPort.Stuck: "" unless it is cut off.
func (s *scheduler) stuckText(local string) string {
	if s.cut == 0 {
		return ""
	}
	if pp := s.posters[local]; pp != nil {
		return pp.stuck
	}
	return ""
}

// unsend takes the probe seq out of flight without a result, counted as
// not sent: it did not go, or nobody knows whether it did. A probe no
// longer in flight (a cut port's, refused after its call returned) is not
// counted twice.
func (s *scheduler) unsend(seq uint64) *flight {
	f := s.flights.get(seq)
	if f == nil {
		return nil
	}
	s.notSent++
	f.pa.inflight--
	g := *f
	*f = flight{}
	return &g
}

// post hands every port's queued probes to its poster (flush, when Run
// started the posters).
func (s *scheduler) post(tr Transport, log *slog.Logger) {
	for local, q := range s.outbox {
		if len(q.ts) == 0 {
			continue
		}
		pp := s.posters[local]
		if pp == nil {
			pp = newPoster(local, tr)
			s.posters[local] = pp
		}
		handed, over := len(q.ts), len(q.ts) // a cut port's (isCut keeps most from being queued; a one-shot's may be)
		if !pp.cut {
			over = pp.hand(q, s.limit)
		}
		for _, t := range q.ts[:over] {
			if f := s.unsend(t.Seq); f != nil {
				log.Debug("probe not sent", "peer", f.p.spec.Name, "port", local, "err", "the port's last post has not returned")
			}
		}
		q.ts = resize(q.ts, q.sh.size(handed, cap(q.ts), int(unsafe.Sizeof(ud.Target{}))))
	}
}

// collectPosts takes what the posters report, at the start of a pass:
// the probes their posts refused, and which ports' calls have stood past
// PostBound (cut off) or returned (back in the schedule).
func (m *Manager) collectPosts(now time.Time) {
	for local, pp := range m.sched.posters {
		pp.mu.Lock()
		pp.taken, pp.failed = pp.failed, pp.taken[:0]
		pp.mu.Unlock()
		for _, fp := range pp.taken {
			if f := m.sched.unsend(fp.seq); f != nil {
				m.log.Debug("probe not sent", "peer", f.p.spec.Name, "port", local, "err", fp.err)
			}
		}
		clear(pp.taken)
		since := pp.callSince.Load()
		stuck := since != 0 && time.Duration(monoNs(now)-since) > PostBound
		switch {
		case stuck && !pp.cut:
			m.cutPort(local, pp, now.Add(-time.Duration(monoNs(now)-since)), now)
		case !stuck && pp.cut:
			m.rejoinPort(local, pp, now)
		}
	}
}

// cutPort cuts the port local off from the schedule: its call into the
// provider, begun at since, has stood past PostBound.
func (m *Manager) cutPort(local string, pp *poster, since, now time.Time) {
	pp.cut, pp.cutSince = true, since
	m.sched.cut++
	pp.stuck = fmt.Sprintf("its post of probes (ibv_post_send) has not returned since %s (more than %v): cut off from the probes, its paths unknown, until it does",
		since.UTC().Format(time.RFC3339), PostBound)
	// What waits for the stuck call will not go before it returns.
	pp.mu.Lock()
	held := pp.pending
	pp.pending = nil
	pp.mu.Unlock()
	for _, t := range held {
		m.sched.unsend(t.Seq)
	}
	// Nobody knows whether the probes in flight on it went: no result.
	m.sched.inFlight(func(seq uint64, f *flight) {
		if f.pa.local == local {
			m.sched.unsend(seq)
		}
	})
	reason := "this node's port " + local + " is cut off from the probes: " + pp.stuck
	m.setPortPaths(local, reason, now)
	m.log.Error("probe port cut off: its post does not return", "port", local, "since", since, "bound", PostBound,
		"effect", "its paths are unknown and not probed until the call returns; the other ports keep their schedule")
}

// rejoinReason is the reason of a path whose port came back from a cut
// until its next sample: aggregate judges its peer by the other paths
// meanwhile, as while the port was cut, so that a peer does not turn
// unknown for the interval its rejoined path waits for a probe.
const rejoinReason = "this node's port is back in the schedule after its post returned; waiting for the path's next probe"

// rejoinPort takes the port local back into the schedule: its call
// returned. Its paths stay unknown until their next sample (rejoinReason).
func (m *Manager) rejoinPort(local string, pp *poster, now time.Time) {
	m.log.Info("probe port back: its post returned", "port", local, "cut_off_for", now.Sub(pp.cutSince).Round(time.Millisecond))
	pp.cut, pp.stuck = false, ""
	m.sched.cut--
	m.setPortPaths(local, rejoinReason, now)
}

// setPortPaths makes every path from the port local unknown for reason
// and judges their peers again.
func (m *Manager) setPortPaths(local, reason string, now time.Time) {
	for _, p := range m.peers.inOrder() {
		touched := false
		for _, pa := range p.paths {
			if pa.local != local {
				continue
			}
			if pa.h.state != apitype.PeerUnknown {
				pa.h.since = now.UnixNano()
			}
			pa.h.state, pa.h.reason, pa.h.consecLost, pa.h.consecOK, pa.h.badFor = apitype.PeerUnknown, reason, 0, 0, badKey{}
			touched = true
		}
		if touched {
			m.changedPeer(p)
			m.aggregate(p, now)
		}
	}
	m.pub.changed, m.pub.suspects = true, true
}

// prunePosters stops the posters of ports no longer in local.
func (s *scheduler) prunePosters(local []ud.LocalPort) {
	for key, pp := range s.posters {
		if !slices.ContainsFunc(local, func(lp ud.LocalPort) bool { return lp.Key == key }) {
			if pp.cut {
				s.cut--
			}
			pp.stop()
			delete(s.posters, key)
		}
	}
}

// stopPosters stops every poster (Run returns).
func (s *scheduler) stopPosters() {
	for key, pp := range s.posters {
		pp.stop()
		delete(s.posters, key)
	}
	s.cut = 0
}
