package probe

import (
	"math"
	"math/rand/v2"
	"net"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/rdmad/rdmad/client/apitype"
	"github.com/rdmad/rdmad/probe/ud"
	"github.com/rdmad/rdmad/probe/wire"
)

// The peer table holds the selected peers, by name, by address and in
// name order, and what the selection is made of: this host's addresses
// and the epoch. A peer's paths live in it, and so does the space their
// windows compute percentiles in.
type peerTable struct {
	byName map[string]*mpeer
	// byAddr finds the selected peers of an address (a query carries
	// only its source's): sorted by address, made again when addrStale.
	byAddr    []addrPeer
	addrStale bool
	// sorted is the peers in name order, for the state; sortStale when
	// the selection changed since it was sorted.
	sorted    []*mpeer
	sortStale bool
	// localIPs are this host's addresses (a shared peers file lists it
	// too); epoch is the selection epoch in force ([probe] rotate).
	localIPs map[netip.Addr]bool
	epoch    uint64
	// gen counts the changes of who is in the table: a state built for
	// another generation lists other peers (publisher.partial).
	gen uint64
	// scratch is the space every path's window computes its percentiles
	// in (window.stats).
	scratch []uint16
}

func newPeerTable() peerTable { return peerTable{byName: map[string]*mpeer{}} }

// insert adds p to the table; remove takes it out.
func (t *peerTable) insert(p *mpeer) {
	t.byName[p.spec.Name] = p
	t.sortStale = true
	t.gen++
	p.pubIdx = -1
}

func (t *peerTable) remove(p *mpeer) {
	delete(t.byName, p.spec.Name)
	t.sortStale, t.addrStale = true, true
	t.gen++
}

// An mpeer is a selected peer. What few peers ever have (a name that does
// not resolve, a version-1 peer, one-shot waiters, mismatched settings)
// is in rare, made when first needed: a field of it in every peer cost
// every peer 176 bytes (docs/PROBES.md, "Memory per peer").
type mpeer struct {
	spec      Spec
	addr      netip.Addr
	addrStr   string // addr as text, for the state ("" until made; setAddr clears it)
	nodeID    uint64
	nodeIDStr string // nodeID as text, for the state ("" until made)
	paths     []*path
	// due is the next turn (monoNs: 8 bytes, not a time.Time's 24;
	// dueAt, setDue).
	due    int64
	dueVer uint32 // the version of its entry in the due heap
	// pathsGen is the Manager.localGen the paths were last made for.
	pathsGen uint32
	queried  *queryList // outstanding queries (queries); nil while none
	qMisses  int32
	// ver is the wire version the peer last answered in (0: none yet),
	// qver the one to ask in next; authenticated whether its last answer
	// carried a valid tag.
	ver, qver     uint8
	authenticated bool
	inDue         bool // it has a turn in the due heap
	// oneshot: added only for a one-shot probe; pubDirty: its own state
	// changed since the last publish (changedPeer).
	oneshot  bool
	pubDirty bool
	// pubIdx is the peer's index in the last state built in full
	// (publisher.last), -1 when it is not there.
	pubIdx int32
	state  string
	reason string
	since  int64 // when it entered state (UnixNano, as a path's health)
	// fp is the fingerprint the peer last sent (nil: unknown).
	fp   *sharedFP
	rare *peerRare
	// clock holds the recent clock offset samples of the peer's answers.
	clock clockFilter
}

// A peerRare is the part of a peer that most peers never use (mpeer).
type peerRare struct {
	lookupFails int // failed lookups in a row
	// v2Tried is when a version-1 peer was last asked in version 2, and
	// v2Wait the time before the next retry.
	v2Tried time.Time
	v2Wait  time.Duration
	waiters []*oneshot
	// waitFrom: waiters want results of probes with seq > waitFrom.
	waitFrom uint64
	// mismatch is the mismatches last logged, as text, and mm the
	// mismatches themselves (checkMismatch keeps them current);
	// mmLogged is the mismatches last logged and mmLogAt when; mmHeld
	// counts the changes since that the log held back.
	mismatch string
	mm       []apitype.Mismatch
	mmLogged string
	mmLogAt  time.Time
	mmHeld   int32
}

// noRare is what a peer without a peerRare reads.
var noRare peerRare

// r returns p's rare part to read: a zero one when p has none.
func (p *mpeer) r() *peerRare {
	if p.rare == nil {
		return &noRare
	}
	return p.rare
}

// w returns p's rare part to write, made if it has none.
func (p *mpeer) w() *peerRare {
	if p.rare == nil {
		p.rare = &peerRare{}
	}
	return p.rare
}

// A pendingQuery is an outstanding control query and its nonce.
type pendingQuery struct {
	nonce uint64
	query
}

// A queryList is a peer's outstanding control queries (at most
// maxQueriesPerPeer). A peer holds one only while it waits for answers
// (spareQueries), through a pointer: 8 bytes in every peer rather than a
// slice's 24 (docs/PROBES.md, "Memory per peer").
type queryList struct{ q []pendingQuery }

// queries returns p's outstanding queries.
func (p *mpeer) queries() []pendingQuery {
	if p.queried == nil {
		return nil
	}
	return p.queried.q
}

// findQuery returns the index of p's outstanding query with nonce n, or -1.
func (p *mpeer) findQuery(n uint64) int {
	for i, q := range p.queries() {
		if q.nonce == n {
			return i
		}
	}
	return -1
}

// anyPathDown reports whether one of p's paths is down.
func (p *mpeer) anyPathDown() bool {
	for _, pa := range p.paths {
		if pa.h.state == apitype.PeerDown {
			return true
		}
	}
	return false
}

// removeQuery forgets p's outstanding query i.
func (c *controlEndpoint) removeQuery(p *mpeer, i int) {
	l := p.queried
	l.q = append(l.q[:i], l.q[i+1:]...)
	c.spareQueries(p)
}

// spareQueries takes back p's list of outstanding queries when none is
// left: most peers have none outstanding most of the time, so a peer
// holds one only while it waits (a list of 104-byte entries kept by every
// peer would cost more than the rest of its control state), and the next
// peer to ask takes it (takeQueries) rather than allocating one.
func (c *controlEndpoint) spareQueries(p *mpeer) {
	if p.queried == nil || len(p.queried.q) > 0 {
		return
	}
	if len(c.spare) < maxSpareQueries {
		clear(p.queried.q[:cap(p.queried.q)])
		p.queried.q = p.queried.q[:0]
		c.spare = append(c.spare, p.queried)
	}
	p.queried = nil
}

// takeQueries gives p a list for its outstanding queries when it has
// none: a spare one if there is, else a new one.
func (c *controlEndpoint) takeQueries(p *mpeer) {
	if p.queried != nil {
		return
	}
	c.handed++
	n := len(c.spare) - 1
	if n < 0 {
		p.queried = &queryList{}
		return
	}
	p.queried, c.spare[n] = c.spare[n], nil
	c.spare = c.spare[:n]
}

// A path is the probes from one local port to the peer's matching port.
// One is kept for every path of every selected peer: it holds no more than
// it must (the statistics are computed when published, not kept).
type path struct {
	local  string
	remote ud.Endpoint
	gidStr string // remote.GID as text, for the state ("" until made)
	// asked is when the path's peer was last asked for it (monoNs; 0:
	// not since it was made or last had to be asked again): 8 bytes
	// rather than a time.Time's 24 (TestPeerSizeClass).
	asked    int64
	win      window // in the path: one cache line less to touch per probe; empty on several flows (fl), whose windows share one array
	h        health
	sent     uint64
	lost     uint64
	lastRTT  time.Duration
	rtt      apitype.SharedRTTHistogram // every answered probe's RTT; the published state points at it
	lastSeq  uint64                     // last probe with a result
	inflight int32
	// The bools and remoteIdx together, beside inflight: a path in the
	// 352-byte size class (TestPeerSizeClass).
	resolved bool
	auth     bool // the last reply carried a valid tag
	// stale: the peer's state was set apart from its paths (setPeerStateApart);
	// the path's next sample sets it from the paths again.
	stale bool
	// remoteIdx is the peer's port index the path probes (the answer's
	// Index): the port of the peer's fingerprint to compare with.
	remoteIdx uint8
	// fl is the path's flows when it probes on more than one (flows.go).
	fl *flowSet
}

// reselect computes the selected peers for the current epoch and adds or
// drops peers accordingly. Paths of kept peers keep their history.
func (m *Manager) reselect(now time.Time) {
	want := m.peers.selection(m.opts.NodeID, &m.cfg)
	for name, p := range m.peers.byName {
		if _, ok := want[name]; !ok && !p.oneshot {
			m.drop(p)
		}
	}
	for name, sp := range want {
		if p := m.peers.byName[name]; p != nil {
			p.spec = sp
			p.oneshot = false
			continue
		}
		m.add(sp, now, false)
	}
	m.updateAllow()
	m.pub.changed = true
}

// selection returns the peers of cfg this node probes in the current
// epoch, by name: Select's share of them, leaving out this host itself.
func (t *peerTable) selection(self uint64, cfg *Settings) map[string]Spec {
	cands := make([]Candidate, 0, len(cfg.Peers))
	specs := make([]Spec, 0, len(cfg.Peers))
	for _, sp := range cfg.Peers {
		if ip, err := netip.ParseAddr(sp.Name); err == nil && t.localIPs[ip.Unmap()] {
			continue // this node itself, listed in a shared peers file
		}
		cands = append(cands, Candidate{Name: sp.Name, Group: sp.Group})
		specs = append(specs, sp)
	}
	want := map[string]Spec{}
	for _, i := range Select(self, cfg.Group, cands, cfg.MaxPeers, t.epoch) {
		want[specs[i].Name] = specs[i]
	}
	return want
}

func (m *Manager) add(sp Spec, now time.Time, oneshot bool) *mpeer {
	p := &mpeer{spec: sp, state: apitype.PeerUnknown, since: now.UnixNano(), oneshot: oneshot, qver: wire.Version}
	if ip, err := netip.ParseAddr(sp.Name); err == nil {
		m.peers.setAddr(p, ip.Unmap())
	}
	// Spread the first probes over one interval.
	p.setDue(now.Add(time.Duration(rand.Int64N(int64(m.cfg.Interval)))))
	if oneshot {
		p.setDue(now)
	}
	m.peers.insert(p)
	m.sched.due.push(p)
	return p
}

// setAddr sets p's address.
func (t *peerTable) setAddr(p *mpeer, addr netip.Addr) {
	if p.addr != addr {
		p.addr, p.addrStr = addr, ""
		t.addrStale = true
	}
}

// An addrPeer is an entry of the index of peers by address.
type addrPeer struct {
	addr netip.Addr
	p    *mpeer
}

// peersAt returns the selected peers whose address is addr.
func (t *peerTable) at(addr netip.Addr) []addrPeer {
	if t.addrStale {
		t.byAddr = t.byAddr[:0]
		for _, p := range t.byName {
			if p.addr.IsValid() {
				t.byAddr = append(t.byAddr, addrPeer{p.addr, p})
			}
		}
		slices.SortFunc(t.byAddr, func(a, b addrPeer) int { return a.addr.Compare(b.addr) })
		if cap(t.byAddr) > 2*len(t.byAddr)+64 {
			t.byAddr = slices.Clip(t.byAddr)
		}
		t.addrStale = false
	}
	i, _ := slices.BinarySearchFunc(t.byAddr, addr, func(e addrPeer, a netip.Addr) int { return e.addr.Compare(a) })
	j := i
	for j < len(t.byAddr) && t.byAddr[j].addr == addr {
		j++
	}
	return t.byAddr[i:j]
}

func (m *Manager) drop(p *mpeer) {
	// A one-shot waiting on a peer the selection drops gets what there is
	// rather than waiting for its deadline.
	m.answerWaiters(p, nil)
	for _, q := range p.queries() {
		delete(m.control.nonces, q.nonce)
	}
	m.sched.flights.forget(p)
	m.sched.due.remove(p)
	m.fps.release(p)
	if p.rare != nil {
		p.rare.mmHeld = 0 // out of the held log
	}
	m.peers.remove(p)
	m.ann.stale = true
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
	m.ann.stale = true // paths of ports gone take theirs along
	for _, lp := range m.local {
		pa := old[lp.Key]
		if pa == nil {
			pa = &path{local: lp.Key, win: *newWindow(m.cfg.Window), h: newHealth(time.Now())}
		}
		p.paths = append(p.paths, pa)
	}
	m.changedPeer(p)
	m.pub.suspects = true
	m.checkMismatch(p)
}

// inOrder returns the peers in name order, sorting them again only
// when the selection changed.
func (t *peerTable) inOrder() []*mpeer {
	if !t.sortStale && len(t.sorted) == len(t.byName) {
		return t.sorted
	}
	t.sorted = t.sorted[:0]
	for _, p := range t.byName {
		t.sorted = append(t.sorted, p)
	}
	slices.SortFunc(t.sorted, func(a, b *mpeer) int { return strings.Compare(a.spec.Name, b.spec.Name) })
	if cap(t.sorted) > 2*len(t.sorted)+64 {
		t.sorted = slices.Clip(t.sorted)
	}
	t.sortStale = false
	return t.sorted
}

// localAddrs returns this host's addresses, so that a shared peers file
// can list every node including this one.
func localAddrs() map[netip.Addr]bool {
	out := map[netip.Addr]bool{}
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return out
	}
	for _, a := range addrs {
		if pn, ok := a.(*net.IPNet); ok {
			if ip, ok := netip.AddrFromSlice(pn.IP); ok {
				out[ip.Unmap()] = true
			}
		}
	}
	return out
}

// monoBase is the origin of monoNs: monoSlack before the package began,
// so that a time set back from a time of now (spreadRefresh sets a
// path's last query back by up to a resolve interval) is still a
// positive number, not clamped to the process's start.
var monoBase = time.Now().Add(-monoSlack)

// monoSlack is how far before the package's start monoNs counts from.
const monoSlack = 1000 * time.Hour

// monoNs returns t (with its monotonic reading) as nanoseconds since
// monoBase, never 0: the per-path times are kept so, in 8 bytes
// rather than a time.Time's 24, and 0 is "never".
func monoNs(t time.Time) int64 { return int64(t.Sub(monoBase)) + 1 }

// monoTime is the time of monoNs ns (with a monotonic reading).
func monoTime(ns int64) time.Time { return monoBase.Add(time.Duration(ns - 1)) }

// dueAt returns p's next turn; setDue sets it.
func (p *mpeer) dueAt() time.Time { return monoTime(p.due) }

func (p *mpeer) setDue(t time.Time) { p.due = monoNs(t) }

// askedAgo is how long ago the path's peer was last asked for it, the
// longest duration when it was not.
func (pa *path) askedAgo(now time.Time) time.Duration {
	if pa.asked == 0 {
		return math.MaxInt64
	}
	return time.Duration(monoNs(now) - pa.asked)
}
