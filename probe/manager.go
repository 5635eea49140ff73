// Package probe probes other rdmad nodes: it keeps the peer set from the
// configuration, selects a bounded share of it ([probe] max_peers), finds
// each peer's probe QP through the peer's control endpoint, schedules UD
// probes with jitter, and turns answers and timeouts into per-path states
// with hysteresis (up, degraded, down). The probes themselves go through a
// Prober: verbs/peer on RDMA hardware.
package probe

import (
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
	// per address).
	Admit(local string, src ud.Endpoint, from netip.Addr, until time.Time) error
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
// post with others (a tenth of peer_interval when that is shorter, within
// the ±10% jitter): at a thousand peers a second, one wakeup per 100 ms
// sends about a hundred probes with one doorbell instead of a hundred
// wakeups. A wakeup costs far more than a probe (a goroutine and a
// thread woken, on both sides of the transport), and a peer's next turn
// is counted from its due time, not from the early send, so probes do not
// come more often than peer_interval.
const maxBatchWindow = 100 * time.Millisecond

// maxBatch bounds the probes and queries one wakeup sends: a port has 256
// send slots (verbs/peer), shared with the answers to other nodes' probes,
// and the peers' control sockets take a burst of queries. When more are
// due within the batch window, the next wakeup follows at once.
const maxBatch = 128

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
	repMu   sync.Mutex
	repBuf  []ud.Reply
	repKick chan struct{}
	urgent  atomic.Bool
	// Control answers (and the queries this node answered, for their
	// fingerprints) wait in ansBuf for the next pass in the same way: at
	// ten thousand peers they come a few hundred a second.
	ansMu    sync.Mutex
	ansBuf   []answer
	resolved chan resolution
	oneshots chan *oneshot
	// expired receives a one-shot whose wait is over. It is a channel of
	// its own, never a name in oneshots: nothing a caller can spell ends
	// another caller's wait.
	expired chan *oneshot

	// Owned by Run's goroutine.
	cfg      Settings
	ctl      *Control
	peers    map[string]*mpeer
	due      dueHeap
	flights  flights // probes in flight, by sequence number
	seq      uint64
	nonces   map[uint64]*mpeer // outstanding control queries by nonce
	epoch    uint64
	local    []ud.LocalPort
	localGen uint32 // counts the changes of local
	localErr error
	localIPs map[netip.Addr]bool
	// byAddr finds the selected peers of an address (a query carries
	// only its source's): sorted by address, made again when addrStale.
	byAddr    []addrPeer
	addrStale bool
	// sorted is the peers in name order, for the state; sortStale when
	// the selection changed since it was sorted.
	sorted    []*mpeer
	sortStale bool
	tallies   map[string]groupTally // groupFaults' scratch
	// allowStale: the control endpoint's allow list is rebuilt at the end
	// of the pass (once, however many peers were resolved in it).
	allowStale bool
	// scratch is the space every path's window computes its percentiles
	// in (window.stats).
	scratch []uint16
	// fps holds the peers' fingerprints by their encoding, shared by the
	// peers that sent the same (fingerprint.go).
	fps       map[string]*sharedFP
	dirty     bool
	changed   bool
	published time.Time
	// changedAt is when a state change was last published: changes are
	// published at once, but at most every minPublishGap.
	changedAt time.Time
	notSent   uint64
	resolving int
	// lookups counts the resolve goroutines; Run waits for them.
	lookups  sync.WaitGroup
	outbox   map[string][]ud.Target // probes of this tick by local port
	repSpare []ud.Reply             // the other reply buffer
	ansSpare []answer               // the other answer buffer
	batched  int                    // probes and queries of this pass
	waiting  int                    // one-shot probes waiting
	faults   map[suspect]string     // local port or group -> why it is the suspect
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
	// timer bounds the wait; stopped when the one-shot is answered, so
	// none outlives Run (one that fired already only sends to expired,
	// which has room for every waiting one-shot, or sees ctx done).
	timer *time.Timer
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
	addrStr     string // addr as text, for the state ("" until made; setAddr clears it)
	addrErr     string
	lookupFails int // failed lookups in a row
	nodeID      uint64
	nodeIDStr   string // nodeID as text, for the state ("" until made)
	paths       []*path
	due         time.Time
	dueVer      uint32         // the version of its entry in the due heap
	queried     []pendingQuery // outstanding queries (at most maxQueriesPerPeer)
	qMisses     int
	// ver is the wire version the peer last answered in (0: none yet),
	// qver the one to ask in next; authenticated whether its last answer
	// carried a valid tag. v2Tried is when a version-1 peer was last
	// asked in version 2.
	ver, qver     uint8
	authenticated bool
	inDue         bool // it has a turn in the due heap
	// pathsGen is the Manager.localGen the paths were last made for.
	pathsGen uint32
	v2Tried  time.Time
	v2Wait   time.Duration // before the next version-2 retry
	lastAns  time.Time
	state    string
	reason   string
	since    time.Time
	waiters  []*oneshot
	waitFrom uint64 // waiters want results of probes with seq > waitFrom
	oneshot  bool   // added only for a one-shot probe
	// fp is the fingerprint the peer last sent (nil: unknown), mismatch
	// the mismatches last logged, as text, and mm the mismatches
	// themselves (checkMismatch keeps them current).
	fp       *sharedFP
	mismatch string
	mm       []apitype.Mismatch
}

// A pendingQuery is an outstanding control query and its nonce.
type pendingQuery struct {
	nonce uint64
	query
}

// findQuery returns the index of p's outstanding query with nonce n, or -1.
func (p *mpeer) findQuery(n uint64) int {
	for i := range p.queried {
		if p.queried[i].nonce == n {
			return i
		}
	}
	return -1
}

// removeQuery forgets p's outstanding query i.
func (p *mpeer) removeQuery(i int) {
	p.queried = append(p.queried[:i], p.queried[i+1:]...)
	if len(p.queried) == 0 {
		p.queried = nil // most peers have none outstanding most of the time
	}
}

// A path is the probes from one local port to the peer's matching port.
// One is kept for every path of every selected peer: it holds no more than
// it must (the statistics are computed when published, not kept).
type path struct {
	local    string
	remote   ud.Endpoint
	gidStr   string // remote.GID as text, for the state ("" until made)
	resolved bool
	asked    time.Time
	win      window // in the path: one cache line less to touch per probe
	h        health
	sent     uint64
	lost     uint64
	lastRTT  time.Duration
	lastSeq  uint64 // last probe with a result
	inflight int
	auth     bool // the last reply carried a valid tag
	// remoteIdx is the peer's port index the path probes (the answer's
	// Index): the port of the peer's fingerprint to compare with.
	remoteIdx uint8
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
		settings: make(chan Settings, 1), repKick: make(chan struct{}, 1),
		resolved: make(chan resolution, 64), oneshots: make(chan *oneshot, 16), expired: make(chan *oneshot, maxWaiting),
		peers: map[string]*mpeer{}, outbox: map[string][]ud.Target{}, nonces: map[uint64]*mpeer{},
		fps: map[string]*sharedFP{}}
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
func (m *Manager) OnReply(r ud.Reply) {
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

// maxQueuedAnswers bounds the control messages waiting for the manager's
// pass; more are dropped (a query not answered is asked again).
const maxQueuedAnswers = 4096

// queueAnswer hands a control message to the manager's next pass. It never
// blocks. The manager wakes at once only while a one-shot probe waits;
// otherwise it runs within the batch window while queries are outstanding
// (tick).
func (m *Manager) queueAnswer(a answer) {
	m.ansMu.Lock()
	if len(m.ansBuf) < maxQueuedAnswers {
		m.ansBuf = append(m.ansBuf, a)
	}
	m.ansMu.Unlock()
	if m.urgent.Load() {
		select {
		case m.repKick <- struct{}{}:
		default:
		}
	}
}

// takeAnswers handles the queued control messages.
func (m *Manager) takeAnswers(now time.Time) {
	m.ansMu.Lock()
	as := m.ansBuf
	m.ansBuf = m.ansSpare[:0]
	m.ansMu.Unlock()
	for i := range as {
		m.onAnswer(as[i], now)
		as[i] = answer{}
	}
	m.ansSpare = as[:0]
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
	// The fingerprint exists before the endpoint answers anyone and before
	// the first queries go: a peer that gets an answer without one takes
	// this node for an rdmad that predates fingerprints until it asks
	// again, minutes later.
	m.local, m.localErr = m.opts.Transport.Ports()
	m.refreshFingerprint(time.Now(), true)
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
	m.takeAnswers(now)
	m.expire(now)
	// A changed fingerprint goes with this pass's queries.
	m.refreshFingerprint(now, false)
	// Visit the peers due now and those due within the batch window:
	// their probes leave a little early, together, at most maxBatch of
	// them.
	window := min(m.cfg.Interval/10, maxBatchWindow)
	horizon := now.Add(window)
	m.batched = 0
	for m.due.len() > 0 && !m.due.top().due.After(horizon) && m.batched < maxBatch {
		p := m.due.top()
		m.visit(ctx, p, now)
		m.due.fix(p)
	}
	m.flush()
	if m.allowStale {
		m.updateAllow()
	}
	next := m.publish(now)
	if m.due.len() > 0 && m.due.top().due.Before(next) {
		next = m.due.top().due
	}
	if f := m.flights.front(); f != nil && f.sent.Add(m.cfg.Timeout).Before(next) {
		next = f.sent.Add(m.cfg.Timeout)
	}
	if len(m.nonces) > 0 && now.Add(window).Before(next) {
		// Answers to the queries wait in ansBuf: take them within the
		// batch window.
		next = now.Add(window)
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
		Ports:    func() []ud.LocalPort { p, _ := m.opts.Transport.Ports(); return p },
		Admit:    m.opts.Transport.Admit,
		AdmitFor: 3 * m.cfg.Resolve,
		Auth:     m.cfg.Auth,
		OnAnswer: func(from netip.AddrPort, msg wire.Message) {
			m.queueAnswer(answer{from: from, m: msg})
		},
		OnQuery: func(from netip.AddrPort, msg wire.Message) {
			if !hasExt(msg, wire.ExtFingerprint) {
				return
			}
			m.queueAnswer(answer{from: from, m: msg, query: true})
		},
		Counters:  &m.ctlCounters,
		Linger:    min(m.cfg.Interval/10, maxBatchWindow),
		Bandwidth: m.opts.Bandwidth,
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
	m.localGen++
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
	p := &mpeer{spec: sp, state: apitype.PeerUnknown, since: now, oneshot: oneshot, qver: wire.Version}
	if ip, err := netip.ParseAddr(sp.Name); err == nil {
		m.setAddr(p, ip.Unmap())
	}
	// Spread the first probes over one interval.
	p.due = now.Add(time.Duration(rand.Int64N(int64(m.cfg.Interval))))
	if oneshot {
		p.due = now
	}
	m.peers[sp.Name] = p
	m.sortStale = true
	m.due.push(p)
	return p
}

// setAddr sets p's address.
func (m *Manager) setAddr(p *mpeer, addr netip.Addr) {
	if p.addr != addr {
		p.addr, p.addrStr = addr, ""
		m.addrStale = true
	}
}

// An addrPeer is an entry of the index of peers by address.
type addrPeer struct {
	addr netip.Addr
	p    *mpeer
}

// peersAt returns the selected peers whose address is addr.
func (m *Manager) peersAt(addr netip.Addr) []addrPeer {
	if m.addrStale {
		m.byAddr = m.byAddr[:0]
		for _, p := range m.peers {
			if p.addr.IsValid() {
				m.byAddr = append(m.byAddr, addrPeer{p.addr, p})
			}
		}
		slices.SortFunc(m.byAddr, func(a, b addrPeer) int { return a.addr.Compare(b.addr) })
		if cap(m.byAddr) > 2*len(m.byAddr)+64 {
			m.byAddr = slices.Clip(m.byAddr)
		}
		m.addrStale = false
	}
	i, _ := slices.BinarySearchFunc(m.byAddr, addr, func(e addrPeer, a netip.Addr) int { return e.addr.Compare(a) })
	j := i
	for j < len(m.byAddr) && m.byAddr[j].addr == addr {
		j++
	}
	return m.byAddr[i:j]
}

func (m *Manager) drop(p *mpeer) {
	// A one-shot waiting on a peer the selection drops gets what there is
	// rather than waiting for its deadline.
	m.answerWaiters(p, nil)
	for _, q := range p.queried {
		delete(m.nonces, q.nonce)
	}
	m.flights.forget(p)
	m.due.remove(p)
	m.releaseFingerprint(p)
	delete(m.peers, p.spec.Name)
	m.sortStale, m.addrStale = true, true
}

// updateAllow lets the configured peers (resolved addresses) and the
// [probe] allow networks query the control endpoint. Every configured peer
// may query, selected or not: other nodes' selections differ from ours.
func (m *Manager) updateAllow() {
	m.allowStale = false
	addrs := make([]netip.Addr, 0, len(m.cfg.Peers))
	for _, sp := range m.cfg.Peers {
		if ip, err := netip.ParseAddr(sp.Name); err == nil {
			addrs = append(addrs, ip)
		}
	}
	for _, p := range m.peers {
		if _, err := netip.ParseAddr(p.spec.Name); err != nil && p.addr.IsValid() {
			addrs = append(addrs, p.addr) // a host name, resolved
		}
	}
	m.ctl.SetAllow(addrs, m.cfg.Allow)
}

// visit is a peer's turn: look up its QPs if needed, probe every resolved
// path, and schedule the next turn.
func (m *Manager) visit(ctx context.Context, p *mpeer, now time.Time) {
	// The next turn counts from this one's due time, which may be up to
	// the batch window ahead; from now when the turn is late by more than
	// half an interval (a first turn, a stalled loop).
	base := p.due
	if now.Sub(base) > m.cfg.Interval/2 {
		base = now
	}
	p.due = base.Add(m.jitter(m.cfg.Interval))
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
	if p.pathsGen == m.localGen && len(p.paths) == len(m.local) {
		return // the ports did not change since the paths were made
	}
	p.pathsGen = m.localGen
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
			pa = &path{local: lp.Key, win: *newSharedWindow(m.cfg.Window, &m.scratch), h: newHealth(time.Now())}
		}
		p.paths = append(p.paths, pa)
	}
	m.changed = true
	m.checkMismatch(p)
}

// missedQueries ends the wait for p's queries older than the probe
// timeout and reports whether there were any. Their paths are asked again
// at once, in the other wire version unless a key is required: a peer that
// does not answer version 2 may be an older rdmad (it drops version 2 as
// malformed), and one that does not answer version 1 may require a key.
func (m *Manager) missedQueries(p *mpeer, now time.Time) bool {
	missed := false
	defer func() {
		if len(p.queried) == 0 {
			p.queried = nil
		}
	}()
	p.queried = slices.DeleteFunc(p.queried, func(q pendingQuery) bool {
		if now.Sub(q.sent) < m.cfg.Timeout {
			return false
		}
		missed = true
		delete(m.nonces, q.nonce)
		if q.idx < len(p.paths) {
			p.paths[q.idx].asked = time.Time{}
		}
		if !m.cfg.Auth.Require {
			p.qver = wire.Version1 + wire.Version2 - q.ver
		}
		return true
	})
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
		oldest := 0
		for i, q := range p.queried {
			if q.sent.Before(p.queried[oldest].sent) {
				oldest = i
			}
		}
		delete(m.nonces, p.queried[oldest].nonce)
		p.removeQuery(oldest)
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
	m.batched++
	to := netip.AddrPortFrom(p.addr, uint16(m.cfg.Port))
	p.queried = append(p.queried, pendingQuery{nonce: n, query: query{idx: i, to: to, ver: ver, sent: now}})
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
	m.batched++
	pa.inflight++
	m.flights.push(m.seq, flight{p: p, pa: pa, sent: now})
	m.outbox[pa.local] = append(m.outbox[pa.local], ud.Target{Dst: pa.remote, Seq: m.seq, Auth: m.probeAuth(p)})
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
				if f := m.flights.get(t.Seq); f != nil {
					f.pa.inflight--
					m.log.Debug("probe not sent", "peer", f.p.spec.Name, "port", local, "err", t.Err)
					*f = flight{}
				}
			}
		}
		clear(ts)
		m.outbox[local] = ts[:0]
	}
}

// expire turns probes older than the timeout into losses.
func (m *Manager) expire(now time.Time) {
	for {
		ff := m.flights.front() // answered and dropped ones are skipped
		if ff == nil || now.Sub(ff.sent) < m.cfg.Timeout {
			break
		}
		seq, f := m.flights.frontSeq(), *ff
		m.flights.pop()
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
				m.due.fix(f.p)
			}
		}
	}
}

func (m *Manager) onReply(r ud.Reply) {
	f := m.flights.get(r.Seq)
	// A reply counts only from the endpoint the path probes, GID and QPN:
	// one that names another (the prober matched on less, or someone
	// answered for the peer) says nothing about this path.
	if f == nil || f.pa.local != r.Local || f.pa.remote.QPN != r.From.QPN || f.pa.remote.GID != r.From.GID {
		return // late (already counted as lost) or not ours
	}
	if m.cfg.Auth.Require && !r.Authenticated {
		return // the engine drops these too; a key required is required
	}
	p, pa := f.p, f.pa
	*f = flight{} // answered: a hole the front skips
	pa.auth = r.Authenticated
	pa.inflight--
	pa.sent++
	pa.lastSeq = r.Seq
	// The state is judged on the round trip this node measured (its own
	// send and receive times), never on it minus the responder's claimed
	// delay: a peer that claims almost all of a slow round trip as its
	// own would otherwise dodge the RTT threshold. The claim is kept
	// apart, as the host delay the status shows.
	pa.lastRTT = r.RTT
	m.observe(p, pa, sample{rtt: r.RTT, host: r.ResponderDelay}, r.At)
}

func (m *Manager) observe(p *mpeer, pa *path, s sample, now time.Time) {
	m.dirty = true
	from := pa.h.state
	if pa.h.observe(s, &pa.win, m.cfg.Threshold, now) {
		m.log.Info("peer path state changed", "peer", p.spec.Name, "port", pa.local, "from", from, "to", pa.h.state, "reason", pa.h.reason)
		m.changed = true
	}
	m.aggregate(p, now)
	m.checkWaiters(p)
}

// aggregate sets the peer's state: the worst of its paths.
func (m *Manager) aggregate(p *mpeer, now time.Time) {
	st := apitype.PeerUnknown
	var worst *path
	for i, pa := range p.paths {
		if !pa.resolved && pa.h.state == apitype.PeerUnknown {
			continue
		}
		if i == 0 || st == apitype.PeerUnknown || stateRank(pa.h.state) > stateRank(st) {
			st, worst = pa.h.state, pa
		}
	}
	reason := ""
	if worst != nil && worst.h.reason != "" {
		reason = portReason(p.reason, worst.local, worst.h.reason)
	}
	m.setPeerState(p, st, reason, now)
}

// stateRank orders states from the best: a peer is as good as its worst
// path.
func stateRank(st string) int {
	switch st {
	case apitype.PeerUp:
		return 0
	case apitype.PeerUnknown:
		return 1
	case apitype.PeerDegraded:
		return 2
	case apitype.PeerDown:
		return 3
	}
	return 0
}

// portReason returns "local: reason", reusing prev when it is that text
// already: a peer's reason is worked out after every probe, and is the
// same almost every time.
func portReason(prev, local, reason string) string {
	if len(prev) == len(local)+2+len(reason) && prev[:len(local)] == local && prev[len(local):len(local)+2] == ": " && prev[len(local)+2:] == reason {
		return prev
	}
	return local + ": " + reason
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
	qi := p.findQuery(a.m.Nonce)
	if qi < 0 || p.queried[qi].to != a.from || (m.cfg.Auth.Require && !a.m.Authenticated) {
		return
	}
	q := p.queried[qi]
	p.removeQuery(qi)
	delete(m.nonces, a.m.Nonce)
	p.qMisses = 0
	p.lastAns = now
	if p.nodeID != a.m.NodeID {
		p.nodeID, p.nodeIDStr = a.m.NodeID, ""
	}
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
	fp, err := m.peerFingerprint(a.m)
	if err != nil {
		m.log.Debug("peer sent a malformed fingerprint", "peer", p.spec.Name, "err", err)
	}
	m.setPeerFingerprint(p, fp)
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
	ep := ud.Endpoint{GID: a.m.GID, QPN: a.m.QPN, QKey: a.m.QKey, LID: a.m.LID}
	pa.remoteIdx = a.m.Index
	if pa.remote != ep {
		// A new QP (the peer restarted): probes to the old one are
		// lost for good, and a down path probes again at once.
		pa.remote, pa.gidStr = ep, ""
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
		m.due.fix(p)
		return
	}
	m.setAddr(p, r.addr)
	p.addrErr, p.lookupFails = "", 0
	m.allowStale = true
	p.due = time.Now()
	m.due.fix(p)
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
	m.due.fix(p)
	// Bound the wait: control lookup plus one probe timeout. The timer
	// names this one-shot, so it ends this wait and no other.
	o.timer = time.AfterFunc(time.Second+2*m.cfg.Timeout, func() {
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
	if o.timer != nil {
		o.timer.Stop()
	}
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
