// Package pingmesh probes other rdmad nodes: it keeps the peer set from the
// configuration, selects a bounded share of it ([probe] max_peers), finds
// each peer's probe QP through the peer's control endpoint, schedules UD
// probes with jitter, and turns answers and timeouts into per-path states
// with hysteresis (up, degraded, down). The probes themselves go through a
// Prober: verbs/peer on RDMA hardware.
package pingmesh

import (
	"container/heap"
	"context"
	crand "crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rdmad/rdmad/client/apitype"
	"github.com/rdmad/rdmad/verbs/peer"
	"github.com/rdmad/rdmad/verbs/pingmesh/wire"
)

// A Transport sends probes and answers them; *peer.Engine is one.
type Transport interface {
	Ports() ([]peer.LocalPort, error)
	// ProbeBatch sends the probes of one local port together and
	// reports, in each target's Err, the ones that did not go.
	ProbeBatch(local string, ts []peer.Target) int
	// Admit lets src probe the local port until the time until; from is
	// the address its control query came from (admissions are bounded
	// per address).
	Admit(local string, src peer.Endpoint, from netip.Addr, until time.Time) error
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
	// auth). The Prober is given the same key by its owner.
	Auth Auth
}

// Options are a Manager's fixed parts.
type Options struct {
	Transport Transport
	NodeID    uint64
	// ListenHost is the address the control endpoint binds to, with the
	// port of Settings; default "::" (every address). Tests bind loopback
	// addresses.
	ListenHost string
	// OnState receives the peers' state after changes, at most about once a
	// second unless a state changed; called from the manager's goroutine.
	OnState func(apitype.Peers)
	// ProberCounters, if set, adds the prober's counters to the state.
	ProberCounters func() peer.Stats
	// Lookup resolves a peer's host name; default net.DefaultResolver.
	Lookup func(ctx context.Context, host string) ([]netip.Addr, error)
	Logger *slog.Logger
	// Fingerprint, if set, builds this node's fingerprint, which the
	// control messages carry and peers' fingerprints are compared with
	// (fingerprint.go); it is called from the manager's goroutine at most
	// every fingerprintEvery and when the local ports change.
	Fingerprint FingerprintSource
}

// maxWaiting bounds the one-shot probes waiting at once (each holds a
// timer and an API request).
const maxWaiting = 64

// maxQueriesPerPeer bounds the control queries outstanding to one peer:
// an answer is taken only for one of them, and each is taken once.
const maxQueriesPerPeer = 16

// v2Retry bounds how often a peer that answered only version 1 is asked in
// version 2 again, to notice that it was upgraded. The first retries come
// sooner (after 1, 2, 4 ... intervals): a peer whose rdmad was not up yet
// when it was asked in version 2 may have answered only the version-1
// query that followed, and must not be held in version 1 for minutes.
const v2Retry = 10 * time.Minute

// maxInflightPerPath bounds the probes in flight on one path.
const maxInflightPerPath = 2

// maxBatchWindow bounds how early a probe may go to share a wakeup and a
// post with others: at a thousand peers a second, one wakeup per 20 ms
// sends about twenty probes with one doorbell instead of twenty wakeups.
const maxBatchWindow = 20 * time.Millisecond

// A Manager runs the peer probes until its Run's context is done.
type Manager struct {
	opts Options
	log  *slog.Logger

	settings chan Settings
	// Replies wait in repBuf for the manager's next pass instead of
	// waking it each: at a thousand probes a second that is a thousand
	// goroutine wakeups saved. The pass that expires probes takes them
	// first, so a queued answer is never counted as lost. repKick wakes
	// the manager at once only while a one-shot probe waits (urgent).
	repMu    sync.Mutex
	repBuf   []peer.Reply
	repKick  chan struct{}
	urgent   atomic.Bool
	answers  chan answer
	resolved chan resolution
	oneshots chan *oneshot
	// expired receives a one-shot whose wait is over. It is a channel of
	// its own, never a name in oneshots: nothing a caller can spell ends
	// another caller's wait.
	expired chan *oneshot

	// Owned by Run's goroutine.
	cfg       Settings
	ctl       *Control
	peers     map[string]*mpeer
	due       dueHeap
	flights   map[uint64]*flight
	order     []uint64 // flights in send order: they time out in it
	seq       uint64
	nonces    map[uint64]*mpeer // outstanding control queries by nonce
	epoch     uint64
	local     []peer.LocalPort
	localErr  error
	localIPs  map[netip.Addr]bool
	dirty     bool
	changed   bool
	published time.Time
	notSent   uint64
	resolving int
	// lookups counts the resolve goroutines; Run waits for them.
	lookups  sync.WaitGroup
	outbox   map[string][]peer.Target // probes of this tick by local port
	repSpare []peer.Reply             // the other reply buffer
	waiting  int                      // one-shot probes waiting
	faults   map[string]string        // local port -> why it is the suspect
	// The control endpoint in force (m.ctl), its Serve goroutine's end,
	// the port it is bound to, and why that is not the configured one.
	// Endpoints that replace each other share the counters.
	ctlDone     chan struct{}
	ctlPort     int
	ctlErr      string
	ctlCounters ControlCounters
	serveErr    chan ctlErr
	// This node's fingerprint, its wire form and when it was built.
	fp      *wire.Fingerprint
	fpBytes []byte
	fpAt    time.Time
}

// A ctlErr is a control endpoint's Serve failing.
type ctlErr struct {
	ctl *Control
	err error
}

type answer struct {
	from netip.AddrPort
	m    wire.Message
	// query: m is a query this node answered, passed on for the
	// fingerprint it carries.
	query bool
}

type resolution struct {
	name string
	addr netip.Addr
	err  error
}

type oneshot struct {
	name string
	done chan apitype.Peer
	err  error
	// Set by the manager's goroutine: the peer it waits on, and whether
	// it was answered (a oneshot is answered exactly once).
	p        *mpeer
	answered bool
}

// A query is a control query waiting for its answer: which path it asked
// for, where it went (the answer must come from there) and in which wire
// version.
type query struct {
	idx  int
	to   netip.AddrPort
	ver  uint8
	sent time.Time
}

// An mpeer is a selected peer.
type mpeer struct {
	spec        Spec
	addr        netip.Addr
	addrErr     string
	lookupFails int // failed lookups in a row
	nodeID      uint64
	paths       []*path
	due         time.Time
	hidx        int
	queried     map[uint64]query // outstanding queries by nonce
	qMisses     int
	// ver is the wire version the peer last answered in (0: none yet),
	// qver the one to ask in next; authenticated whether its last answer
	// carried a valid tag. v2Tried is when a version-1 peer was last
	// asked in version 2.
	ver, qver     uint8
	authenticated bool
	v2Tried       time.Time
	v2Wait        time.Duration // before the next version-2 retry
	lastAns       time.Time
	state         string
	reason        string
	since         time.Time
	waiters       []*oneshot
	waitFrom      uint64 // waiters want results of probes with seq > waitFrom
	oneshot       bool   // added only for a one-shot probe
	// fp is the fingerprint the peer last sent (nil: unknown), mismatch
	// the mismatches last logged, as text.
	fp       *wire.Fingerprint
	mismatch string
}

// A path is the probes from one local port to the peer's matching port.
type path struct {
	local    string
	remote   peer.Endpoint
	resolved bool
	asked    time.Time
	win      *window
	h        health
	sent     uint64
	lost     uint64
	lastRTT  time.Duration
	lastSeq  uint64 // last probe with a result
	inflight int
	stats    winStats
	stale    bool
	auth     bool // the last reply carried a valid tag
	// remoteIdx is the peer's port index the path probes (the answer's
	// Index): the port of the peer's fingerprint to compare with.
	remoteIdx uint8
}

type flight struct {
	p    *mpeer
	pa   *path
	sent time.Time
}

// New returns a Manager with settings s.
func New(opts Options, s Settings) (*Manager, error) {
	if opts.Transport == nil {
		return nil, errors.New("peers: a Prober is required")
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Lookup == nil {
		opts.Lookup = func(ctx context.Context, host string) ([]netip.Addr, error) {
			return net.DefaultResolver.LookupNetIP(ctx, "ip", host)
		}
	}
	m := &Manager{opts: opts, log: opts.Logger,
		settings: make(chan Settings, 1), repKick: make(chan struct{}, 1), answers: make(chan answer, 1024),
		resolved: make(chan resolution, 64), oneshots: make(chan *oneshot, 16), expired: make(chan *oneshot, maxWaiting),
		peers: map[string]*mpeer{}, flights: map[uint64]*flight{}, outbox: map[string][]peer.Target{}, nonces: map[uint64]*mpeer{}}
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

// maxQueuedReplies bounds the replies waiting for the manager's pass.
const maxQueuedReplies = 8192

// OnReply takes an answered probe from the prober. It never blocks; a reply
// that finds the queue full is dropped and the probe counts as lost.
func (m *Manager) OnReply(r peer.Reply) {
	m.repMu.Lock()
	if len(m.repBuf) < maxQueuedReplies {
		m.repBuf = append(m.repBuf, r)
	}
	m.repMu.Unlock()
	if m.urgent.Load() {
		select {
		case m.repKick <- struct{}{}:
		default:
		}
	}
}

// takeReplies handles the queued replies.
func (m *Manager) takeReplies() {
	m.repMu.Lock()
	rs := m.repBuf
	m.repBuf = m.repSpare[:0]
	m.repMu.Unlock()
	for _, r := range rs {
		m.onReply(r)
	}
	m.repSpare = rs[:0]
}

// ProbeOnce probes the configured peer name (name or address) now, from
// every local port, and returns its state once every path answered or timed
// out.
func (m *Manager) ProbeOnce(ctx context.Context, name string) (apitype.Peer, error) {
	o := &oneshot{name: name, done: make(chan apitype.Peer, 1)}
	select {
	case m.oneshots <- o:
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

// Run opens the control endpoint and probes until ctx is done.
func (m *Manager) Run(ctx context.Context) error {
	// The host name lookups run on ctx's child: Run cancels them and
	// waits for them before it returns.
	ctx, cancel := context.WithCancel(ctx)
	defer func() {
		cancel()
		m.lookups.Wait()
	}()
	m.serveErr = make(chan ctlErr, 1)
	if err := m.listen(ctx, m.cfg.Port); err != nil {
		return err
	}
	defer func() {
		m.ctl.Close()
		<-m.ctlDone
	}()

	m.localIPs = localAddrs()
	m.apply(ctx, m.cfg, time.Now())
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			m.failOneshots(ctx.Err())
			return nil
		case e := <-m.serveErr:
			if e.ctl == m.ctl {
				return e.err
			}
		case s := <-m.settings:
			m.apply(ctx, s, time.Now())
		case <-m.repKick:
		case a := <-m.answers:
			m.onAnswer(a, time.Now())
		case r := <-m.resolved:
			m.onResolved(r)
		case o := <-m.oneshots:
			m.startOneshot(ctx, o, time.Now())
		case o := <-m.expired:
			m.expireOneshot(o)
		case <-timer.C:
		}
		now := time.Now()
		next := m.tick(ctx, now)
		timer.Reset(max(next.Sub(time.Now()), time.Millisecond))
	}
}

// tick does what is due at now and returns when to look again.
func (m *Manager) tick(ctx context.Context, now time.Time) time.Time {
	if e := uint64(now.UnixNano()) / uint64(m.cfg.Rotate); e != m.epoch {
		m.epoch = e
		m.reselect(now)
	}
	m.takeReplies()
	m.expire(now)
	// Visit the peers due now and those due within the batch window:
	// their probes leave a little early, together.
	horizon := now.Add(min(m.cfg.Interval/50, maxBatchWindow))
	for m.due.Len() > 0 && !m.due[0].due.After(horizon) {
		p := m.due[0]
		m.visit(ctx, p, now)
		heap.Fix(&m.due, 0)
	}
	m.flush()
	m.refreshFingerprint(now, false)
	m.publish(now)
	next := now.Add(time.Second)
	if m.due.Len() > 0 && m.due[0].due.Before(next) {
		next = m.due[0].due
	}
	if len(m.order) > 0 {
		if f := m.flights[m.order[0]]; f != nil && f.sent.Add(m.cfg.Timeout).Before(next) {
			next = f.sent.Add(m.cfg.Timeout)
		}
	}
	// Wake once for all probes due within the next few milliseconds:
	// one timer per probe would cost a wakeup each at a thousand peers.
	return next.Add(2 * time.Millisecond)
}

// listen opens the control endpoint on port and serves it, closing the one
// it replaces. On an error the endpoint in force stays.
func (m *Manager) listen(ctx context.Context, port int) error {
	host := m.opts.ListenHost
	if host == "" {
		host = "::"
	}
	addr := net.JoinHostPort(host, strconv.Itoa(port))
	ctl, err := ListenControl(addr, ControlOptions{
		NodeID:   m.opts.NodeID,
		Ports:    func() []peer.LocalPort { p, _ := m.opts.Transport.Ports(); return p },
		Admit:    m.opts.Transport.Admit,
		AdmitFor: 3 * m.cfg.Resolve,
		Auth:     m.cfg.Auth,
		OnAnswer: func(from netip.AddrPort, msg wire.Message) {
			select {
			case m.answers <- answer{from: from, m: msg}:
			default:
			}
		},
		OnQuery: func(from netip.AddrPort, msg wire.Message) {
			if !hasExt(msg, wire.ExtFingerprint) {
				return
			}
			select {
			case m.answers <- answer{from: from, m: msg, query: true}:
			default:
			}
		},
		Counters: &m.ctlCounters,
	})
	if err != nil {
		return err
	}
	ctl.SetFingerprint(m.fpBytes)
	if m.ctl != nil {
		// A closed endpoint's Serve returns nil: nothing to report.
		m.ctl.Close()
		<-m.ctlDone
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := ctl.Serve(ctx); err != nil {
			select {
			case m.serveErr <- ctlErr{ctl, err}:
			default:
			}
		}
	}()
	m.ctl, m.ctlDone, m.ctlPort = ctl, done, port
	return nil
}

// apply installs settings: the peer list, the allow list, the selection,
// and the control endpoint's port. A port that cannot be bound leaves the
// endpoint where it is, says so in the state and the log, and is tried
// again at the next reload.
func (m *Manager) apply(ctx context.Context, s Settings, now time.Time) {
	m.cfg = s
	m.ctlErr = ""
	if m.ctl != nil {
		m.ctl.SetAuth(s.Auth)
	}
	if s.Port != m.ctlPort {
		if err := m.listen(ctx, s.Port); err != nil {
			m.ctlErr = fmt.Sprintf("%v; still answering on UDP port %d", err, m.ctlPort)
			m.log.Error("cannot move the control endpoint", "port", s.Port, "err", err, "still_on", m.ctlPort)
		} else {
			m.log.Info("control endpoint moved", "port", s.Port)
		}
		m.changed = true
	}
	m.local, m.localErr = m.opts.Transport.Ports()
	m.epoch = uint64(now.UnixNano()) / uint64(s.Rotate)
	m.reselect(now)
}

// reselect computes the selected peers for the current epoch and adds or
// drops peers accordingly. Paths of kept peers keep their history.
func (m *Manager) reselect(now time.Time) {
	cands := make([]Candidate, 0, len(m.cfg.Peers))
	specs := make([]Spec, 0, len(m.cfg.Peers))
	for _, sp := range m.cfg.Peers {
		if ip, err := netip.ParseAddr(sp.Name); err == nil && m.localIPs[ip.Unmap()] {
			continue // this node itself, listed in a shared peers file
		}
		cands = append(cands, Candidate{Name: sp.Name, Group: sp.Group})
		specs = append(specs, sp)
	}
	want := map[string]Spec{}
	for _, i := range Select(m.opts.NodeID, m.cfg.Group, cands, m.cfg.MaxPeers, m.epoch) {
		want[specs[i].Name] = specs[i]
	}
	for name, p := range m.peers {
		if _, ok := want[name]; !ok && !p.oneshot {
			m.drop(p)
		}
	}
	for name, sp := range want {
		if p := m.peers[name]; p != nil {
			p.spec = sp
			p.oneshot = false
			continue
		}
		m.add(sp, now, false)
	}
	m.updateAllow()
	m.changed = true
}

func (m *Manager) add(sp Spec, now time.Time, oneshot bool) *mpeer {
	p := &mpeer{spec: sp, queried: map[uint64]query{}, state: apitype.PeerUnknown, since: now, oneshot: oneshot, qver: wire.Version}
	if ip, err := netip.ParseAddr(sp.Name); err == nil {
		p.addr = ip.Unmap()
	}
	// Spread the first probes over one interval.
	p.due = now.Add(time.Duration(rand.Int64N(int64(m.cfg.Interval))))
	if oneshot {
		p.due = now
	}
	m.peers[sp.Name] = p
	heap.Push(&m.due, p)
	return p
}

func (m *Manager) drop(p *mpeer) {
	// A one-shot waiting on a peer the selection drops gets what there is
	// rather than waiting for its deadline.
	m.answerWaiters(p, nil)
	for n := range p.queried {
		delete(m.nonces, n)
	}
	for seq, f := range m.flights {
		if f.p == p {
			delete(m.flights, seq)
		}
	}
	if p.hidx >= 0 && p.hidx < m.due.Len() && m.due[p.hidx] == p {
		heap.Remove(&m.due, p.hidx)
	}
	delete(m.peers, p.spec.Name)
}

// updateAllow lets the configured peers (resolved addresses) and the
// [probe] allow networks query the control endpoint. Every configured peer
// may query, selected or not: other nodes' selections differ from ours.
func (m *Manager) updateAllow() {
	var addrs []netip.Addr
	for _, sp := range m.cfg.Peers {
		if ip, err := netip.ParseAddr(sp.Name); err == nil {
			addrs = append(addrs, ip)
		}
	}
	for _, p := range m.peers {
		if p.addr.IsValid() {
			addrs = append(addrs, p.addr)
		}
	}
	m.ctl.SetAllow(addrs, m.cfg.Allow)
}

// visit is a peer's turn: look up its QPs if needed, probe every resolved
// path, and schedule the next turn.
func (m *Manager) visit(ctx context.Context, p *mpeer, now time.Time) {
	p.due = now.Add(m.jitter(m.cfg.Interval))
	if !p.addr.IsValid() {
		m.resolve(ctx, p)
		return
	}
	m.refreshPaths(p)
	if len(m.local) == 0 {
		return
	}
	if m.missedQueries(p, now) {
		if p.qMisses >= m.cfg.Threshold.DownAfter && !m.anyResolved(p) {
			m.setPeerState(p, apitype.PeerDown, fmt.Sprintf("its control endpoint %s does not answer; is rdmad running there, and does its [probe] allow or peer list include this node?",
				netip.AddrPortFrom(p.addr, uint16(m.cfg.Port))), now)
		}
	}
	// A version-1 peer due for a version-2 retry (see v2Retry) is asked
	// now rather than at its next resolve, once, on its first path.
	v2Due := p.ver == wire.Version1 && !m.cfg.Auth.Require && now.Sub(p.v2Tried) >= p.v2Wait
	for i, pa := range p.paths {
		if !pa.resolved || now.Sub(pa.asked) >= m.cfg.Resolve || pa.h.state == apitype.PeerDown || (v2Due && i == 0) {
			m.query(p, i, now)
		}
		if pa.resolved && pa.inflight < maxInflightPerPath {
			m.send(p, pa, now)
		}
	}
}

func (m *Manager) anyResolved(p *mpeer) bool {
	for _, pa := range p.paths {
		if pa.resolved {
			return true
		}
	}
	return false
}

// refreshPaths makes p's paths follow the local ports.
func (m *Manager) refreshPaths(p *mpeer) {
	if len(p.paths) == len(m.local) {
		same := true
		for i, pa := range p.paths {
			same = same && pa.local == m.local[i].Key
		}
		if same {
			return
		}
	}
	old := map[string]*path{}
	for _, pa := range p.paths {
		old[pa.local] = pa
	}
	p.paths = p.paths[:0]
	for _, lp := range m.local {
		pa := old[lp.Key]
		if pa == nil {
			pa = &path{local: lp.Key, win: newWindow(m.cfg.Window), h: newHealth(time.Now()), stale: true}
		}
		p.paths = append(p.paths, pa)
	}
	m.changed = true
}

// missedQueries ends the wait for p's queries older than the probe
// timeout and reports whether there were any. Their paths are asked again
// at once, in the other wire version unless a key is required: a peer that
// does not answer version 2 may be an older rdmad (it drops version 2 as
// malformed), and one that does not answer version 1 may require a key.
func (m *Manager) missedQueries(p *mpeer, now time.Time) bool {
	missed := false
	for n, q := range p.queried {
		if now.Sub(q.sent) < m.cfg.Timeout {
			continue
		}
		missed = true
		delete(p.queried, n)
		delete(m.nonces, n)
		if q.idx < len(p.paths) {
			p.paths[q.idx].asked = time.Time{}
		}
		if !m.cfg.Auth.Require {
			p.qver = wire.Version1 + wire.Version2 - q.ver
		}
	}
	if missed {
		p.qMisses++
	}
	return missed
}

// newNonce returns a random nonce no outstanding query has. Nonces are
// random, not a counter: an answer is taken only for an outstanding nonce,
// and an off-path sender cannot guess one.
func (m *Manager) newNonce() uint64 {
	var b [8]byte
	for {
		crand.Read(b[:])
		n := binary.BigEndian.Uint64(b[:])
		if _, used := m.nonces[n]; !used && n != 0 {
			return n
		}
	}
}

func (m *Manager) query(p *mpeer, i int, now time.Time) {
	lp := m.local[i]
	if len(p.queried) >= maxQueriesPerPeer {
		// Forget the oldest: the set of nonces an answer may carry stays
		// small, whatever the schedule does.
		var oldest uint64
		for n, q := range p.queried {
			if oldest == 0 || q.sent.Before(p.queried[oldest].sent) {
				oldest = n
			}
		}
		delete(p.queried, oldest)
		delete(m.nonces, oldest)
	}
	ver := p.qver
	if m.cfg.Auth.Require {
		ver = wire.Version2
	} else if ver == wire.Version1 && now.Sub(p.v2Tried) >= p.v2Wait {
		// Ask a version-1 peer in version 2 now and then: it may have
		// been upgraded (or have come up just after a version-2 query),
		// and it would go on answering version 1.
		ver = wire.Version2
		p.v2Tried = now
		p.v2Wait = min(max(2*p.v2Wait, m.cfg.Interval), v2Retry)
	}
	n := m.newNonce()
	to := netip.AddrPortFrom(p.addr, uint16(m.cfg.Port))
	p.queried[n] = query{idx: i, to: to, ver: ver, sent: now}
	m.nonces[n] = p
	p.paths[i].asked = now
	msg := wire.Message{Version: ver, Nonce: n, Index: uint8(i), Count: uint8(min(len(m.local), 255)),
		QPN: lp.QPN, QKey: lp.QKey, LID: lp.LID, GID: lp.GID}
	if err := m.ctl.Query(to, msg); err != nil {
		m.log.Debug("control query failed", "peer", p.spec.Name, "err", err)
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

// send queues a probe on the path; flush posts it.
func (m *Manager) send(p *mpeer, pa *path, now time.Time) {
	m.seq++
	pa.inflight++
	m.flights[m.seq] = &flight{p: p, pa: pa, sent: now}
	m.order = append(m.order, m.seq)
	m.outbox[pa.local] = append(m.outbox[pa.local], peer.Target{Dst: pa.remote, Seq: m.seq, Auth: m.probeAuth(p)})
}

// flush posts the queued probes, one batch per local port. A probe that
// did not go is not in flight: it counts as not sent, not as lost.
func (m *Manager) flush() {
	for local, ts := range m.outbox {
		if len(ts) == 0 {
			continue
		}
		if n := m.opts.Transport.ProbeBatch(local, ts); n < len(ts) {
			for _, t := range ts {
				if t.Err == nil {
					continue
				}
				m.notSent++
				if f := m.flights[t.Seq]; f != nil {
					delete(m.flights, t.Seq)
					f.pa.inflight--
					m.log.Debug("probe not sent", "peer", f.p.spec.Name, "port", local, "err", t.Err)
				}
			}
		}
		clear(ts)
		m.outbox[local] = ts[:0]
	}
}

// expire turns probes older than the timeout into losses.
func (m *Manager) expire(now time.Time) {
	i := 0
	for ; i < len(m.order); i++ {
		seq := m.order[i]
		f := m.flights[seq]
		if f == nil {
			continue // answered or dropped
		}
		if now.Sub(f.sent) < m.cfg.Timeout {
			break
		}
		delete(m.flights, seq)
		f.pa.inflight--
		f.pa.lost++
		f.pa.sent++
		f.pa.lastSeq = seq
		m.observe(f.p, f.pa, sample{lost: true}, now)
		if f.pa.h.state != apitype.PeerDown && m.peers[f.p.spec.Name] == f.p {
			// Probe again soon: a lost probe is either noise or the
			// start of an outage, and the next ones tell which sooner
			// than a full interval would.
			if soon := now.Add(min(m.cfg.Interval/10, 100*time.Millisecond)); soon.Before(f.p.due) {
				f.p.due = soon
				heap.Fix(&m.due, f.p.hidx)
			}
		}
	}
	m.order = m.order[i:]
	if cap(m.order) > 1024 && len(m.order) < cap(m.order)/4 {
		m.order = slices.Clone(m.order)
	}
}

func (m *Manager) onReply(r peer.Reply) {
	f := m.flights[r.Seq]
	// A reply counts only from the endpoint the path probes, GID and QPN:
	// one that names another (the prober matched on less, or someone
	// answered for the peer) says nothing about this path.
	if f == nil || f.pa.local != r.Local || f.pa.remote.QPN != r.From.QPN || f.pa.remote.GID != r.From.GID {
		return // late (already counted as lost) or not ours
	}
	if m.cfg.Auth.Require && !r.Authenticated {
		return // the engine drops these too; a key required is required
	}
	delete(m.flights, r.Seq)
	f.pa.auth = r.Authenticated
	f.pa.inflight--
	f.pa.sent++
	f.pa.lastSeq = r.Seq
	rtt := max(r.RTT-r.ResponderDelay, 0)
	f.pa.lastRTT = rtt
	m.observe(f.p, f.pa, sample{rtt: rtt, host: r.ResponderDelay}, r.At)
}

func (m *Manager) observe(p *mpeer, pa *path, s sample, now time.Time) {
	pa.stale = true
	m.dirty = true
	from := pa.h.state
	if pa.h.observe(s, pa.win, m.cfg.Threshold, now) {
		m.log.Info("peer path state changed", "peer", p.spec.Name, "port", pa.local, "from", from, "to", pa.h.state, "reason", pa.h.reason)
		m.changed = true
	}
	m.aggregate(p, now)
	m.checkWaiters(p)
}

// aggregate sets the peer's state: the worst of its paths.
func (m *Manager) aggregate(p *mpeer, now time.Time) {
	rank := map[string]int{apitype.PeerUp: 0, apitype.PeerUnknown: 1, apitype.PeerDegraded: 2, apitype.PeerDown: 3}
	st, reason := apitype.PeerUnknown, ""
	for i, pa := range p.paths {
		if !pa.resolved && pa.h.state == apitype.PeerUnknown {
			continue
		}
		if i == 0 || st == apitype.PeerUnknown || rank[pa.h.state] > rank[st] {
			st, reason = pa.h.state, pa.h.reason
			if reason != "" {
				reason = pa.local + ": " + reason
			}
		}
	}
	m.setPeerState(p, st, reason, now)
}

// peerMessageID is the journal MESSAGE_ID of the log line of a peer that
// enters a state (the message catalog explains each).
var peerMessageID = map[string]string{
	apitype.PeerUp:       apitype.MsgPeerUp,
	apitype.PeerDown:     apitype.MsgPeerDown,
	apitype.PeerDegraded: apitype.MsgPeerDegraded,
}

func (m *Manager) setPeerState(p *mpeer, st, reason string, now time.Time) {
	if p.state == st {
		p.reason = reason
		return
	}
	lvl := slog.LevelInfo
	if st == apitype.PeerDown || st == apitype.PeerDegraded {
		lvl = slog.LevelWarn
	}
	var attrs []any
	if id := peerMessageID[st]; id != "" {
		attrs = append(attrs, apitype.MessageIDKey, id)
	}
	attrs = append(attrs, "peer", p.spec.Name)
	if p.spec.Group != "" {
		attrs = append(attrs, "group", p.spec.Group)
	}
	attrs = append(attrs, "from", p.state, "to", st)
	if reason != "" || lvl == slog.LevelWarn {
		attrs = append(attrs, "reason", reason) // down and degraded always say why
	}
	m.log.Log(context.Background(), lvl, "peer "+st, attrs...)
	p.state, p.reason, p.since = st, reason, now
	m.changed = true
}

// onAnswer takes an answer to one of this node's control queries: it must
// carry a nonce outstanding for a peer and come from the exact address and
// port that query went to; the nonce is consumed. Anything else is
// dropped: an off-path sender can neither guess a random nonce nor answer
// from the peer's control port.
func (m *Manager) onAnswer(a answer, now time.Time) {
	if a.query {
		m.onQuery(a)
		return
	}
	p := m.nonces[a.m.Nonce]
	if p == nil {
		return // not an answer to a query of ours, or already answered
	}
	q, ok := p.queried[a.m.Nonce]
	if !ok || q.to != a.from || (m.cfg.Auth.Require && !a.m.Authenticated) {
		return
	}
	delete(p.queried, a.m.Nonce)
	delete(m.nonces, a.m.Nonce)
	p.qMisses = 0
	p.lastAns = now
	p.nodeID = a.m.NodeID
	if p.ver != a.m.Version || p.authenticated != a.m.Authenticated {
		m.changed = true
		if a.m.Version == wire.Version1 && p.ver != wire.Version1 {
			// Newly version 1: retry version 2 soon, then less often.
			p.v2Tried, p.v2Wait = now, m.cfg.Interval
		}
		if len(m.cfg.Auth.Key) > 0 && !a.m.Authenticated {
			// auth = "prefer": answered, but flagged.
			m.log.Warn("peer answers without authentication", "peer", p.spec.Name, "wire_version", a.m.Version,
				"hint", "give it the same [probe] key_file; [probe] auth = \"prefer\" accepts it until then")
		}
	}
	p.ver, p.qver, p.authenticated = a.m.Version, a.m.Version, a.m.Authenticated
	// An answer without a fingerprint (version 1, an older version 2, or
	// a malformed one) makes it unknown: nothing is compared.
	fp, ok, err := a.m.Fingerprint()
	if err != nil {
		m.log.Debug("peer sent a malformed fingerprint", "peer", p.spec.Name, "err", err)
	}
	if ok {
		m.setPeerFingerprint(p, &fp)
	} else {
		m.setPeerFingerprint(p, nil)
	}
	if q.idx >= len(p.paths) {
		return
	}
	pa := p.paths[q.idx]
	if a.m.Count == 0 {
		// The peer has no probing port right now. That is one failed
		// observation of the path, as a lost probe is: down takes
		// down_after of them in a row, so that no single message can
		// take a healthy peer down.
		pa.resolved = false
		m.checkMismatch(p)
		m.observe(p, pa, sample{lost: true}, now)
		if pa.h.state == apitype.PeerDown {
			pa.h.reason = "it has no active RDMA port to answer probes on"
			m.aggregate(p, now)
		}
		return
	}
	ep := peer.Endpoint{GID: a.m.GID, QPN: a.m.QPN, QKey: a.m.QKey, LID: a.m.LID}
	pa.remoteIdx = a.m.Index
	if pa.remote != ep {
		// A new QP (the peer restarted): probes to the old one are
		// lost for good, and a down path probes again at once.
		pa.remote = ep
		pa.stale = true
		m.changed = true
	}
	first := !pa.resolved
	pa.resolved = true
	m.checkMismatch(p)
	if first && pa.inflight == 0 {
		m.send(p, pa, now)
	}
}

// resolve looks a host name up without blocking the loop; at most four
// lookups run at once.
func (m *Manager) resolve(ctx context.Context, p *mpeer) {
	if m.resolving >= 4 {
		return
	}
	m.resolving++
	name := p.spec.Name
	m.lookups.Add(1)
	go func() {
		defer m.lookups.Done()
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		ips, err := m.opts.Lookup(rctx, name)
		r := resolution{name: name, err: err}
		if err == nil && len(ips) > 0 {
			r.addr = ips[0].Unmap()
		} else if err == nil {
			r.err = errors.New("no address")
		}
		select {
		case m.resolved <- r:
		case <-ctx.Done():
		}
	}()
}

func (m *Manager) onResolved(r resolution) {
	m.resolving--
	p := m.peers[r.name]
	if p == nil {
		return
	}
	now := time.Now()
	if r.err != nil {
		p.addrErr = r.err.Error()
		m.setPeerState(p, apitype.PeerDown, fmt.Sprintf("cannot resolve %s: %v; fix the name or use an address", r.name, r.err), now)
		// Ask again after 1, 2, 4 ... intervals, at most every resolve
		// interval: a name that does not resolve must not cost a lookup
		// per probe interval, for every such peer.
		p.lookupFails++
		p.due = now.Add(min(m.cfg.Interval<<min(p.lookupFails-1, 16), max(m.cfg.Resolve, m.cfg.Interval)))
		heap.Fix(&m.due, p.hidx)
		return
	}
	p.addr, p.addrErr, p.lookupFails = r.addr, "", 0
	m.updateAllow()
	p.due = time.Now()
	heap.Fix(&m.due, p.hidx)
}

// startOneshot probes a configured peer now.
func (m *Manager) startOneshot(ctx context.Context, o *oneshot, now time.Time) {
	var sp *Spec
	for i := range m.cfg.Peers {
		if m.cfg.Peers[i].Name == o.name {
			sp = &m.cfg.Peers[i]
		}
	}
	p := m.peers[o.name]
	if p == nil && sp == nil {
		for _, c := range m.peers {
			if c.addr.String() == o.name {
				p = c
			}
		}
	}
	if p == nil && sp == nil {
		m.answerOne(o, apitype.Peer{}, fmt.Errorf("peers: %q is not a configured peer; add it as a [[peer]] or to [probe] peers_file", o.name))
		return
	}
	if len(m.local) == 0 {
		m.answerOne(o, apitype.Peer{}, fmt.Errorf("peers: cannot probe %s: %v", o.name, m.localErrOr()))
		return
	}
	if m.waiting >= maxWaiting {
		m.answerOne(o, apitype.Peer{}, fmt.Errorf("peers: %d one-shot probes are waiting already; try again in a moment", m.waiting))
		return
	}
	if p == nil {
		p = m.add(*sp, now, true)
	}
	o.p = p
	p.waiters = append(p.waiters, o)
	m.waiting++
	m.urgent.Store(true)
	p.waitFrom = m.seq
	p.due = now
	heap.Fix(&m.due, p.hidx)
	// Bound the wait: control lookup plus one probe timeout. The timer
	// names this one-shot, so it ends this wait and no other.
	time.AfterFunc(time.Second+2*m.cfg.Timeout, func() {
		select {
		case m.expired <- o:
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
	p.waiters = slices.DeleteFunc(p.waiters, func(w *oneshot) bool { return w == o })
	m.waiting--
	m.urgent.Store(m.waiting > 0)
	m.answerOne(o, m.peerState(p), nil)
	if p.oneshot && len(p.waiters) == 0 && m.peers[p.spec.Name] == p {
		m.drop(p)
	}
}

// answerOne answers o once; done has room for exactly that answer.
func (m *Manager) answerOne(o *oneshot, sp apitype.Peer, err error) {
	if o.answered {
		return
	}
	o.answered = true
	o.err = err
	o.done <- sp
}

func (m *Manager) localErrOr() error {
	if m.localErr != nil {
		return m.localErr
	}
	return errors.New("no local probe port")
}

// checkWaiters answers one-shot waiters once every path has a result newer
// than the request.
func (m *Manager) checkWaiters(p *mpeer) {
	if len(p.waiters) == 0 {
		return
	}
	for _, pa := range p.paths {
		if pa.lastSeq <= p.waitFrom {
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
	if len(p.waiters) == 0 {
		return
	}
	sp := m.peerState(p)
	for _, o := range p.waiters {
		m.answerOne(o, sp, err)
	}
	m.waiting -= len(p.waiters)
	m.urgent.Store(m.waiting > 0)
	p.waiters = nil
}

func (m *Manager) failOneshots(err error) {
	for _, p := range m.peers {
		for _, o := range p.waiters {
			m.answerOne(o, apitype.Peer{}, err)
		}
		p.waiters = nil
	}
	m.waiting = 0
	m.urgent.Store(false)
}

func (m *Manager) jitter(d time.Duration) time.Duration {
	// ±10%: peers that started together drift apart instead of probing in
	// bursts.
	return d - d/10 + time.Duration(rand.Int64N(int64(d/5)+1))
}
