package probe

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/netip"
	"time"
	"unsafe"

	"github.com/rdmad/rdmad/client/apitype"
	"github.com/rdmad/rdmad/probe/ud"
	"github.com/rdmad/rdmad/probe/wire"
)

// The scheduler holds whose turn comes next and the probes in flight: the
// due heap of the selected peers, the probes of this pass waiting to be
// posted together (one batch per local port), the sequence numbers and
// what became of the probes.
type scheduler struct {
	due     dueHeap
	flights flights // probes in flight, by sequence number
	seq     uint64
	outbox  map[string]*outQueue // probes of this tick by local port
	batched int                  // probes and queries of this pass
	limit   int                  // the most a pass sends (batchLimit)
	notSent uint64
	// rising says a down path answered in this pass (rise): the next
	// pass comes at the next tick.
	rising bool
	// posters post each local port's batches on a goroutine of their
	// own (post.go); nil until Run starts them, and flush posts on the
	// caller's goroutine (the tests that drive a pass by hand). cut
	// counts the posters cut off from the schedule.
	posters map[string]*poster
	cut     int
}

func newScheduler() scheduler { return scheduler{outbox: map[string]*outQueue{}} }

// An outQueue is a local port's probes of this pass, in a buffer sized to
// what the passes send (shrinker): a pass after a stall or a burst of
// first probes sends up to maxBatch, and a buffer kept at that (64 KiB)
// would be held for nothing ever after.
type outQueue struct {
	ts []ud.Target
	sh shrinker
}

// maxInflightPerPath bounds the probes in flight on one path.
const maxInflightPerPath = 2

// maxBatchWindow bounds how early a probe may go to share a wakeup and a
// post with others (a quarter of peer_interval when that is shorter): at
// a thousand peers a second, one wakeup per 250 ms sends about 250 probes
// with one doorbell instead of 250 wakeups. A wakeup costs far more than
// a probe (on a VM tens of µs for the thread switch, and a Go timer wakes
// four or five threads: issue #29), and a peer's next turn is counted
// from its due time, not from the early send, so probes do not come more
// often than peer_interval; one peer's probes are peer_interval ± (10%
// jitter + the window) apart, peer_interval on average. A quarter keeps
// a stopped peer's "down" within 3 s at the defaults (docs/PROBES.md,
// "Which time is down within 3 s?") and makes the default peer_timeout
// (500 ms) two windows, so that timeouts fall on the same ticks.
const maxBatchWindow = 250 * time.Millisecond

// batchWindow is the batch window at probe interval iv: how early a probe
// may go, how long the control endpoint lets messages gather, and the
// period of the ticks every pass of the manager falls on (alignUp).
func batchWindow(iv time.Duration) time.Duration { return min(iv/4, maxBatchWindow) }

// tickSlack is how late after its tick a pass may run (the timer's own
// delay, a busy machine) and still do what falls due at the tick: a
// probe's turn within the window plus tickSlack goes with the pass, and a
// timeout up to tickSlack after a tick is waited for from that tick (it
// expires at the pass if the pass is late enough, else at once after it:
// only probes without an answer pay that second pass).
const tickSlack = 2 * time.Millisecond

// alignUp returns the first tick at or after t of a clock that ticks
// every d (multiples of d since the Unix epoch; t's monotonic reading is
// kept). The manager's passes and the control endpoint's batched reads
// wait for the same ticks, so their timers expire together and the Go
// runtime wakes its threads once for both instead of once each (a timer
// wakes several threads: the one in the poller, sysmon, a spinning M).
func alignUp(t time.Time, d time.Duration) time.Time {
	if d <= 0 {
		return t
	}
	if r := time.Duration(t.UnixNano() % int64(d)); r != 0 {
		return t.Add(d - r)
	}
	return t
}

// maxBatch bounds the probes and queries one wakeup sends, unless the
// transport bounds them lower (batchLimiter): a batch goes out of each
// port as one chained post and its replies come back together, to
// receives posted for them (verbs/peer sizes its ports for 1,024, twice
// over). When more are due within the batch window, the next wakeup
// follows at once: at ten thousand peers at 1 Hz a window holds 2,500
// probes, which batches of 256 sent in ten wakeups (issue #29).
const maxBatch = 1024

// A batchLimiter is a Transport that bounds the probes of one ProbeBatch
// (verbs/peer's Engine: half its slots).
type batchLimiter interface{ MaxBatch() int }

// batchLimit returns the most probes and queries one pass sends over tr.
func batchLimit(tr Transport) int {
	if bl, ok := tr.(batchLimiter); ok {
		return max(1, min(maxBatch, bl.MaxBatch()))
	}
	return maxBatch
}

// visit is a peer's turn: look up its QPs if needed, probe every resolved
// path, and schedule the next turn.
func (m *Manager) visit(ctx context.Context, p *mpeer, now time.Time) {
	// The next turn counts from this one's due time, which may be up to
	// the batch window ahead; from now when the turn is late by more than
	// half an interval (a first turn, a stalled loop).
	base := p.due
	if t := monoNs(now); t-base > int64(m.cfg.Interval/2) {
		base = t
	}
	p.due = base + int64(jitter(m.cfg.Interval))
	if !p.addr.IsValid() {
		m.resolve(ctx, p)
		return
	}
	m.refreshPaths(p)
	if len(m.local) == 0 {
		return
	}
	if m.missedQueries(p, now) {
		if int(p.qMisses) >= m.cfg.Threshold.DownAfter && !m.anyResolved(p) {
			m.setPeerStateApart(p, apitype.PeerDown, fmt.Sprintf("its control endpoint %s does not answer; is rdmad running there, and does its [probe] allow or peer list include this node?",
				netip.AddrPortFrom(p.addr, uint16(m.cfg.Port))), now)
		}
	}
	// A version-1 peer due for a version-2 retry (see v2Retry) is asked
	// now rather than at its next resolve, once, on its first path.
	v2Due := p.ver == wire.Version1 && !m.cfg.Auth.Require && now.Sub(p.r().v2Tried) >= p.r().v2Wait
	// A version-2 peer's first path is asked more often than the resolve
	// interval, for the clock offset alone (clockEvery).
	clockDue := p.ver == wire.Version2 && len(p.paths) > 0 && p.paths[0].askedAgo(now) >= m.clockEvery()
	for i, pa := range p.paths {
		// A down path is asked at every turn (its peer may have a new
		// QP), but not again within half an interval: a path rising
		// (rise) has its turns a batch window apart, and the QP that
		// answers it is the one to probe.
		downAsk := pa.h.state == apitype.PeerDown && pa.askedAgo(now) >= m.cfg.Interval/2
		if !pa.resolved || pa.askedAgo(now) >= m.cfg.Resolve || downAsk || (v2Due && i == 0) || (clockDue && i == 0) {
			m.query(p, i, now)
		}
		if pa.resolved && pa.canSend() && !m.sched.isCut(pa.local) {
			m.send(p, pa, now)
		}
	}
}

// probeAuth reports whether probes to p are tagged: always when a key is
// required, and with a key that is only preferred, to peers whose control
// answers proved they have it (others could not check a tag and would drop
// the probe).
func (m *Manager) probeAuth(p *mpeer) bool {
	a := m.cfg.Auth
	return len(a.Key) > 0 && (a.Require || p.authenticated)
}

// send queues the path's turn: a probe on its next flow, or on every flow
// in a burst (turnFlows); flush posts them.
func (m *Manager) send(p *mpeer, pa *path, now time.Time) {
	auth := m.probeAuth(p)
	first, n := pa.turnFlows()
	for f := first; f < first+n; f++ {
		m.sched.queue(p, pa, uint8(f), now, auth)
	}
}

// queue puts a probe of the path's flow in flight and in the outbox.
func (s *scheduler) queue(p *mpeer, pa *path, flow uint8, now time.Time, auth bool) {
	s.seq++
	s.batched++
	pa.inflight++
	s.flights.push(s.seq, flight{p: p, pa: pa, sent: monoNs(now), flow: flow})
	q := s.outbox[pa.local]
	if q == nil {
		q = &outQueue{}
		s.outbox[pa.local] = q
	}
	q.ts = append(q.ts, ud.Target{Dst: pa.remote, Seq: s.seq, Auth: auth, Flow: flow})
}

// flush posts the queued probes through tr, one batch per local port: it
// hands them to the ports' posters once Run started them (post.go), else
// posts them itself. A probe that did not go is not in flight: it counts
// as not sent, not as lost.
func (s *scheduler) flush(tr Transport, log *slog.Logger) {
	if s.posters != nil {
		s.post(tr, log)
		return
	}
	for local, q := range s.outbox {
		ts := q.ts
		if len(ts) == 0 {
			continue
		}
		if n := tr.ProbeBatch(local, ts); n < len(ts) {
			for _, t := range ts {
				if t.Err == nil {
					continue
				}
				if f := s.unsend(t.Seq); f != nil {
					log.Debug("probe not sent", "peer", f.p.spec.Name, "port", local, "err", t.Err)
				}
			}
		}
		q.ts = resize(ts, q.sh.size(len(ts), cap(ts), int(unsafe.Sizeof(ud.Target{}))))
	}
}

// nextExpired takes the oldest probe in flight if it is older than
// timeout at now.
func (s *scheduler) nextExpired(now time.Time, timeout time.Duration) (uint64, flight, bool) {
	ff := s.flights.front() // answered and dropped ones are skipped
	if ff == nil || time.Duration(monoNs(now)-ff.sent) < timeout {
		return 0, flight{}, false
	}
	seq, f := s.flights.frontSeq(), *ff
	s.flights.pop()
	return seq, f, true
}

// wakeBy returns when the scheduler needs the manager next, at next at
// the latest: the next turn due, less early (a turn may be taken that much
// ahead, with the batch it shares a pass with), or the oldest probe's
// timeout, as a time of now's clock (the ticks are of the wall clock).
func (s *scheduler) wakeBy(now, next time.Time, timeout, early time.Duration) time.Time {
	if s.due.len() > 0 {
		// As a time of now's clock: the ticks are of the wall clock,
		// which a time made from monoNs alone (dueAt) may be off from
		// by whatever it was stepped or slewed by since the start.
		if t := now.Add(time.Duration(s.due.top().due-monoNs(now)) - early); t.Before(next) {
			next = t
		}
	}
	if f := s.flights.front(); f != nil {
		if t := now.Add(timeout - time.Duration(monoNs(now)-f.sent)); t.Before(next) {
			next = t
		}
	}
	return next
}

// expire turns probes older than the timeout into losses.
func (m *Manager) expire(now time.Time) {
	for {
		seq, f, ok := m.sched.nextExpired(now, m.cfg.Timeout)
		if !ok {
			break
		}
		if m.sched.heldByPost(f.pa.local, monoNs(now), m.cfg.Timeout) {
			// It waits behind, or is in, a post that has not returned
			// (post.go): not a loss of the path's.
			m.sched.notSent++
			f.pa.inflight--
			continue
		}
		f.pa.inflight--
		f.pa.lost++
		f.pa.sent++
		f.pa.lastSeq = seq
		if fl := f.pa.fl; fl != nil && int(f.flow) < len(fl.flows) {
			fl.flows[f.flow].lost++
			fl.flows[f.flow].sent++
		}
		m.observeFlow(f.p, f.pa, int(f.flow), sample{lost: true}, now)
		if f.pa.h.state != apitype.PeerDown && m.peers.byName[f.p.spec.Name] == f.p && f.pa.hurry(int(f.flow)) {
			// Probe again soon: a lost probe is either noise or the
			// start of an outage, and the next ones tell which sooner
			// than a full interval would; on several flows the turn
			// probes every flow (hurry, flows.go).
			if soon := monoNs(now.Add(min(m.cfg.Interval/10, 100*time.Millisecond))); soon < f.p.due {
				f.p.due = soon
				m.sched.due.fix(f.p)
			}
		}
	}
}

// inFlight calls fn for every probe in flight, oldest first.
func (s *scheduler) inFlight(fn func(seq uint64, f *flight)) {
	fs := &s.flights
	for seq, end := fs.frontSeq(), fs.frontSeq()+uint64(fs.n); seq < end; seq++ {
		if f := fs.get(seq); f != nil {
			fn(seq, f)
		}
	}
}

// losePath counts the probes in flight on p's path pa lost now (their QP
// is gone), as their timeout would.
func (m *Manager) losePath(p *mpeer, pa *path, now time.Time) {
	m.sched.inFlight(func(seq uint64, f *flight) {
		if f.pa != pa {
			return
		}
		flow := f.flow
		*f = flight{} // a hole the front skips
		pa.inflight--
		pa.lost++
		pa.sent++
		pa.lastSeq = seq
		if fl := pa.fl; fl != nil && int(flow) < len(fl.flows) {
			fl.flows[flow].lost++
			fl.flows[flow].sent++
		}
		m.observeFlow(p, pa, int(flow), sample{lost: true}, now)
	})
}

func jitter(d time.Duration) time.Duration {
	// ±10%: peers that started together drift apart instead of probing in
	// bursts.
	return d - d/10 + time.Duration(rand.Int64N(int64(d/5)+1))
}

// dueHeap orders peers by their next turn. Each entry holds the turn as
// nanoseconds since the heap's origin, so that sifting through ten
// thousand peers compares numbers in one array rather than reading every
// peer it passes. A peer whose turn moves gets a new entry; the old one is
// known stale by its version (mpeer.dueVer) and dropped when it comes to
// the top. So the peers are never written while the heap is sifted, and a
// turn pushed a second ahead, as every visit does, sifts up a level or
// two.
type dueHeap struct {
	e    []dueEntry
	live int // peers with a turn; the rest of e is stale
}

type dueEntry struct {
	at  int64 // p.due
	p   *mpeer
	ver uint32 // p.dueVer when pushed
}

// clean drops the stale entries at the top.
func (h *dueHeap) clean() {
	for len(h.e) > 0 && h.e[0].ver != h.e[0].p.dueVer {
		last := len(h.e) - 1
		h.e[0] = h.e[last]
		h.e[last] = dueEntry{}
		h.e = h.e[:last]
		h.down(0)
	}
}

// len reports how many entries there are: 0 when no peer has a turn.
func (h *dueHeap) len() int {
	h.clean()
	return len(h.e)
}

// top returns the peer whose turn comes first; len must be > 0.
func (h *dueHeap) top() *mpeer {
	h.clean()
	return h.e[0].p
}

// push schedules p at p.due (its entry from before, if any, is stale).
func (h *dueHeap) push(p *mpeer) {
	if !p.inDue {
		p.inDue = true
		h.live++
	}
	p.dueVer++
	if len(h.e) > 2*h.live+64 {
		h.compact()
	}
	h.e = append(h.e, dueEntry{at: p.due, p: p, ver: p.dueVer})
	h.up(len(h.e) - 1)
}

// fix moves p to its turn p.due, which changed. When p's entry is the top,
// as when the manager has just visited it, the entry is updated in place
// and sifted down: one pass down the heap instead of a new entry sifted up
// and the stale one later taken off the top.
func (h *dueHeap) fix(p *mpeer) {
	if p.inDue && len(h.e) > 0 && h.e[0].p == p && h.e[0].ver == p.dueVer {
		p.dueVer++
		h.e[0] = dueEntry{at: p.due, p: p, ver: p.dueVer}
		h.down(0)
		return
	}
	h.push(p)
}

// remove takes p out: its entries are stale.
func (h *dueHeap) remove(p *mpeer) {
	if p.inDue {
		p.inDue = false
		h.live--
	}
	p.dueVer++
}

// compact drops every stale entry: when turns move often between visits
// (retries after losses, lookups, one-shot probes), stale entries would
// otherwise wait for their time to reach the top.
func (h *dueHeap) compact() {
	k := 0
	for _, e := range h.e {
		if e.ver == e.p.dueVer {
			h.e[k] = e
			k++
		}
	}
	clear(h.e[k:])
	h.e = h.e[:k]
	for i := k/2 - 1; i >= 0; i-- {
		h.down(i)
	}
}

func (h *dueHeap) up(j int) {
	e := h.e[j]
	for j > 0 {
		i := (j - 1) / 2
		if h.e[i].at <= e.at {
			break
		}
		h.e[j] = h.e[i]
		j = i
	}
	h.e[j] = e
}

func (h *dueHeap) down(i int) {
	n := len(h.e)
	if n == 0 {
		return
	}
	e := h.e[i]
	for {
		l := 2*i + 1
		if l >= n {
			break
		}
		j := l
		if r := l + 1; r < n && h.e[r].at < h.e[l].at {
			j = r
		}
		if e.at <= h.e[j].at {
			break
		}
		h.e[i] = h.e[j]
		i = j
	}
	h.e[i] = e
}
