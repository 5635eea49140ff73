// Package probe probes other rdmad nodes: it keeps the peer set from the
// configuration, selects a bounded share of it ([probe] max_peers), finds
// each peer's probe QP through the peer's control endpoint, schedules UD
// probes with jitter, and turns answers and timeouts into per-path states
// with hysteresis (up, degraded, down). The probes themselves go through a
// Transport: verbs/peer on RDMA hardware. The package does not import the
// verbs binding (internal/layout checks it): the values it exchanges with
// the transport are probe/ud's, and what it reads of verbs state for the
// fingerprint (ActiveMTUCache.Query) the daemon injects.
package probe

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"time"

	"github.com/rdmad/rdmad/client/apitype"
	"github.com/rdmad/rdmad/probe/ud"
	"github.com/rdmad/rdmad/probe/wire"
)

// A Transport sends probes and answers them; *peer.Engine is one.
type Transport interface {
	Ports() ([]ud.LocalPort, error)
	// ProbeBatch sends the probes of one local port together and
	// reports, in each target's Err, the ones that did not go.
	ProbeBatch(local string, ts []ud.Target) int
	// Admit lets src probe the local port until the time until; from is
	// the address its control query came from (admissions are bounded
	// per address), authenticated whether the query carried a valid tag.
	Admit(local string, src ud.Endpoint, from netip.Addr, authenticated bool, until time.Time) error
}

// A Spec is one configured peer.
type Spec struct {
	Name  string // address or host name
	Group string
}

// Settings are the [probe] keys and the peer list.
type Settings struct {
	Peers     []Spec
	Group     string // this node's group
	Port      int    // control endpoint's UDP port
	Allow     []netip.Prefix
	Interval  time.Duration
	Timeout   time.Duration
	Window    int
	MaxPeers  int
	Rotate    time.Duration // selection epoch
	Resolve   time.Duration // how often a peer's QP is looked up again
	Threshold Thresholds
	// Auth is the fleet key and whether it is required ([probe] key_file,
	// auth). The Transport is given the same key by its owner.
	Auth Auth
	// Flows is how many probe flows ([probe] flows) each path uses, at
	// most the local port's (ud.LocalPort.Flows) and those the peer
	// admits; 0 or 1: one.
	Flows int
}

// Options are a Manager's fixed parts.
type Options struct {
	Transport Transport
	NodeID    uint64
	// ListenHost is the address the control endpoint binds to, with the
	// port of Settings; default "::" (every address). Tests bind loopback
	// addresses.
	ListenHost string
	// OnState receives the peers' state after a state changed (at most
	// every 100 ms), when a reader asked for figures (Manager.Fresh) and
	// some moved, and every 30 s while only figures move; called from the
	// manager's goroutine.
	OnState func(apitype.Peers)
	// ProberCounters, if set, adds the prober's counters to the state.
	ProberCounters func() ud.Stats
	// Lookup resolves a peer's host name; default net.DefaultResolver.
	Lookup func(ctx context.Context, host string) ([]netip.Addr, error)
	Logger *slog.Logger
	// Bandwidth, if set, serves other nodes' bandwidth tests at the
	// control endpoint (ControlOptions.Bandwidth; verbs/bw's Node.Handle).
	Bandwidth func(from netip.AddrPort, m wire.Message) (wire.Message, bool)
	// Fingerprint, if set, builds this node's fingerprint, which the
	// control messages carry and peers' fingerprints are compared with
	// (fingerprint.go); it is called from the manager's goroutine at most
	// every fingerprintEvery and when the local ports change.
	Fingerprint FingerprintSource
}

// A Manager runs the peer probes until its Run's context is done.
//
// Its state is split by concern into parts that each own their fields:
// the peer table and selection (peers.go), the scheduler and the probes in
// flight (schedule.go), the control endpoint and the queries outstanding
// on it (endpoint.go), the one-shot probes (oneshot.go), the publisher
// (publish.go), the fingerprints (fingerprint.go) and the host name
// lookups (resolve.go). Other goroutines reach a Manager only through
// the inbox (inbox.go, behind its locks), the channels Run selects on and
// the control endpoint's atomic counters. Run's goroutine is the one that
// mutates the parts: its select loop and the pass it runs (tick) call the
// Manager's methods, which tie the parts together.
type Manager struct {
	opts Options
	log  *slog.Logger

	settings chan Settings
	in       inbox

	// Owned by Run's goroutine.
	cfg      Settings
	local    []ud.LocalPort
	localGen uint32 // counts the changes of local
	localErr error
	peers    peerTable
	sched    scheduler
	control  controlEndpoint
	oneshots oneShots
	pub      publisher
	fps      fingerprints
	resolver resolver
	// ann is the ports peers announced (announced.go); its own lock.
	ann announced
	// rtt counts every answered probe's RTT, of every path, since start:
	// the node's histogram, which outlives the peers the selection drops.
	rtt apitype.RTTHistogram
	// texts keeps the reasons that state flips make again (texts.go).
	texts *texts
	// pass says what the running pass does and since when (Stalled).
	pass passWatch
}

// New returns a Manager with settings s.
func New(opts Options, s Settings) (*Manager, error) {
	if opts.Transport == nil {
		return nil, errors.New("probe: a Transport is required (Options.Transport)")
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Lookup == nil {
		opts.Lookup = func(ctx context.Context, host string) ([]netip.Addr, error) {
			return net.DefaultResolver.LookupNetIP(ctx, "ip", host)
		}
	}
	m := &Manager{opts: opts, log: opts.Logger, settings: make(chan Settings, 1), in: newInbox(),
		peers: newPeerTable(), sched: newScheduler(), control: newControlEndpoint(), oneshots: newOneShots(),
		fps: newFingerprints(), resolver: newResolver(), pub: publisher{fresh: newFreshness()}, texts: newTexts()}
	m.sched.limit = batchLimit(opts.Transport)
	m.cfg = s
	return m, nil
}

// SetSettings replaces the settings (a reload). It never blocks: a newer
// call replaces one the manager has not picked up yet.
func (m *Manager) SetSettings(s Settings) {
	for {
		select {
		case m.settings <- s:
			return
		default:
		}
		select {
		case <-m.settings:
		default:
		}
	}
}

// Run opens the control endpoint and probes until ctx is done.
func (m *Manager) Run(ctx context.Context) error {
	// The host name lookups run on ctx's child: Run cancels them and
	// waits for them before it returns.
	ctx, cancel := context.WithCancel(ctx)
	m.pub.fresh.start()
	defer func() {
		cancel()
		m.resolver.wg.Wait()
		m.pub.fresh.stop()
	}()
	// The fingerprint exists before the endpoint answers anyone and before
	// the first queries go: a peer that gets an answer without one takes
	// this node for an rdmad that predates fingerprints until it asks
	// again, minutes later.
	m.local, m.localErr = m.opts.Transport.Ports()
	m.refreshFingerprint(time.Now(), true)
	if err := m.listen(ctx, m.cfg.Port); err != nil {
		return err
	}
	defer m.control.close()

	m.peers.localIPs = localAddrs()
	m.sched.posters = map[string]*poster{}
	defer m.sched.stopPosters()
	m.apply(ctx, m.cfg, time.Now())
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			m.failOneshots(ctx.Err())
			return nil
		case e := <-m.control.serveErr:
			if e.ctl == m.control.ctl {
				return e.err
			}
		case s := <-m.settings:
			m.pass.begin(time.Now(), phaseSettings)
			m.apply(ctx, s, time.Now())
		case <-m.in.kick:
		case <-m.pub.fresh.kick:
			// A reader wants figures (Fresh): this pass publishes.
		case r := <-m.resolver.results:
			m.onResolved(r)
		case o := <-m.oneshots.requests:
			m.startOneshot(ctx, o, time.Now())
		case o := <-m.oneshots.expired:
			m.expireOneshot(o)
		case <-timer.C:
		}
		now := time.Now()
		m.pass.begin(now, phaseStart)
		next := m.tick(ctx, now)
		m.pass.end()
		timer.Reset(max(next.Sub(time.Now()), time.Millisecond))
	}
}

// tick does what is due at now and returns when to look again.
func (m *Manager) tick(ctx context.Context, now time.Time) time.Time {
	if e := uint64(now.UnixNano()) / uint64(m.cfg.Rotate); e != m.peers.epoch {
		m.peers.epoch = e
		m.reselect(now)
	}
	// Everything this pass sends counts against its batch, the first
	// probes of paths that the inbox's answers resolve too.
	m.sched.batched = 0
	if m.in.ports.Swap(false) {
		// Before the inbox: the queries waiting there are answered
		// with the ports of now.
		m.pass.in(phasePorts)
		m.refreshPorts(now)
	}
	if m.sched.posters != nil {
		m.pass.in(phaseCollect)
		m.collectPosts(now)
	}
	m.pass.in(phaseInbox)
	m.takeInbox(now)
	m.pass.in(phaseExpire)
	m.expire(now)
	// A changed fingerprint goes with this pass's queries.
	m.pass.in(phaseFinish)
	m.refreshFingerprint(now, false)
	m.flushMismatchLog(now)
	// Visit the peers due now and those due within the batch window:
	// their probes leave a little early, together, at most m.sched.limit of
	// them.
	window := batchWindow(m.cfg.Interval)
	horizon := monoNs(now.Add(window + tickSlack))
	m.pass.in(phaseVisits)
	for m.sched.due.len() > 0 && m.sched.due.top().due <= horizon && m.sched.batched < m.sched.limit {
		p := m.sched.due.top()
		m.visit(ctx, p, now)
		m.sched.due.fix(p)
	}
	m.pass.in(phasePost)
	m.sched.flush(m.opts.Transport, m.log)
	m.pass.in(phaseFinish)
	if m.control.allowStale {
		m.updateAllow()
	}
	m.control.trimSpares()
	m.sched.flights.trim()
	m.updateAnnounced()
	if m.sched.batched >= m.sched.limit && m.sched.due.len() > 0 && m.sched.due.top().due <= horizon {
		// More were due within the window than one pass sends: the
		// next pass follows at once.
		return now
	}
	m.pass.in(phasePublish)
	next := m.sched.wakeBy(now, m.publish(now), m.cfg.Timeout, window)
	if (len(m.control.nonces) > 0 || m.sched.rising) && now.Add(window).Before(next) {
		// Answers to the queries wait in the inbox, or the answer of a
		// rising path's probe (rise): take them within the batch
		// window.
		next = now.Add(window)
	}
	// While a path rises, its replies wake the manager at once, as
	// while a one-shot probe waits: its up_after answers then take
	// about as many round trips, not batch windows. The next pass
	// without a rising path's answer ends it.
	m.in.urgent.Store(m.oneshots.waiting > 0 || m.sched.rising)
	m.sched.rising = false
	// One schedule for all due work: every pass falls on a tick of the
	// batch window, so the probes due within a window, the timeouts, the
	// control answers and the publish share one wakeup, and it is the
	// control endpoint's (Control.Serve lingers to the same ticks). One
	// timer per probe would cost a wakeup each at a thousand peers.
	return alignUp(next.Add(-tickSlack), window)
}

// apply installs settings: the peer list, the allow list, the selection,
// and the control endpoint's port. A port that cannot be bound leaves the
// endpoint where it is, says so in the state and the log, and is tried
// again at the next reload.
func (m *Manager) apply(ctx context.Context, s Settings, now time.Time) {
	if s.Threshold != m.cfg.Threshold {
		// The reasons kept give the thresholds of before.
		m.forgetReasons()
	}
	m.cfg = s
	m.control.err = ""
	if m.control.ctl != nil {
		m.control.ctl.SetAuth(s.Auth)
	}
	if s.Port != m.control.port {
		if err := m.listen(ctx, s.Port); err != nil {
			m.control.err = fmt.Sprintf("%v; still answering on UDP port %d", err, m.control.port)
			m.log.Error("cannot move the control endpoint", "port", s.Port, "err", err, "still_on", m.control.port)
		} else {
			m.log.Info("control endpoint moved", "port", s.Port)
		}
		m.pub.changed = true
	}
	m.local, m.localErr = m.opts.Transport.Ports()
	m.localGen++
	if m.sched.posters != nil {
		m.sched.prunePosters(m.local)
	}
	m.peers.epoch = uint64(now.UnixNano()) / uint64(s.Rotate)
	m.reselect(now)
	m.sizeControl()
}

// forgetReasons drops the degraded reasons kept for their figures (the
// paths' and the texts'): they give the thresholds they were written
// for, which badKey does not hold. A path's next sample writes its reason
// again.
func (m *Manager) forgetReasons() {
	m.texts = newTexts()
	for _, p := range m.peers.byName {
		for _, pa := range p.paths {
			pa.h.badFor = badKey{}
		}
	}
}

func (m *Manager) localErrOr() error {
	if m.localErr != nil {
		return m.localErr
	}
	return errors.New("no local probe port")
}
